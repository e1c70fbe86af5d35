"""``rl-gpu tune --population K``: K trials at a time trained together as one population in this process.

Each batch asks the study for K trials, draws each one's learning rate, ``clip_coef`` and ``ent_coef``
(:func:`rl_gpu.cli.search_spaces.ppo_member_space`), and trains them with
:func:`rl_gpu.training.population.train_members`: every trial keeps its own run folder (``OUTPUT/trial-N``),
validations, pruning callback and final evaluation, while the device steps all their rows as one batch and
updates all their networks in one batched call. A trial the pruner stops is frozen; the others go on. Each trial's
heartbeat is recorded while its batch runs, so that a killed process's trials are marked failed when the sweep is
continued, as :meth:`optuna.study.Study.optimize` does for one trial at a time.
"""

from __future__ import annotations

import math
import threading
import time
import warnings

from rl_gpu.cli.tune_trials import GRACE_SECONDS, HEARTBEAT_SECONDS, Pruning, SweepInterrupted, trial_score
from rl_gpu.core.errors import UsageError


def check_can_batch(cfg) -> None:
    """Refuse, before anything is written, an environment whose rows a population cannot step as one batch."""
    from rl_gpu.envs.registry import make

    try:
        env = make(cfg.env, num_envs=1, device="cpu")
    except (ImportError, ValueError) as e:
        raise UsageError(f"--env {cfg.env}: {e}") from None
    spec = env.spec
    if getattr(env, "close", None):
        env.close()
    # PPO's population steps one tensor environment of every trial's rows; MAPPO's and IPPO's step the worlds
    # through the agent collector, host-stepped ones (VMAS) included. Reward terms are kept per environment.
    if (cfg.algo == "ppo" and not spec.functional) or spec.reward_terms:
        raise UsageError(f"--population: {cfg.env} is stepped on the host (or reports reward terms per row), so "
                         f"--algo {cfg.algo}'s trials cannot be stepped as one batch; give --population 1 (trials one "
                         "at a time)")


class _Heartbeats:
    """Records the batch's trials' heartbeats every ``HEARTBEAT_SECONDS`` until stopped."""

    def __init__(self, storage, trials) -> None:
        self.storage, self.ids = storage, [t._trial_id for t in trials]  # Optuna keeps the id private
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="tune-heartbeat", daemon=True)

    def _beat(self) -> None:
        while True:
            for trial_id in self.ids:
                self.storage.record_heartbeat(trial_id)
            if self.done.wait(HEARTBEAT_SECONDS):
                return

    def __enter__(self) -> _Heartbeats:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def optimize_in_populations(cfg, study) -> None:
    """Run batches of ``cfg.population`` trials (``cfg``: the sweep's ``TuneConfig``) until the study holds
    ``cfg.trials`` finished or pruned ones (the last batch is smaller when fewer are left). A stop signal raises
    :class:`SweepInterrupted` once every trial of the batch has saved its checkpoint (those trials are marked
    failed)."""
    import optuna

    from rl_gpu.training.population import train_members

    done_states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert GRACE_SECONDS > HEARTBEAT_SECONDS
    # Optuna warns that heartbeats are meant for Study.optimize: here _Heartbeats records them as optimize does.
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used", category=UserWarning)
    while True:
        optuna.storages.fail_stale_trials(study)
        left = cfg.trials - len(study.get_trials(deepcopy=False, states=done_states))
        if left <= 0:
            return
        trials = [study.ask() for _ in range(min(cfg.population, left))]
        try:
            configs = [cfg.trial_config(t.number, cfg.space(t, cfg.budget)) for t in trials]
        except UsageError:
            for t in trials:
                study.tell(t, state=optuna.trial.TrialState.FAIL)
            raise
        prunings = [Pruning(t) for t in trials]
        lines: list[str] = []
        start = time.perf_counter()
        with _Heartbeats(study._storage, trials):
            try:
                results, _ = train_members(configs, [cfg.seed] * len(trials), log=lines.append, display="off",
                                           callbacks=[[p] for p in prunings])
            except BaseException:
                for t in trials:
                    study.tell(t, state=optuna.trial.TrialState.FAIL)
                raise
        seconds = round(time.perf_counter() - start, 1)
        interrupted = None
        for t, pruning, result in zip(trials, prunings, results):
            t.set_user_attr("seconds", seconds)
            t.set_user_attr("batch", trials[0].number)
            if result is None or result.status == "interrupted":
                interrupted = interrupted or f"trial {t.number} interrupted by {result.reason if result else '?'}"
                study.tell(t, state=optuna.trial.TrialState.FAIL)
                continue
            t.set_user_attr("run_dir", str(result.run_dir))
            if pruning.pruned_at is not None:
                t.set_user_attr("pruned_at", pruning.pruned_at)
                print(f"trial {t.number}: pruned at step {pruning.pruned_at:,} (validation {pruning.last[0]:.4g})",
                      flush=True)
                study.tell(t, state=optuna.trial.TrialState.PRUNED)
                continue
            score = trial_score(result.summary)
            print(f"trial {t.number}: {result.status}, score {score:.4g}", flush=True)
            if math.isfinite(score):
                study.tell(t, score)
            else:
                study.tell(t, state=optuna.trial.TrialState.FAIL)
        print(f"batch of trials {trials[0].number}..{trials[-1].number}: {seconds:.0f} s together", flush=True)
        if interrupted:
            raise SweepInterrupted(interrupted)
