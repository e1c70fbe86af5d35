"""``rl-gpu evaluate`` / ``python -m rl_gpu.evaluate``: a checkpoint's results on fresh, training-disjoint
seeds."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

import torch

from rl_gpu.cli.parsing import fail, parse

PROG = "rl-gpu evaluate"


@dataclass(frozen=True)
class EvaluateConfig:
    """Evaluate a checkpoint against the environment's opponent (turn-based games) or for return."""

    checkpoint: Path
    """checkpoint file written by `rl-gpu train` (best.pt or last.pt)"""
    episodes: int = 24576
    """episodes to play"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, else CPU"""
    seed: int = 0
    """evaluation stream; combined with the run's seed into seeds disjoint from training and validation"""
    num_envs: int = 4096
    """environments played at once"""
    deterministic: bool = False
    """play the most probable action instead of sampling"""
    json_output: Path | None = None
    """also write the results to this JSON file"""
    threads: int = 1
    """torch intra-op CPU threads"""

    def __post_init__(self) -> None:
        for name in ("episodes", "num_envs", "threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.seed < 0:
            raise ValueError(f"--seed must be non-negative, got {self.seed}")


def main(argv: Sequence[str] | None = None) -> int:
    from rl_gpu.core.device import resolve_device
    from rl_gpu.core.errors import UsageError
    from rl_gpu.core.seeding import derive_seed
    from rl_gpu.envs.registry import is_known, make
    from rl_gpu.interop.policy_io import load_policy
    from rl_gpu.nn.actor_critic import UniformRandomPolicy
    from rl_gpu.runtime.checkpoint import CheckpointError
    from rl_gpu.training.evaluation import evaluate_policy

    config = parse(EvaluateConfig, PROG, argv, description=EvaluateConfig.__doc__)
    torch.set_num_threads(config.threads)
    try:
        device = resolve_device(config.device)
        policy, payload = load_policy(config.checkpoint, device)
        env_id = payload.get("env_id")
        if not is_known(env_id):
            raise CheckpointError(f"{config.checkpoint}: made for unknown environment {env_id!r}")

        def make_env(n: int, seed: int):
            return make(env_id, num_envs=n, device=device, seed=seed, validate_actions=False)

        try:
            probe = make_env(1, 0)
        except ImportError as e:
            raise UsageError(str(e)) from None
        if policy.obs_dim != probe.spec.obs_size:
            raise CheckpointError(f"{config.checkpoint}: policy observes {policy.obs_dim} values, "
                                  f"{env_id} gives {probe.spec.obs_size}")
    except (UsageError, CheckpointError) as e:
        fail(PROG, str(e))
    seed = derive_seed(int(payload.get("seed", 0)), f"evaluate-{config.seed}")
    multi = probe.spec.num_players > 1
    print(f"{env_id}: checkpoint {config.checkpoint} (update {payload.get('update')}, "
          f"{payload.get('global_step'):,} training steps) on {device}, {config.episodes} episodes")
    result = evaluate_policy(policy, make_env, config.episodes, seed, num_envs=config.num_envs,
                             deterministic=config.deterministic)
    print("policy:  " + result.describe(multi).replace("\n", "\n         "))
    report = {"checkpoint": str(config.checkpoint), "env": env_id, "policy": result.to_dict()}
    if not probe.spec.is_continuous:
        random_result = evaluate_policy(UniformRandomPolicy(), make_env, config.episodes, seed,
                                        num_envs=config.num_envs)
        print("random:  " + random_result.describe(multi).replace("\n", "\n         "))
        report["random"] = random_result.to_dict()
    if config.json_output is not None:
        from rl_gpu.runtime.checkpoint import atomic_write_json

        atomic_write_json(config.json_output, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
