"""The training loop: collect -> update -> log -> validate -> checkpoint, one run per seed.

The trainer only talks to the algorithm's small interface (:class:`rl_gpu.optimization.PPO`: ``policy``,
``update``, ``state_dict``) and to :func:`rl_gpu.rollout.collect`; turn-based games and single-player tasks go
through the same loop and differ only in how a rollout is collected and what makes a validation pass.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from rl_gpu.checkpoint import atomic_write_json, save_checkpoint
from rl_gpu.config import TrainConfig
from rl_gpu.envs.base import TensorEnv
from rl_gpu.envs.registry import make
from rl_gpu.evaluation import EvalResult, derive_seed, evaluate_policy, improvement_z
from rl_gpu.optimization import PPO
from rl_gpu.policy import UniformRandomPolicy, policy_for_env
from rl_gpu.rollout import collect, episode_horizon

RUN_FILES = ("config.json", "metrics.jsonl", "summary.json", "best.pt", "last.pt")


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit code 2, and nothing on disk is touched."""


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
                             "pass --overwrite to replace it or choose another --output")
        for name in RUN_FILES:
            (run_dir / name).unlink(missing_ok=True)
        for extra in ("tb",):
            shutil.rmtree(run_dir / extra, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)


@dataclass
class RunResult:
    """Outcome of one seed's run."""

    seed: int
    run_dir: Path
    success: bool
    reason: str
    summary: dict


class Trainer:
    """One seed's run of PPO on one environment id.

    Args:
        config: the resolved configuration.
        seed: this run's seed (every random stream of the run is derived from it).
        run_dir: where config, metrics, checkpoints and the summary go.
        log: where progress lines go.
    """

    def __init__(self, config: TrainConfig, seed: int, run_dir: Path, log: Callable[[str], None] = print) -> None:
        self.config = config
        self.seed = seed
        self.run_dir = run_dir
        self.log = log
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
        self.algo = PPO(policy, config.ppo, config.learning_rate, derive_seed(seed, "policy"))
        self.initial_policy = copy.deepcopy(policy).eval()
        self.opponent_rng = torch.Generator(device=self.device).manual_seed(derive_seed(seed, "opponent"))
        self.update = 0
        self.global_step = 0

    def make_env(self, num_envs: int, seed: int) -> TensorEnv:
        return make(self.config.env, num_envs=num_envs, device=self.device, seed=seed, validate_actions=False)

    def evaluate(self, policy, episodes: int, purpose: str) -> EvalResult:
        return evaluate_policy(
            policy, self.make_env, episodes, derive_seed(self.seed, purpose),
            deterministic=self.config.deterministic_eval,
        )

    def checkpoint_payload(self, validation: EvalResult | None) -> dict:
        return {
            "env_id": self.config.env,
            "policy_config": self.algo.policy.config(),
            "algorithm": self.algo.state_dict(),
            "update": self.update,
            "global_step": self.global_step,
            "seed": self.seed,
            "config": self.config.to_dict(),
            "validation": validation.to_dict() if validation is not None else None,
        }

    def passes(self, result: EvalResult, baseline: EvalResult) -> tuple[bool, str]:
        """Whether a validation counts towards success, and a short explanation."""
        if self.multi_player:
            z = improvement_z(result.win_rate, result.episodes, baseline.win_rate, baseline.episodes)
            return z >= self.config.success_z, f"z={z:+.1f} vs initial (need {self.config.success_z:+.1f})"
        threshold = self.config.solve_threshold
        return result.mean_return >= threshold, f"need mean return >= {threshold:g}"

    def score(self, result: EvalResult) -> float:
        return result.win_rate if self.multi_player else result.mean_return

    def run(self) -> RunResult:
        cfg = self.config
        atomic_write_json(self.run_dir / "config.json", {**cfg.to_dict(), "seed": self.seed,
                                                         "num_steps_resolved": self.num_steps,
                                                         "device_resolved": str(self.device),
                                                         "torch_version": torch.__version__})
        started = time.perf_counter()
        baseline = self.evaluate(self.initial_policy, cfg.eval_episodes, "validation")
        self.log(f"[seed {self.seed}] {cfg.env}: N={cfg.num_envs} envs x T={self.num_steps} steps on "
                 f"{self.device}; initial policy: {self.describe(baseline)}")
        best_score, best_update, streak = -math.inf, 0, 0
        success, reason = False, ""
        window_steps, window_start = 0, time.perf_counter()
        metrics_file = (self.run_dir / "metrics.jsonl").open("a")
        try:
            while self.update < cfg.max_updates:
                if cfg.anneal_lr:
                    self.algo.set_learning_rate(cfg.learning_rate * (1.0 - self.update / cfg.max_updates))
                rollout = collect(
                    self.algo.policy, self.env, self.num_steps, self.algo.policy_rng,
                    episodic=self.episodic, opponent_rng=self.opponent_rng,
                )
                metrics = self.algo.update(rollout)
                self.update += 1
                stats = rollout.episode_stats()
                # One host read per update for everything logged.
                values = metrics.as_floats()
                host = torch.stack([stats[k].float() for k in ("episodes", "episode_return", "win_rate")]
                                   + [rollout.transitions().float()]).cpu().tolist()
                episodes, ep_return, win_rate, transitions = host
                self.global_step += int(transitions)
                window_steps += int(transitions)
                record = {"update": self.update, "global_step": self.global_step,
                          "time": time.perf_counter() - started, "episodes": int(episodes),
                          "episode_return": ep_return, "train_win_rate": win_rate, **values}
                if self.update % cfg.log_every == 0 or self.update == 1:
                    elapsed = time.perf_counter() - window_start
                    sps = window_steps / max(elapsed, 1e-9)
                    record["steps_per_second"] = sps
                    progress = (f"win {win_rate:.3f}" if self.multi_player else f"return {ep_return:8.2f}")
                    self.log(f"[seed {self.seed}] update {self.update:5d}/{cfg.max_updates} "
                             f"steps {self.global_step:>11,} {sps:>10,.0f} steps/s  {progress}  "
                             f"loss {values['loss']:+.4f} entropy {values['entropy']:.3f} "
                             f"kl {values['approx_kl']:.4f}")
                    window_steps, window_start = 0, time.perf_counter()
                if not all(math.isfinite(v) for v in values.values()):
                    reason = f"non-finite training metrics at update {self.update}: {values}"
                    break
                if self.update % cfg.eval_every == 0 or self.update == cfg.max_updates:
                    result = self.evaluate(self.algo.policy, cfg.eval_episodes, "validation")
                    ok, why = self.passes(result, baseline)
                    counted = ok and self.update >= cfg.min_updates
                    streak = streak + 1 if counted else 0
                    record["validation"] = {"score": self.score(result), "passed": ok, "streak": streak}
                    if self.score(result) > best_score:
                        best_score, best_update = self.score(result), self.update
                        save_checkpoint(self.run_dir / "best.pt", self.checkpoint_payload(result))
                    save_checkpoint(self.run_dir / "last.pt", self.checkpoint_payload(result))
                    self.log(f"[seed {self.seed}] validation @ {self.update}: {self.describe(result)}  {why}  "
                             f"{'PASS' if ok else 'fail'} streak {streak}/{cfg.consecutive_passes}")
                    if streak >= cfg.consecutive_passes:
                        success = True
                        reason = (f"validation passed {streak} times in a row at update {self.update} "
                                  f"(>= {cfg.min_updates} updates)")
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
                if success:
                    break
        finally:
            metrics_file.close()
        if not success and not reason:
            reason = (f"goal not met within --max-updates {cfg.max_updates}: best validation "
                      f"{best_score:.4f} at update {best_update}")
        save_checkpoint(self.run_dir / "last.pt", self.checkpoint_payload(None))
        summary = self.final_evaluation(success, reason, baseline, best_update, time.perf_counter() - started)
        return RunResult(self.seed, self.run_dir, success, reason, summary)

    def describe(self, result: EvalResult) -> str:
        if self.multi_player:
            return f"win rate {result.win_rate:.4f} [{result.ci_low:.4f}, {result.ci_high:.4f}]"
        return f"mean return {result.mean_return:.2f} ± {result.return_ci:.2f}"

    def final_evaluation(self, success: bool, reason: str, baseline: EvalResult, best_update: int,
                         train_seconds: float) -> dict:
        """Re-evaluate best.pt, the initial policy and a uniform-random player on fresh seeds."""
        from rl_gpu.checkpoint import load_checkpoint

        cfg = self.config
        summary: dict = {"seed": self.seed, "env": cfg.env, "success": success, "reason": reason,
                         "updates": self.update, "global_step": self.global_step,
                         "train_seconds": train_seconds, "best_update": best_update,
                         "initial_validation": baseline.to_dict()}
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


def train(config: TrainConfig, log: Callable[[str], None] = print) -> list[RunResult]:
    """Run every seed of ``config``; each writes ``OUTPUT/seed-N/``. Input errors raise :class:`UsageError`
    before anything is written."""
    torch.set_num_threads(config.threads)
    run_dirs = [config.output / f"seed-{seed}" for seed in config.seeds]
    for run_dir in run_dirs:
        if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())) and not config.overwrite:
            raise UsageError(f"run directory {run_dir} already exists and is not empty; "
                             "pass --overwrite to replace it or choose another --output")
    resolve_device(config.device)
    results = []
    for seed, run_dir in zip(config.seeds, run_dirs):
        trainer = Trainer(config, seed, run_dir, log)
        prepare_run_dir(run_dir, config.overwrite)
        result = trainer.run()
        status = "SUCCESS" if result.success else "FAILED"
        log(f"[seed {seed}] {status}: {result.reason}. Files in {run_dir}/")
        results.append(result)
    return results
