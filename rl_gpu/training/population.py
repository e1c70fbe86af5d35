"""``rl-gpu train --parallel``: every seed of a run trained at once in one process, as the population its
algorithm's spec names (PPO's: :class:`~rl_gpu.algos.population.ppo.PopulationPPO`) and, with ``--pbt``, the
population-based training it names over it.

Each seed keeps the whole of a lone run: a :class:`~rl_gpu.training.runner.Trainer` with its own environment,
PPO, validations, early stop, checkpoints and summary in ``OUTPUT/seed-N/`` (the same files, in the same format,
as ``--seeds`` without ``--parallel`` writes). The trainers run in threads; each one's ``iterate`` waits at a
barrier until every trainer still running has asked for its next iteration, and the last to arrive runs one
population iteration for all of them (so the device work is done by one thread at a time). A trainer that stops
(success, budget, fault, pause) leaves the barrier; its rows keep being stepped, frozen.

A stop signal is noticed by every trainer at its next update boundary (or when its next evaluation starts) and
each saves its last.pt; a second signal interrupts at once. Every seed's last.pt resumes alone, without
``--parallel`` (``--resume OUTPUT/seed-N``), exactly as a lone run's does, except under ``--pbt``, whose members'
hyper-parameters are no longer their configuration's (such a resume is refused).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch import Tensor, nn

from rl_gpu.algos.base import Iteration, PhaseTimer, no_phase
from rl_gpu.algos.registry import algorithm_spec
from rl_gpu.core.errors import UsageError
from rl_gpu.core.seeding import derive_seed
from rl_gpu.runtime.checkpoint import atomic_write_json
from rl_gpu.runtime.distributed import world_size
from rl_gpu.runtime.run_files import RunLocks
from rl_gpu.training.config import TrainConfig
from rl_gpu.training.events import CallbackLike, check_callbacks
from rl_gpu.training.outcome import RunResult, report_result
from rl_gpu.training.preflight import check_env_and_memory, prepare
from rl_gpu.training.run_dir import check_run_dirs, prepare_run_dir
from rl_gpu.training.runner import Trainer
from rl_gpu.training.seed_summary import describe as describe_seeds
from rl_gpu.training.seed_summary import seed_summary
from rl_gpu.training.signals import StopRequest

PBT_FILE = "pbt.json"
"""``OUTPUT/pbt.json``: the PBT lineage (initial hyper-parameters, every round's scores and exploits)."""


class PopulationStop(StopRequest):
    """One :class:`StopRequest` shared by every member's trainer. The signal arrives in the main thread, which
    only waits for the trainers: the first signal is recorded (each trainer stops at its next boundary), a
    second raises ``KeyboardInterrupt`` there."""

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum


class Coordinator:
    """The barrier between the member trainers and the population: :meth:`iterate` returns member ``k``'s
    metrics of the next population iteration, run once every active member has asked for it."""

    def __init__(self, population: Any, pbt: Any, lineage: Callable[[dict], None]) -> None:
        self.population = population
        self.pbt = pbt
        self.write_lineage = lineage
        self.active = [True] * population.k
        self.waiting: set[int] = set()
        self.generation = 0
        self.result: Iteration | None = None
        self.error: BaseException | None = None
        self.cond = threading.Condition(threading.RLock())
        """Held by the trainer that is running (re-entrant; released while a trainer waits in :meth:`iterate`)."""

    def _ready(self) -> bool:
        return any(self.active) and all(i in self.waiting for i, on in enumerate(self.active) if on)

    def _step(self) -> None:
        """One population iteration (the caller holds the lock)."""
        try:
            self.result = self.population.iterate(self.active)
            if self.pbt is not None:
                self.pbt.after_iteration(self.result, self.active)
                if self.pbt.iteration % self.pbt.interval == 0:
                    self.write_lineage(self.pbt.lineage)
        except BaseException as e:  # noqa: BLE001 -- handed to every waiting trainer, which re-raises it
            self.error = e
        self.waiting.clear()
        self.generation += 1
        self.cond.notify_all()

    def iterate(self, k: int) -> Iteration:
        with self.cond:
            if self.error is not None:
                raise RuntimeError("the population's iteration failed") from self.error
            generation = self.generation
            self.waiting.add(k)
            if self._ready():
                self._step()
            while self.generation == generation:
                self.cond.wait()
            if self.error is not None:
                raise RuntimeError("the population's iteration failed") from self.error
            return self.result.member(k)

    def leave(self, k: int) -> None:
        """Member ``k`` stopped: it is frozen, and the others no longer wait for it."""
        with self.cond:
            self.active[k] = False
            self.waiting.discard(k)
            if self._ready() and self.error is None:
                self._step()


class MemberPPO:
    """The :class:`~rl_gpu.algos.base.Algorithm` a member's trainer talks to: its own PPO for everything but
    ``iterate``, which goes through the population."""

    def __init__(self, ppo: Any, coordinator: Coordinator, index: int) -> None:
        self.ppo = ppo
        self.coordinator = coordinator
        self.index = index
        self.metric_names = ppo.metric_names
        self.num_steps = ppo.num_steps
        self.resume_notes: tuple[str, ...] = ()

    @property
    def policy(self) -> nn.Module:
        return self.ppo.policy

    def iterate(self, *, phase: PhaseTimer = no_phase) -> Iteration:
        with phase("iterate"):
            return self.coordinator.iterate(self.index)

    def initial_policy(self) -> nn.Module:
        return self.ppo.initial_policy()

    def set_progress(self, fraction: float | Tensor) -> None:
        self.ppo.set_progress(fraction)

    def state_dict(self) -> dict[str, Any]:
        return self.ppo.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ppo.load_state_dict(state)


class MemberTrainer(Trainer):
    """A member's trainer; under PBT its checkpoints say so (their hyper-parameters are not the saved
    configuration's, so a lone resume could not continue them exactly and is refused)."""

    pbt = False

    def checkpoint_payload(self, validation=None, resumable: bool = True) -> dict:
        payload = super().checkpoint_payload(validation, resumable)
        if self.pbt:
            payload["pbt_member"] = True
        return payload


def check_population(config: TrainConfig) -> None:
    """Refuse what a population cannot run, before anything is written."""
    spec = algorithm_spec(config.algo)
    spec.check_run(config)  # names the algorithms that train populations when this one does not
    if config.pbt and not spec.pbt:
        raise UsageError(f"--pbt: --algo {config.algo} has no population-based training")
    if config.self_play:
        raise UsageError("--parallel and --self-play cannot be combined: a population's members play "
                         "uniform-random opponents")
    if world_size() > 1:
        raise UsageError("--parallel trains a population in one process: do not launch it under torchrun")
    if getattr(config.algo_config(), "symmetry", False):
        raise UsageError("--symmetry mirrors one run's rollouts in its update; a population's stacked update does "
                         "not (give it without --parallel)")
    if getattr(config.algo_config(), "max_policy_lag", None) is not None:
        raise UsageError("--max-policy-lag bounds one run's updates: a population's members update together "
                         "(give it without --parallel)")
    if config.pbt and len(config.seeds) < 4:
        raise UsageError(f"--pbt needs at least 4 seeds (the bottom quarter copies the top quarter), got "
                         f"{len(config.seeds)}")


def train_population(config: TrainConfig, log: Callable[[str], None] = print, stop_after: int | None = None,
                     display: str = "auto", callbacks: Iterable[CallbackLike] = (),
                     measure: Callable | None = None) -> list[RunResult]:
    """Train every seed of ``config`` at once (``--parallel``); writes what :func:`~rl_gpu.training.runner.train`
    writes (``OUTPUT/seed-N/`` each, and ``OUTPUT/summary.json`` over the seeds once all have finished), plus
    ``OUTPUT/pbt.json`` with ``--pbt``. ``measure``: as :func:`~rl_gpu.training.runner.train`'s (each member's
    validations scored by the game's exact exploitability)."""
    check_population(config)
    if check_callbacks(callbacks):
        raise UsageError("callbacks are not delivered under --parallel yet (its members run in threads of their "
                         "own): train the seeds without --parallel to use them")
    k = len(config.seeds)
    extra = ([config.output / "summary.json"] if k > 1 else []) + ([config.output / PBT_FILE] if config.pbt else [])
    for path in extra:
        if not config.overwrite and os.path.lexists(path):
            raise UsageError(f"{path} already exists (from an earlier run); pass --overwrite to replace it, or "
                             "choose another --output")

    def write_lineage(lineage: dict) -> None:
        atomic_write_json(config.output / PBT_FILE, {"seeds": list(config.seeds), **lineage})

    results, trainers = train_members([config] * k, list(config.seeds), log, stop_after, display,
                                      lineage=write_lineage if config.pbt else None, measure=measure)
    done = [r for r in results if r is not None]
    if len(done) == k and all(r.finished for r in done) and k > 1:
        across = seed_summary([r.summary for r in done], trainers[0].goal.multi_player)
        summary_path = config.output / "summary.json"
        atomic_write_json(summary_path, {"env": config.env, "output": str(config.output), "parallel": True,
                                         **({"pbt": str(config.output / PBT_FILE)} if config.pbt else {}),
                                         **across})
        log(describe_seeds(across) + f"\nsummary of all seeds: {summary_path}")
    return done


def train_members(configs: Sequence[TrainConfig], seeds: Sequence[int], log: Callable[[str], None] = print,
                  stop_after: int | None = None, display: str = "auto",
                  callbacks: Sequence[Iterable[CallbackLike]] | None = None,
                  lineage: Callable[[dict], None] | None = None,
                  measure: Callable | None = None) -> tuple[list[RunResult | None], list[Trainer]]:
    """Train K runs as one population: member k is ``configs[k]``'s seed ``seeds[k]``, in
    ``configs[k].output / seed-N``, answering ``callbacks[k]``. The configurations may differ only in what the
    algorithm's population lets members differ in (PPO's: learning rate, ``ent_coef``, ``clip_coef``). With
    ``lineage``, population-based training runs over them (the first configuration's ``pbt_interval``) and its
    lineage is handed to ``lineage`` as it grows; ``measure`` scores every member's validations (the game's
    exploitability; members validate one at a time). Returns each member's result (None for one that raised before
    it had one) and the trainers."""
    first = configs[0]
    for c in configs:
        check_population(c)
    callbacks = [check_callbacks(c) for c in callbacks] if callbacks is not None else [()] * len(configs)
    device = prepare(first)
    if first.compile not in ("auto", "off"):
        raise UsageError(f"--parallel runs eagerly: --compile {first.compile} is not supported with it "
                         "(use --compile off or auto)")
    configs = [dataclasses.replace(c, compile="off") for c in configs]
    run_dirs = [c.output / f"seed-{seed}" for c, seed in zip(configs, seeds)]
    if len(set(run_dirs)) < len(run_dirs):
        raise UsageError("a population's members need run folders of their own")
    for c, run_dir in zip(configs, run_dirs):
        check_run_dirs([run_dir], c.overwrite)
    k = len(configs)
    check_env_and_memory(dataclasses.replace(first, num_envs=first.num_envs * k), device)
    display = "plain" if display in ("auto", "live") else display
    trainers = [MemberTrainer(c, seed, run_dir, log, display, measure, callbacks=cb)
                for c, seed, run_dir, cb in zip(configs, seeds, run_dirs, callbacks)]
    if trainers[0].reward_terms:
        raise UsageError(f"--parallel: {first.env} reports reward terms per environment, which a population "
                         "stepping every seed's rows as one batch does not keep apart; run the seeds without "
                         "--parallel")
    stepper = trainers[0].make_env(first.num_envs * k, 0)
    spec = algorithm_spec(first.algo)
    try:
        population = spec.build_population([t.algo for t in trainers], stepper)
    except ValueError as e:
        raise UsageError(f"--parallel: {e}") from None
    pbt = (spec.build_pbt(population, first.pbt_interval, derive_seed(seeds[0], "pbt")) if lineage else None)
    coordinator = Coordinator(population, pbt, lineage or (lambda _: None))
    with RunLocks(run_dirs, log):  # one process per run folder, for the whole run
        for i, (c, trainer) in enumerate(zip(configs, trainers)):
            trainer.pbt = pbt is not None
            trainer.algo = MemberPPO(trainer.algo, coordinator, i)
            prepare_run_dir(trainer.run_dir, c.overwrite)
        log(f"population of {k} members (seeds {', '.join(map(str, seeds))}) on {device}: N={first.num_envs} rows "
            f"each, {k * first.num_envs} stepped together" + (f"; PBT every {first.pbt_interval} iterations"
                                                                if pbt else ""))
        results: list[RunResult | None] = [None] * k
        errors: list[BaseException] = []

        def run(i: int, stop: StopRequest) -> None:
            # One trainer runs at a time: each holds the coordinator's lock except while it waits for the next
            # population iteration. Several threads interleaving small tensor operations (validations, final
            # evaluations, checkpoints) hand the interpreter lock back and forth at every operation, which made
            # them several times slower than the same work done one member after another.
            with coordinator.cond:
                try:
                    results[i] = report_result(trainers[i].run(stop, stop_after), log)
                except BaseException as e:  # noqa: BLE001 -- re-raised in the main thread once all are done
                    errors.append(e)
                finally:
                    coordinator.leave(i)

        with PopulationStop() as stop:
            threads = [threading.Thread(target=run, args=(i, stop), name=f"member-{i}", daemon=True)
                       for i in range(k)]
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
    if pbt is not None:
        lineage(pbt.lineage)
    if errors:
        raise errors[0]
    return results, trainers
