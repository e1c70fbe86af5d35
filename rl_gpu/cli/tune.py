"""``rl-gpu tune``: a hyper-parameter sweep on Optuna (``pip install 'rl-gpu[tune]'``).

Each trial is one ``rl-gpu train`` run of ``--budget`` environment steps in ``OUTPUT/trial-N/`` with settings drawn
from the algorithm's search space (:mod:`rl_gpu.cli.search_spaces`) over the environment's preset; its score is the
final evaluation of its best.pt on fresh seeds (mean return, or the goal's score). The run validates
``--evals`` times, and each validation's score is reported to the pruner (median or hyperband), which may stop the
trial there (pruned: its score is its last validation's), from a third of the budget on.

The study lives in a database (``--storage``, default ``sqlite:///OUTPUT/sweep.db``): a sweep that was killed
continues when the same command is given again (a trial that was running when its process died is marked failed
once its heartbeat is 60 s old, and not counted), and several processes given the same ``--storage`` and
``--study-name`` share one study; ``--trials`` counts finished and pruned trials of all of them together. When no
trial is left to run, the best trial's settings are written as ``OUTPUT/best.json`` (``rl-gpu train --config
OUTPUT/best.json`` trains them) and a table of every trial (number, state, score, pruned at, seconds, settings) is
printed and saved as ``OUTPUT/trials.csv``.

With ``--population K`` (PPO on tensor environments; MAPPO and IPPO, VMAS included) K trials at a time train
together as one population in this process (:func:`rl_gpu.training.population.train_members`: one rollout of
every trial's rows, one batched update); they draw only what a population's members may differ in (learning
rate, ``clip_coef``, ``ent_coef``) over the preset, and a pruned trial's rows are frozen while the others go on.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Literal

from rl_gpu.cli.parsing import quiet_broken_pipe, run_command, settings_of
from rl_gpu.cli.tune_trials import GRACE_SECONDS, HEARTBEAT_SECONDS, Pruning, SweepInterrupted, trial_score
from rl_gpu.core.errors import UsageError
from rl_gpu.core.schema import check_bounds, check_fields, flag_name
from rl_gpu.training.config import DEFAULT_ENV, MAX_TIMESTEPS

PROG = "rl-gpu tune"
@dataclasses.dataclass(frozen=True)
class TuneConfig:
    """Search an algorithm's hyper-parameters on an environment with Optuna: a study of trials, each a training run
    of --budget steps scored by its final evaluation, pruned on its validations, stored in a database so that a
    killed sweep continues and several processes can share it."""

    env: str = DEFAULT_ENV
    """environment id, as rl-gpu train takes it"""
    algo: str = "ppo"
    """algorithm with a search space: ppo, mappo, ippo, sac, td3"""
    trials: int = 20
    """finished and pruned trials the study should hold when done (all processes together)"""
    budget: int = 100_000
    """environment steps of each trial (rl-gpu train --total-timesteps)"""
    evals: int = 10
    """validations per trial: the points where the pruner may stop it"""
    pruner: Literal["median", "hyperband", "none"] = "median"
    """median: stop a trial whose validation is below the median of earlier trials at the same step (after 3 trials
    and a third of the budget); hyperband: Optuna's Hyperband over the validations; none: run every trial to its end"""
    storage: str | None = None
    """the study's database (sqlite:///PATH.db, or any SQLAlchemy URL); None: sqlite:///OUTPUT/sweep.db"""
    study_name: str | None = None
    """the study in the database; None: ENV-ALGO"""
    output: Path = Path("artifacts/tune")
    """folder of the trials' runs (trial-N/), best.json and trials.csv"""
    fixed: tuple[str, ...] = ()
    """settings every trial shares, over the preset, as NAME=VALUE (rl-gpu train's flags with underscores; VALUE
    as JSON, else text), e.g. --fixed num_envs=64 eval_episodes=32; a drawn setting may not be fixed too"""
    population: int = 1
    """trials trained at once as one population (PPO on tensor environments; MAPPO and IPPO, VMAS included); above 1
    they draw only the learning rate, clip_coef and ent_coef, the rest being the preset's"""
    seed: int = 0
    """each trial's training seed (the same for all, so trials differ by their settings) and the sampler's"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, else CPU"""
    threads: int = 1
    """torch intra-op CPU threads"""

    def __post_init__(self) -> None:
        check_fields(self, label=flag_name)
        check_bounds(self, {"trials": 100_000, "budget": MAX_TIMESTEPS, "evals": 1000, "threads": None,
                           "population": 256},
                     label=flag_name)
        if not 0 <= self.seed < 2**63:
            raise UsageError(f"--seed must be between 0 and 2**63 - 1, got {self.seed}")
        for flag, value in (("--study-name", self.study_name), ("--storage", self.storage)):
            if value is not None and (not value.strip() or not value.isprintable() or len(value) > 1000):
                raise UsageError(f"{flag} must be printable text of 1 to 1000 characters, got {value!r}")

    def fixed_settings(self) -> dict:
        """``--fixed`` as ``rl_gpu.train`` overrides."""
        return settings_of(self.fixed, "--fixed")

    @property
    def space(self):
        """The trials' search space (a function of an Optuna trial and the budget)."""
        from rl_gpu.cli.search_spaces import MEMBER_SPACES, SPACES

        return (MEMBER_SPACES if self.population > 1 else SPACES)[self.algo]

    def trial_config(self, number: int, overrides: dict):
        """The training configuration of trial ``number`` with its drawn ``overrides``: ``--evals`` validations
        (where the pruner may stop it) over exactly the budget."""
        from rl_gpu.cli.api import build_config

        config = build_config(self.env, self.algo, self.budget, output=self.output / f"trial-{number}",
                              seed=self.seed, device=self.device, threads=self.threads, quiet=True,
                              **self.fixed_settings(), **overrides)
        updates = max(1, self.budget // (config.num_envs * (config.num_steps or 1)))
        return dataclasses.replace(config, eval_every=max(1, updates // self.evals), max_updates=10**9)

    @property
    def study(self) -> str:
        return self.study_name or f"{self.env}-{self.algo}"

    @property
    def storage_url(self) -> str:
        return self.storage or f"sqlite:///{self.output.resolve() / 'sweep.db'}"


def _objective(cfg: TuneConfig, study):
    import optuna

    from rl_gpu.training.runner import train as train_run

    def objective(trial) -> float:
        config = cfg.trial_config(trial.number, cfg.space(trial, cfg.budget))
        pruning = Pruning(trial)
        lines: list[str] = []
        start = time.perf_counter()
        (result,) = train_run(config, log=lines.append, display="off", callbacks=[pruning])
        trial.set_user_attr("seconds", round(time.perf_counter() - start, 1))
        trial.set_user_attr("run_dir", str(result.run_dir))
        if result.status == "interrupted":
            raise SweepInterrupted(f"trial {trial.number} interrupted by {result.reason}")
        if pruning.pruned_at is not None:
            trial.set_user_attr("pruned_at", pruning.pruned_at)
            print(f"trial {trial.number}: pruned at step {pruning.pruned_at:,} (validation "
                  f"{pruning.last[0]:.4g}), {time.perf_counter() - start:.0f} s", flush=True)
            raise optuna.TrialPruned()
        score = trial_score(result.summary)
        print(f"trial {trial.number}: {result.status}, score {score:.4g}, {time.perf_counter() - start:.0f} s",
              flush=True)
        return score

    return objective


def _table(study) -> tuple[str, list[dict]]:
    """The summary table (text) and its rows."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append({"trial": t.number, "state": t.state.name.lower(),
                     "score": "" if t.value is None else f"{t.value:.6g}",
                     "pruned_at": t.user_attrs.get("pruned_at", ""), "seconds": t.user_attrs.get("seconds", ""),
                     "params": " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                        for k, v in sorted(t.params.items()))})
    head = f"{'trial':>5}  {'state':<8} {'score':>10} {'pruned at':>10} {'seconds':>8}  settings"
    lines = [head] + [f"{r['trial']:>5}  {r['state']:<8} {r['score']:>10} {r['pruned_at']!s:>10} "
                      f"{r['seconds']!s:>8}  {r['params']}" for r in rows]
    return "\n".join(lines), rows


def _finish(cfg: TuneConfig, study) -> None:
    """Print and save the table; write best.json from the best trial's settings."""
    import optuna

    from rl_gpu.cli.api import build_config
    from rl_gpu.runtime.files import atomic_write_bytes, atomic_write_json

    text, rows = _table(study)
    print(text)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["trial"])
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(cfg.output / "trials.csv", buf.getvalue().encode())
    done = [t for t in study.get_trials(deepcopy=False) if t.value is not None and math.isfinite(t.value)
            and t.state.name == "COMPLETE"]
    if not done:
        print(f"{PROG}: no trial finished, so there is no best settings file", file=sys.stderr)
        return
    best = max(done, key=lambda t: t.value)
    # The preset with the best trial's draws and the budget (not the trial's own validation schedule).
    overrides = cfg.space(optuna.trial.FixedTrial(best.params), cfg.budget)
    config = build_config(cfg.env, cfg.algo, cfg.budget, output=cfg.output / "best", seed=cfg.seed,
                          device=cfg.device, threads=cfg.threads, **cfg.fixed_settings(), **overrides)
    atomic_write_json(cfg.output / "best.json", config.to_dict())
    print(f"best: trial {best.number}, score {best.value:.6g}; train it with: rl-gpu train --config "
          f"{cfg.output / 'best.json'}  (table: {cfg.output / 'trials.csv'})")


def _open_storage(url: str, storage_class):
    """The study's database; a SQLite path that is a link, a folder or a special file is refused, and so is a URL
    the database cannot be opened at (one line each)."""
    from rl_gpu.runtime.files import check_database_file

    if url.startswith("sqlite:///"):
        check_database_file(url.removeprefix("sqlite:///"), f"--storage {url}")
    try:
        return storage_class(url, heartbeat_interval=HEARTBEAT_SECONDS, grace_period=GRACE_SECONDS)
    except Exception as e:  # SQLAlchemy's errors: a URL it cannot parse, a database it cannot open
        first = " ".join(str(e).split("\n")[0].split())[:300]
        raise UsageError(f"--storage {url}: cannot open the study's database: {type(e).__name__}: {first}") from None


def _drawn(cfg: TuneConfig) -> set[str]:
    """The settings the algorithm's space draws (each trial's overrides)."""
    import optuna

    return set(cfg.space(optuna.create_study().ask(), cfg.budget))


def run_sweep(cfg: TuneConfig) -> int:
    """Run (or continue) the study of ``cfg`` until it holds ``cfg.trials`` finished or pruned trials."""
    try:
        import optuna
        from optuna.storages import RDBStorage
    except ImportError:
        raise UsageError("rl-gpu tune needs Optuna: pip install 'rl-gpu[tune]'") from None
    from rl_gpu.cli.api import build_config
    from rl_gpu.cli.search_spaces import MEMBER_SPACES, SPACES
    from rl_gpu.runtime.files import check_writable

    if cfg.algo not in SPACES:
        raise UsageError(f"--algo {cfg.algo} has no search space; tune one of: {', '.join(SPACES)}")
    if cfg.population > 1 and cfg.algo not in MEMBER_SPACES:
        raise UsageError(f"--population: --algo {cfg.algo} trains no populations; give it to "
                         f"{', '.join(MEMBER_SPACES)}, or leave it at 1")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # the heartbeat's
    # The environment, the algorithm and the settings every trial shares, checked before anything is written.
    fixed = cfg.fixed_settings()
    drawn = _drawn(cfg)
    clash = sorted(drawn & set(fixed))
    if clash:
        raise UsageError(f"--fixed {clash[0]}: the search draws it; fix only settings it does not draw "
                         f"(it draws: {', '.join(sorted(drawn))})")
    build_config(cfg.env, cfg.algo, cfg.budget, output=cfg.output / "check", seed=cfg.seed, device=cfg.device,
                 threads=cfg.threads, **fixed)
    if cfg.population > 1:
        from rl_gpu.cli.tune_population import check_can_batch

        check_can_batch(cfg)
    for name in ("trials.csv", "best.json", "sweep.db"):
        check_writable(cfg.output / name)
    created = not os.path.lexists(cfg.output)
    cfg.output.mkdir(parents=True, exist_ok=True)
    try:
        storage = _open_storage(cfg.storage_url, RDBStorage)
    except UsageError:
        if created and not any(cfg.output.iterdir()):
            cfg.output.rmdir()  # refused: leave nothing behind
        raise
    # No pruning before a third of the budget (RL-Zoo's warm-up): early validations of RL runs rank them poorly.
    pruner = {"median": optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=cfg.budget // 3),
              "hyperband": optuna.pruners.HyperbandPruner(min_resource=1),
              "none": optuna.pruners.NopPruner()}[cfg.pruner]
    study = optuna.create_study(study_name=cfg.study, storage=storage, direction="maximize", load_if_exists=True,
                                sampler=optuna.samplers.TPESampler(seed=cfg.seed), pruner=pruner)
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    held = len(study.get_trials(deepcopy=False, states=states))
    print(f"{PROG}: study {cfg.study!r} in {cfg.storage_url}: {held} of {cfg.trials} trials done; "
          f"{cfg.budget:,} steps each, {cfg.evals} validations, {cfg.pruner} pruner", flush=True)
    if held < cfg.trials:
        try:
            if cfg.population > 1:
                from rl_gpu.cli.tune_population import optimize_in_populations

                optimize_in_populations(cfg, study)
            else:
                study.optimize(_objective(cfg, study), catch=(UsageError, ValueError),
                               callbacks=[optuna.study.MaxTrialsCallback(cfg.trials, states)])
        except SweepInterrupted as e:
            print(f"{PROG}: {e}; the same command continues the sweep", file=sys.stderr)
            _finish(cfg, study)
            return 130
    _finish(cfg, study)
    return 0


def main(argv=None) -> int:
    return run_command(TuneConfig, PROG, argv, run_sweep,
                       lambda cfg: "interrupted; the same command continues the sweep")


if __name__ == "__main__":
    from rl_gpu.cli.safe_path import drop_cwd_from_path

    drop_cwd_from_path()
    sys.exit(quiet_broken_pipe(main)())
