"""The training loop: collect -> update -> log -> validate -> checkpoint, one run per seed.

The trainer only talks to the algorithm's small interface (:class:`rl_gpu.optimization.PPO`: ``policy``,
``update``, ``state_dict``) and to :func:`rl_gpu.rollout.collect`; turn-based games and single-player tasks go
through the same loop and differ only in how a rollout is collected and what makes a validation pass.

A run can stop at any moment and continue exactly: ``last.pt`` holds everything the next update depends on
(model, optimiser with its step counts, normaliser statistics, every random stream, the environments' state,
counters and the validation streak), files are replaced atomically, and a resumed run produces the same
parameters and metrics, bit for bit on the CPU, as one that never stopped.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from rl_gpu.checkpoint import (
    CheckpointError,
    atomic_write_bytes,
    atomic_write_json,
    load_checkpoint,
    save_checkpoint,
)
from rl_gpu.compile import resolve_compile
from rl_gpu.config import TrainConfig
from rl_gpu.envs.base import EnvState, TensorEnv
from rl_gpu.envs.registry import is_known, make, registered_ids
from rl_gpu.evaluation import EvalResult, derive_seed, evaluate_policy, improvement_z
from rl_gpu.optimization import PPO, UpdateMetrics
from rl_gpu.policy import UniformRandomPolicy, policy_for_env
from rl_gpu.rollout import episode_horizon
from rl_gpu.run_logger import PhaseMark, RunLogger

RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "best.pt", "last.pt")

EXIT_SUCCESS, EXIT_GOAL_NOT_MET, EXIT_USAGE, EXIT_NUMERICAL = 0, 1, 2, 3
"""Exit codes of ``rl-gpu train``; an interrupted run exits 128 + the signal number (130, 143)."""

VOLATILE_METRICS = ("time", "steps_per_second", "collect_seconds", "update_seconds")
"""Fields of metrics.jsonl that measure wall time and so differ between otherwise identical runs."""


METRIC_NAMES = tuple(f.name for f in dataclasses.fields(UpdateMetrics))


class PendingUpdate(NamedTuple):
    """An update whose metrics are still on the device."""

    update: int
    train_seconds: float
    phases: list[PhaseMark]
    values: Tensor
    """``[len(METRIC_NAMES) + 4]``: the update's metrics, then episodes ended, their mean return, the learner's
    win rate and the transitions taken."""


class MetricsLine(NamedTuple):
    """One update's ``metrics.jsonl`` line, as :meth:`RunLogger.log_update` takes it."""

    update: int
    global_step: int
    record: dict
    phases: list[PhaseMark]
    finite: bool


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit code 2, and nothing on disk is touched."""


class NumericalError(RuntimeError):
    """Training produced a non-finite loss or gradient; the newest checkpoint predates it."""


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA if available else CPU; ``cuda`` without a usable GPU is a :class:`UsageError`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            "--device cuda was requested but no CUDA device is available "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); use --device cpu or auto"
        )
    if name not in ("cpu", "cuda"):
        raise UsageError(f"--device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def prepare_run_dir(run_dir: Path, overwrite: bool) -> None:
    """Create ``run_dir``; refuse an existing non-empty one unless ``overwrite`` (then clear our files)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"{run_dir} exists and is not a directory")
    if run_dir.exists() and any(run_dir.iterdir()):
        if not overwrite:
            raise UsageError(f"run directory {run_dir} already exists and is not empty; "
                             "pass --overwrite to replace it, --resume to continue it, or choose another --output")
        for name in RUN_FILES:
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(run_dir / "tb", ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)


class StopRequest:
    """SIGINT/SIGTERM handler: the first signal asks the loop to finish its update, save and exit; a second
    one interrupts at once (the newest checkpoint is still intact)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopRequest":
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:
                pass  # not the main thread: signals stay with the caller
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@dataclass
class RunResult:
    """Outcome of one seed's run. ``status`` is ``success``, ``goal_not_met``, ``numerical_error``,
    ``paused`` or ``interrupted``."""

    seed: int
    run_dir: Path
    status: str
    reason: str
    summary: dict

    @property
    def success(self) -> bool:
        return self.status == "success"


class Trainer:
    """One seed's run of PPO on one environment id.

    Args:
        config: the resolved configuration.
        seed: this run's seed (every random stream of the run is derived from it).
        run_dir: where config, metrics, checkpoints and the summary go.
        log: where the trainer's messages go (``print`` routes them through the progress view).
        display: the progress view: ``auto`` (live on a terminal, else plain lines), ``plain`` or ``off``.
    """

    def __init__(self, config: TrainConfig, seed: int, run_dir: Path, log: Callable[[str], None] = print,
                 display: str = "auto") -> None:
        self.config = config
        self.seed = seed
        self.run_dir = run_dir
        self.log = log
        self.display = display
        self.device = resolve_device(config.device)
        torch.manual_seed(derive_seed(seed, "torch"))
        self.env = self.make_env(config.num_envs, derive_seed(seed, "train-env"))
        self.multi_player = self.env.num_players > 1
        self.episodic = self.multi_player
        if config.num_steps is not None:
            self.num_steps = config.num_steps
        else:
            self.num_steps = episode_horizon(self.env) if self.episodic else 128
        if self.episodic and self.num_steps < episode_horizon(self.env):
            raise UsageError(f"--num-steps {self.num_steps} is shorter than the longest {config.env} game "
                             f"({episode_horizon(self.env)} steps): games would be cut")
        try:
            config.minibatch_size(self.num_steps)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if not self.multi_player and config.solve_threshold is None:
            raise UsageError(f"{config.env} is a single-player task: give --solve-threshold (the mean "
                             "validation return that counts as solved)")
        policy = policy_for_env(self.env, config.hidden_sizes, config.normalize_obs, config.init_log_std)
        policy = policy.to(self.device)
        try:
            compile_mode = resolve_compile(config.compile, self.device)
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.algo = PPO(policy, config.ppo, config.learning_rate, derive_seed(seed, "policy"),
                        compile=compile_mode)
        self.initial_policy = copy.deepcopy(policy).eval()
        self.opponent_rng = torch.Generator(device=self.device).manual_seed(derive_seed(seed, "opponent"))
        self.update = 0
        self.global_step = 0
        self.train_seconds = 0.0
        self.best_score = -math.inf
        self.best_update = 0
        self.streak = 0
        self.baseline: EvalResult | None = None

    def make_env(self, num_envs: int, seed: int) -> TensorEnv:
        try:
            return make(self.config.env, num_envs=num_envs, device=self.device, seed=seed, validate_actions=False)
        except ImportError as e:
            raise UsageError(str(e)) from None

    def evaluate(self, policy, episodes: int, purpose: str) -> EvalResult:
        return evaluate_policy(
            policy, self.make_env, episodes, derive_seed(self.seed, purpose),
            deterministic=self.config.deterministic_eval,
        )

    def state_dict(self) -> dict:
        """Everything the next update depends on, as tensors and plain values (``weights_only``-loadable)."""
        return {
            "algorithm": self.algo.state_dict(),
            "initial_policy": self.initial_policy.state_dict(),
            "opponent_rng": self.opponent_rng.get_state(),
            **self._env_state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "update": self.update,
            "global_step": self.global_step,
            "train_seconds": self.train_seconds,
            "best_score": self.best_score,
            "best_update": self.best_update,
            "streak": self.streak,
            "baseline": self.baseline.to_dict() if self.baseline is not None else None,
        }

    def _env_state_dict(self) -> dict:
        """The environments' state and generator, for tensor environments (Gymnasium-backed ones keep their
        state in Python objects, which a weights-only checkpoint cannot hold)."""
        if not isinstance(self.env, TensorEnv):
            return {}
        env_state = self.env.state
        return {
            "env_rng": self.env.generator.get_state(),
            "env_state": {"inner": list(env_state.inner), "episode_step": env_state.episode_step,
                          "episode_return": env_state.episode_return, "done": env_state.done},
        }

    def load_state_dict(self, state: dict) -> None:
        self.algo.load_state_dict(state["algorithm"])
        self.initial_policy.load_state_dict(state["initial_policy"])
        self.opponent_rng.set_state(state["opponent_rng"].cpu())
        if "env_state" in state:
            self.env.generator.set_state(state["env_rng"].cpu())
            saved = state["env_state"]
            inner_type = type(self.env.state.inner)
            self.env.set_state(EnvState(
                inner_type(*(t.to(self.device) for t in saved["inner"])),
                saved["episode_step"].to(self.device), saved["episode_return"].to(self.device),
                saved["done"].to(self.device),
            ))
        else:
            self.log(f"[seed {self.seed}] note: {self.config.env} keeps its state outside tensors; the "
                     "environments restart with a fresh reset, so this resume is not bit-exact")
        torch.set_rng_state(state["torch_rng"].cpu())
        if torch.cuda.is_available() and state["cuda_rng"]:
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        self.update = state["update"]
        self.global_step = state["global_step"]
        self.train_seconds = state["train_seconds"]
        self.best_score = state["best_score"]
        self.best_update = state["best_update"]
        self.streak = state["streak"]
        self.baseline = EvalResult.from_dict(state["baseline"]) if state["baseline"] is not None else None

    def checkpoint_payload(self, validation: EvalResult | None = None) -> dict:
        return {
            "env_id": self.config.env,
            "policy_config": self.algo.policy.config(),
            "update": self.update,
            "global_step": self.global_step,
            "seed": self.seed,
            "config": self.config.to_dict(),
            "validation": validation.to_dict() if validation is not None else None,
            "trainer": self.state_dict(),
            # Kept at the top level too: evaluate/export read the policy without the trainer state.
            "algorithm": {"policy": self.algo.policy.state_dict()},
        }

    def save(self, name: str, validation: EvalResult | None = None) -> None:
        save_checkpoint(self.run_dir / name, self.checkpoint_payload(validation))

    def resume_from(self, path: Path) -> None:
        """Load ``path`` (a ``last.pt``) and drop metric lines written after it, so the run continues as if it
        had never stopped."""
        payload = load_checkpoint(path, self.device)
        if payload.get("env_id") != self.config.env or "trainer" not in payload:
            raise CheckpointError(f"{path}: not a resumable checkpoint of a {self.config.env} run")
        try:
            self.load_state_dict(payload["trainer"])
        except (KeyError, RuntimeError, ValueError, TypeError) as e:
            raise CheckpointError(f"{path}: checkpoint does not match this run ({str(e).splitlines()[0][:160]})")
        metrics = self.run_dir / "metrics.jsonl"
        if metrics.exists():
            kept = []
            for line in metrics.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash
                if record.get("update", 0) <= self.update:
                    kept.append(line)
            atomic_write_bytes(metrics, "".join(line + "\n" for line in kept).encode())

    def passes(self, result: EvalResult, baseline: EvalResult) -> tuple[bool, str]:
        """Whether a validation counts towards success, and a short explanation."""
        if self.multi_player:
            z = improvement_z(result.win_rate, result.episodes, baseline.win_rate, baseline.episodes)
            return z >= self.config.success_z, f"z={z:+.1f} vs initial (need {self.config.success_z:+.1f})"
        threshold = self.config.solve_threshold
        return result.mean_return >= threshold, f"need mean return >= {threshold:g}"

    def score(self, result: EvalResult) -> float:
        return result.win_rate if self.multi_player else result.mean_return

    def describe(self, result: EvalResult) -> str:
        if self.multi_player:
            return f"win rate {result.win_rate:.4f} [{result.ci_low:.4f}, {result.ci_high:.4f}]"
        return f"mean return {result.mean_return:.2f} ± {result.return_ci:.2f}"

    def run(self, stop: StopRequest | None = None, stop_after: int | None = None) -> RunResult:
        """Train until success, ``max_updates``, a numerical fault, a stop signal or ``stop_after`` updates
        of this call (a pause: checkpoint and return)."""
        cfg = self.config
        stop = stop if stop is not None else StopRequest()
        if not (self.run_dir / "config.json").exists():
            atomic_write_json(self.run_dir / "config.json", {
                **cfg.to_dict(), "seed": self.seed, "num_steps_resolved": self.num_steps,
                "run_environment": run_environment(self.device),
            })
        if self.baseline is None:
            self.baseline = self.evaluate(self.initial_policy, cfg.eval_episodes, "validation")
        resumed = self.update > 0
        self.log(f"[seed {self.seed}] {cfg.env}: N={cfg.num_envs} envs x T={self.num_steps} steps on "
                 f"{self.device}; " + (f"resumed at update {self.update}; " if resumed else "")
                 + f"initial policy: {self.describe(self.baseline)}")
        status, reason = "", ""
        updates_this_call = 0
        original_log = self.log
        with self.run_logger() as logger:
            if original_log is print:
                self.log = logger.print
            if not resumed:
                logger.log_validation(0, 0, {"score": self.score(self.baseline), "passed": False, "streak": 0})
            pending: list[PendingUpdate] = []
            self._read_seconds = self.train_seconds
            while self.update < cfg.max_updates:
                step_start = time.perf_counter()
                values = self.train_one_update(logger)
                self.train_seconds += time.perf_counter() - step_start
                pending.append(PendingUpdate(self.update, self.train_seconds, logger.take_phases(), values))
                updates_this_call += 1
                validate = self.update % cfg.eval_every == 0 or self.update == cfg.max_updates
                checkpoint = self.update % cfg.checkpoint_every == 0
                pause = stop_after is not None and updates_this_call >= stop_after
                # The metrics stay on the device until something needs them: a log line, a validation, a
                # checkpoint (never written after a non-finite update) or a stop. One host read for all.
                if not (validate or checkpoint or pause or stop.signum is not None or self.update == 1
                        or self.update % cfg.log_every == 0):
                    continue
                *earlier, last = self.read_metrics(pending)
                pending.clear()
                for line in earlier:
                    logger.log_update(line.update, line.global_step, line.record, phases=line.phases)
                bad = next((line.update for line in (*earlier, last) if not line.finite), None)
                if bad is None and validate:
                    logger.log_validation(self.update, self.global_step, self.validate())
                    if self.streak >= cfg.consecutive_passes:
                        status = "success"
                        reason = (f"validation passed {self.streak} times in a row at update {self.update} "
                                  f"(>= {cfg.min_updates} updates)")
                logger.log_update(last.update, last.global_step, last.record, phases=last.phases)
                if bad is not None:
                    status = "numerical_error"
                    reason = (f"non-finite loss or gradient at update {bad}; training stopped and the "
                              f"newest checkpoint (update {self.checkpointed_update()}) predates it")
                    break
                if status or checkpoint:
                    self.save("last.pt")
                if status:
                    break
                if stop.signum is not None:
                    self.save("last.pt")
                    name = signal.Signals(stop.signum).name
                    status, reason = "interrupted", (f"{name} received: stopped after update {self.update}, "
                                                     f"saved {self.run_dir / 'last.pt'}; continue with "
                                                     f"--resume {self.run_dir}")
                    break
                if pause:
                    self.save("last.pt")
                    status, reason = "paused", (f"paused after update {self.update}; continue with "
                                                f"--resume {self.run_dir}")
                    break
        self.log = original_log
        if not status:
            status = "goal_not_met"
            reason = (f"goal not met within --max-updates {cfg.max_updates}: best validation "
                      f"{self.best_score:.4f} at update {self.best_update}")
            self.save("last.pt")
        summary: dict = {}
        if status in ("success", "goal_not_met"):
            summary = self.final_evaluation(status, reason)
        return RunResult(self.seed, self.run_dir, status, reason, summary)

    def checkpointed_update(self) -> int:
        """The update stored in last.pt (0 if none)."""
        path = self.run_dir / "last.pt"
        return int(load_checkpoint(path)["update"]) if path.exists() else 0

    def run_logger(self) -> RunLogger:
        """The run's metrics.jsonl + TensorBoard + progress view; trainer messages print through it."""
        cfg = self.config
        logger = RunLogger(
            self.run_dir, total_updates=cfg.max_updates, label=f"seed {self.seed}",
            headline=("train_win_rate",) if self.multi_player else ("episode_return",),
            log_every=cfg.log_every, display=self.display, quiet=cfg.quiet, device=self.device,
            start_update=self.update, start_step=self.global_step,
        )
        return logger

    def train_one_update(self, logger: RunLogger) -> Tensor:
        """Collect one rollout and update once, without reading anything back: returns the update's
        ``[len(UPDATE_FIELDS)]`` metrics on the device, for :meth:`read_metrics`."""
        cfg = self.config
        if cfg.anneal_lr:
            self.algo.set_learning_rate(cfg.learning_rate * (1.0 - self.update / cfg.max_updates))
        with logger.phase("collect"):
            rollout = self.algo.collect(self.env, self.num_steps, episodic=self.episodic,
                                        opponent_rng=self.opponent_rng)
        with logger.phase("update"):
            metrics = self.algo.update(rollout)
            stats = rollout.episode_stats()
            values = torch.stack([getattr(metrics, name).detach().float() for name in METRIC_NAMES]
                                 + [stats[k].float() for k in ("episodes", "episode_return", "win_rate")]
                                 + [rollout.transitions().float()])
        self.update += 1
        return values

    def read_metrics(self, pending: list[PendingUpdate]) -> list[MetricsLine]:
        """The lines of the pending updates, read from the device in one transfer; ``global_step`` advances.

        ``time`` is the training time at the end of each update (waiting for the device, on CUDA, counts
        towards the last one) and ``steps_per_second`` the mean over the updates read together.
        """
        start = time.perf_counter()
        rows = torch.stack([p.values for p in pending]).cpu().tolist()
        self.train_seconds += time.perf_counter() - start
        seconds, self._read_seconds = self.train_seconds - self._read_seconds, self.train_seconds
        rate = sum(row[-1] for row in rows) / max(seconds, 1e-9)
        lines = []
        for i, (p, row) in enumerate(zip(pending, rows)):
            values = dict(zip(METRIC_NAMES, row))
            episodes, ep_return, win_rate, transitions = row[len(METRIC_NAMES):]
            self.global_step += int(transitions)
            record = {"episodes": int(episodes), "transitions": int(transitions), **values,
                      "time": self.train_seconds if i == len(pending) - 1 else p.train_seconds,
                      "steps_per_second": rate}
            if episodes > 0:
                record["train_win_rate" if self.multi_player else "episode_return"] = (
                    win_rate if self.multi_player else ep_return)
            finite = all(math.isfinite(v) for v in values.values())
            lines.append(MetricsLine(p.update, self.global_step, record, p.phases, finite))
        return lines

    def validate(self) -> dict:
        """Evaluate on the validation stream, update the streak, keep best.pt; returns the record to log."""
        cfg = self.config
        result = self.evaluate(self.algo.policy, cfg.eval_episodes, "validation")
        ok, why = self.passes(result, self.baseline)
        self.streak = self.streak + 1 if ok and self.update >= cfg.min_updates else 0
        if self.score(result) > self.best_score:
            self.best_score, self.best_update = self.score(result), self.update
            self.save("best.pt", result)
        self.log(f"[seed {self.seed}] validation @ {self.update}: {self.describe(result)}  {why}  "
                 f"{'PASS' if ok else 'fail'} streak {self.streak}/{cfg.consecutive_passes}")
        return {"score": self.score(result), "passed": ok, "streak": self.streak}

    def final_evaluation(self, status: str, reason: str) -> dict:
        """Re-evaluate best.pt, the initial policy and a uniform-random player on fresh seeds."""
        cfg = self.config
        summary: dict = {"seed": self.seed, "env": cfg.env, "success": status == "success", "status": status,
                         "reason": reason, "updates": self.update, "global_step": self.global_step,
                         "train_seconds": self.train_seconds, "best_update": self.best_update,
                         "initial_validation": self.baseline.to_dict()}
        best_path = self.run_dir / "best.pt"
        if best_path.exists():
            best = copy.deepcopy(self.algo.policy)
            best.load_state_dict(load_checkpoint(best_path, self.device)["algorithm"]["policy"])
            n = cfg.final_eval_episodes
            final = {"best": self.evaluate(best, n, "final-eval"),
                     "initial": self.evaluate(self.initial_policy, n, "final-eval")}
            if not self.env.is_continuous:
                final["random"] = self.evaluate(UniformRandomPolicy(), n, "final-eval")
            summary["final_evaluation"] = {k: v.to_dict() for k, v in final.items()}
            lines = [f"[seed {self.seed}] final evaluation on fresh seeds ({n} episodes each):"]
            for name, res in final.items():
                lines.append(f"  {name:>7}: " + res.describe(self.multi_player).replace("\n", "\n           "))
            if self.multi_player:
                for name in ("initial", "random"):
                    z = improvement_z(final["best"].win_rate, n, final[name].win_rate, n)
                    summary[f"z_vs_{name}"] = z
                    lines.append(f"  best vs {name}: {final['best'].win_rate - final[name].win_rate:+.4f} "
                                 f"win rate, z = {z:+.1f}")
            self.log("\n".join(lines))
        atomic_write_json(self.run_dir / "summary.json", summary)
        return summary


def run_environment(device: torch.device) -> dict:
    """Versions, device and hardware, recorded in each run's config.json."""
    import platform
    from importlib import metadata

    versions = {}
    for package in ("rl-gpu", "torch", "numpy", "gymnasium", "tyro"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    info = {"device": str(device), "python": platform.python_version(), "platform": platform.platform(),
            "cpu": cpu, "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "cuda": torch.version.cuda, "packages": versions}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def check_env_id(env_id: str) -> None:
    if not is_known(env_id):
        raise UsageError(f"unknown environment {env_id!r}; known: {', '.join(registered_ids())}, "
                         "or gym:<any Gymnasium id>")


def train(config: TrainConfig, log: Callable[[str], None] = print, stop_after: int | None = None,
          display: str = "auto") -> list[RunResult]:
    """Run every seed of ``config``; each writes ``OUTPUT/seed-N/``. Input errors raise :class:`UsageError`
    before anything is written. A stop signal or ``stop_after`` ends the call after the current seed's
    checkpoint; the remaining seeds are not started."""
    torch.set_num_threads(config.threads)
    check_env_id(config.env)
    run_dirs = [config.output / f"seed-{seed}" for seed in config.seeds]
    for run_dir in run_dirs:
        if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())) and not config.overwrite:
            raise UsageError(f"run directory {run_dir} already exists and is not empty; pass --overwrite to "
                             "replace it, --resume to continue it, or choose another --output")
    resolve_device(config.device)
    results = []
    with StopRequest() as stop:
        for seed, run_dir in zip(config.seeds, run_dirs):
            trainer = Trainer(config, seed, run_dir, log, display)
            prepare_run_dir(run_dir, config.overwrite)
            results.append(_finish(trainer.run(stop, stop_after), log))
            if results[-1].status in ("interrupted", "paused", "numerical_error"):
                break
    return results


def resume(run_dir: Path, config: TrainConfig, log: Callable[[str], None] = print,
           stop_after: int | None = None, display: str = "auto") -> RunResult:
    """Continue the run in ``run_dir`` from its ``last.pt`` with ``config`` (the saved one, possibly with a
    larger ``max_updates``)."""
    torch.set_num_threads(config.threads)
    check_env_id(config.env)
    seed = load_checkpoint(run_dir / "last.pt")["seed"]
    trainer = Trainer(config, seed, run_dir, log, display)
    trainer.resume_from(run_dir / "last.pt")
    with StopRequest() as stop:
        return _finish(trainer.run(stop, stop_after), log)


def _finish(result: RunResult, log: Callable[[str], None]) -> RunResult:
    labels = {"success": "SUCCESS", "goal_not_met": "FAILED", "numerical_error": "NUMERICAL ERROR",
              "interrupted": "INTERRUPTED", "paused": "PAUSED"}
    log(f"[seed {result.seed}] {labels[result.status]}: {result.reason}. Files in {result.run_dir}/")
    return result
