"""The training loop: iterate -> log -> validate -> checkpoint, one run per seed, for any algorithm.

The runner talks to the algorithm only through :class:`~rl_gpu.algos.base.Algorithm` (``iterate``,
``set_progress``, ``policy``, ``metric_names``, ``state_dict``), to the environment through
:class:`~rl_gpu.core.types.VecEnv`, and asks a goal (:mod:`rl_gpu.training.goals`) what success means.

A run can stop at any moment and continue exactly: ``last.pt`` holds everything the next iteration depends on
(the algorithm's state, the environments' state where the engine allows it, every random stream, counters and
the validation streak), files are replaced atomically, and a resumed run produces the same parameters and
metrics, bit for bit on the CPU, as one that never stopped.
"""

from __future__ import annotations

import json
import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from rl_gpu.algos.base import Setup
from rl_gpu.algos.registry import make_algorithm
from rl_gpu.core.device import resolve_device
from rl_gpu.core.errors import UsageError
from rl_gpu.core.seeding import derive_seed
from rl_gpu.core.types import VecEnv
from rl_gpu.envs.registry import is_known, make, registered_ids
from rl_gpu.nn.actor_critic import UniformRandomPolicy
from rl_gpu.runtime.checkpoint import (
    CheckpointError,
    atomic_write_bytes,
    atomic_write_json,
    load_checkpoint,
    save_checkpoint,
)
from rl_gpu.runtime.compile import resolve_compile
from rl_gpu.runtime.hardware import run_environment
from rl_gpu.training.config import TrainConfig
from rl_gpu.training.evaluation import EvalResult, evaluate_policy, improvement_z
from rl_gpu.training.goals import goal_for
from rl_gpu.training.run_dir import check_run_dirs, prepare_run_dir
from rl_gpu.training.run_logger import PhaseMark, RunLogger
from rl_gpu.training.signals import StopRequest

EXIT_SUCCESS, EXIT_GOAL_NOT_MET, EXIT_USAGE, EXIT_NUMERICAL = 0, 1, 2, 3
"""Exit codes of ``rl-gpu train``; an interrupted run exits 128 + the signal number (130, 143)."""

VOLATILE_METRICS = ("time", "steps_per_second", "collect_seconds", "update_seconds", "iterate_seconds")
"""Fields of metrics.jsonl that measure wall time and so differ between otherwise identical runs."""

COUNTS = ("episodes", "transitions")
"""Metrics logged as integers."""


class PendingUpdate(NamedTuple):
    """An update whose metrics are still on the device."""

    update: int
    train_seconds: float
    phases: list[PhaseMark]
    values: Tensor
    """``[len(algorithm.metric_names)]``: the iteration's metrics, stacked in one tensor."""


class MetricsLine(NamedTuple):
    """One update's ``metrics.jsonl`` line, as :meth:`RunLogger.log_update` takes it."""

    update: int
    global_step: int
    record: dict
    phases: list[PhaseMark]
    finite: bool


@dataclass
class RunResult:
    """Outcome of one seed's run. ``status`` is ``success``, ``goal_not_met``, ``numerical_error``,
    ``paused`` or ``interrupted`` (then ``signum`` is the signal that stopped it)."""

    seed: int
    run_dir: Path
    status: str
    reason: str
    summary: dict
    signum: int | None = None

    @property
    def success(self) -> bool:
        return self.status == "success"


class Trainer:
    """One seed's run of an algorithm on one environment id.

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
        self.env: VecEnv = self.make_env(config.num_envs, derive_seed(seed, "train-env"))
        self.goal = goal_for(self.env.spec, config.env, config.solve_threshold, config.success_z)
        try:
            setup = Setup(
                env=self.env, seed=seed, learning_rate=config.learning_rate, anneal_lr=config.anneal_lr,
                num_steps=config.num_steps, hidden_sizes=tuple(config.hidden_sizes),
                normalize_obs=config.normalize_obs, init_log_std=config.init_log_std,
                compile=resolve_compile(config.compile, self.device),
            )
            self.algo = make_algorithm(config.algo, setup, config.algo_config())
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.num_steps = self.algo.num_steps
        self.initial_policy = self.algo.initial_policy()
        self.update = 0
        self.global_step = 0
        self.train_seconds = 0.0
        self.best_score = -math.inf
        self.best_update = 0
        self.streak = 0
        self.baseline: EvalResult | None = None

    def make_env(self, num_envs: int, seed: int) -> VecEnv:
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
            "env": self.env.state_dict(),
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

    def load_state_dict(self, state: dict) -> None:
        self.algo.load_state_dict(state["algorithm"])
        self.initial_policy.load_state_dict(state["initial_policy"])
        self.env.load_state_dict(state["env"])
        if not self.env.spec.exact_resume:
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
            "algo": self.config.algo,
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
        if "env" not in payload["trainer"]:
            raise CheckpointError(f"{path}: written by rl_gpu before 0.2, whose training state this version cannot "
                                  "continue; evaluate and export still read it, or start a new run")
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

    def run(self, stop: StopRequest | None = None, stop_after: int | None = None) -> RunResult:
        """Train until success, ``max_updates``, a numerical fault, a stop signal or ``stop_after`` updates
        of this call (a pause: checkpoint and return)."""
        cfg, goal = self.config, self.goal
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
                 + f"initial policy: {goal.describe(self.baseline)}")
        status, reason, signum = "", "", None
        updates_this_call = 0
        original_log = self.log
        with self.run_logger() as logger:
            if original_log is print:
                self.log = logger.print
            if not resumed:
                logger.log_validation(0, 0, {"score": goal.score(self.baseline), "passed": False, "streak": 0})
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
                    signum = stop.signum
                    name = signal.Signals(signum).name
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
        return RunResult(self.seed, self.run_dir, status, reason, summary, signum)

    def checkpointed_update(self) -> int:
        """The update stored in last.pt (0 if none)."""
        path = self.run_dir / "last.pt"
        return int(load_checkpoint(path)["update"]) if path.exists() else 0

    def run_logger(self) -> RunLogger:
        """The run's metrics.jsonl + TensorBoard + progress view; trainer messages print through it."""
        cfg = self.config
        return RunLogger(
            self.run_dir, total_updates=cfg.max_updates, label=f"seed {self.seed}",
            headline=(self.goal.headline,), log_every=cfg.log_every, display=self.display, quiet=cfg.quiet,
            device=self.device, start_update=self.update, start_step=self.global_step,
        )

    def train_one_update(self, logger: RunLogger) -> Tensor:
        """One iteration of the algorithm, without reading anything back: returns its metrics stacked on the
        device (``[len(metric_names)]``), for :meth:`read_metrics`."""
        self.algo.set_progress(self.update / self.config.max_updates)
        metrics = self.algo.iterate(phase=logger.phase)
        values = torch.stack([metrics[name].detach().float() for name in self.algo.metric_names])
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
        names = self.algo.metric_names
        rate = sum(dict(zip(names, row))["transitions"] for row in rows) / max(seconds, 1e-9)
        lines = []
        for i, (p, row) in enumerate(zip(pending, rows)):
            values = dict(zip(names, row))
            episodes = values.pop("episodes")
            transitions = values.pop("transitions")
            collected = {k: values.pop(k) for k in ("episode_return", "episode_length", "win_rate")}
            self.global_step += int(transitions)
            record = {"episodes": int(episodes), "transitions": int(transitions), **values,
                      "time": self.train_seconds if i == len(pending) - 1 else p.train_seconds,
                      "steps_per_second": rate}
            if episodes > 0:
                record[self.goal.headline] = collected[self.goal.source]
            finite = all(math.isfinite(v) for v in values.values())
            lines.append(MetricsLine(p.update, self.global_step, record, p.phases, finite))
        return lines

    def validate(self) -> dict:
        """Evaluate on the validation stream, update the streak, keep best.pt; returns the record to log."""
        cfg, goal = self.config, self.goal
        result = self.evaluate(self.algo.policy, cfg.eval_episodes, "validation")
        ok, why = goal.passes(result, self.baseline)
        self.streak = self.streak + 1 if ok and self.update >= cfg.min_updates else 0
        if goal.score(result) > self.best_score:
            self.best_score, self.best_update = goal.score(result), self.update
            self.save("best.pt", result)
        self.log(f"[seed {self.seed}] validation @ {self.update}: {goal.describe(result)}  {why}  "
                 f"{'PASS' if ok else 'fail'} streak {self.streak}/{cfg.consecutive_passes}")
        return {"score": goal.score(result), "passed": ok, "streak": self.streak}

    def final_evaluation(self, status: str, reason: str) -> dict:
        """Re-evaluate best.pt, the initial policy and a uniform-random player on fresh seeds."""
        cfg, multi = self.config, self.goal.multi_player
        summary: dict = {"seed": self.seed, "env": cfg.env, "success": status == "success", "status": status,
                         "reason": reason, "updates": self.update, "global_step": self.global_step,
                         "train_seconds": self.train_seconds, "best_update": self.best_update,
                         "initial_validation": self.baseline.to_dict()}
        best_path = self.run_dir / "best.pt"
        if best_path.exists():
            best = self.algo.initial_policy()
            best.load_state_dict(load_checkpoint(best_path, self.device)["algorithm"]["policy"])
            n = cfg.final_eval_episodes
            final = {"best": self.evaluate(best, n, "final-eval"),
                     "initial": self.evaluate(self.initial_policy, n, "final-eval")}
            if not self.env.spec.is_continuous:
                final["random"] = self.evaluate(UniformRandomPolicy(), n, "final-eval")
            summary["final_evaluation"] = {k: v.to_dict() for k, v in final.items()}
            lines = [f"[seed {self.seed}] final evaluation on fresh seeds ({n} episodes each):"]
            for name, res in final.items():
                lines.append(f"  {name:>7}: " + res.describe(multi).replace("\n", "\n           "))
            if multi:
                for name in ("initial", "random"):
                    z = improvement_z(final["best"].win_rate, n, final[name].win_rate, n)
                    summary[f"z_vs_{name}"] = z
                    lines.append(f"  best vs {name}: {final['best'].win_rate - final[name].win_rate:+.4f} "
                                 f"win rate, z = {z:+.1f}")
            self.log("\n".join(lines))
        atomic_write_json(self.run_dir / "summary.json", summary)
        return summary


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
    check_run_dirs(run_dirs, config.overwrite)
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
