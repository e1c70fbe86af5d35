"""Velocity-tracking error of a Go1 checkpoint next to a standing (zero-action) and a random policy.

    python benchmarks/quadruped_tracking.py artifacts/learning/Go1-Velocity-v0/seed-11/best.pt [--num-envs 64]
    python benchmarks/quadruped_tracking.py runs/rough/seed-11/best.pt --env Go1-Rough-v0   # and per level

Each policy drives ``--num-envs`` robots for one full episode length (1000 steps, 20 s, commands redrawn every
10 s, pushes on, randomised physics) from the same seed; the table gives the mean absolute error between command
and body-frame velocity over every robot-step (falls reset the robot and count), and falls per robot-episode.
``--env`` picks the task (``Go1-Velocity-v0`` by default: a rough-terrain policy on flat ground); on
``Go1-Rough-v0`` a second table gives the trained policy's planar error (vx and vy) per terrain level, and the
levels the robots reached.
"""

from __future__ import annotations

import argparse
import sys

import torch

import rl_gpu
from rl_gpu.envs.registry import make


def run(act, env_id: str, num_envs: int, steps: int, seed: int) -> dict:
    env = make(env_id, num_envs, seed=seed, validate_actions=False)
    obs = env.reset().obs
    env.tracking_error_stats()
    falls = 0
    by_level = hasattr(env, "levels")
    if by_level:
        sums = torch.zeros(env.grid.levels, 3, dtype=torch.float64)
        counts = torch.zeros(env.grid.levels, dtype=torch.float64)
    for _ in range(steps):
        level = env.levels() if by_level else None
        result = env.step(act(obs))
        obs = result.obs
        falls += int(result.terminated.sum())
        if by_level:
            sums.index_add_(0, level, env.step_errors)
            counts.index_add_(0, level, torch.ones_like(level, dtype=torch.float64))
    errors = {k: float(v) for k, v in env.tracking_error_stats().items()}
    errors["falls per 1000 steps"] = falls / num_envs * 1000 / steps
    if by_level:
        errors["levels"] = [(i, int(counts[i]), float(sums[i, :2].sum() / counts[i]) if counts[i] else None)
                            for i in range(env.grid.levels)]
        errors["final levels"] = env.levels().tolist()
    env.close()
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--env", default="Go1-Velocity-v0", help="Go1-Velocity-v0 or Go1-Rough-v0 (with its id "
                        "parameters)")
    args = parser.parse_args()
    from rl_gpu.core.errors import UsageError
    from rl_gpu.envs.mujoco.quadruped import Go1VelocityEnv
    from rl_gpu.envs.registry import env_class

    try:
        go1 = issubclass(env_class(args.env), Go1VelocityEnv)
    except UsageError as e:
        parser.exit(2, f"{parser.prog}: error: --env: {e}\n")
    if not go1:
        parser.exit(2, f"{parser.prog}: error: --env {args.env} is not a Go1 velocity task (Go1-Velocity-v0, "
                       "Go1-Rough-v0)\n")
    torch.set_num_threads(1)
    from rl_gpu.runtime.checkpoint import CheckpointError

    try:
        policy = rl_gpu.load(args.checkpoint)
    except (CheckpointError, UsageError) as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    generator = torch.Generator().manual_seed(args.seed)
    policies = {
        "trained (deterministic)": lambda obs: torch.as_tensor(policy.act(obs, deterministic=True)),
        "standing (zero action)": lambda obs: torch.zeros(obs.shape[0], 12),
        "random U(-1, 1)": lambda obs: torch.rand(obs.shape[0], 12, generator=generator) * 2 - 1,
    }
    print("| policy | vx error (m/s) | vy error (m/s) | yaw-rate error (rad/s) | falls per robot per 1000 steps |")
    print("| --- | --- | --- | --- | --- |")
    levels = None
    for name, act in policies.items():
        e = run(act, args.env, args.num_envs, args.steps, args.seed)
        print(f"| {name} | {e['lin_vel_x']:.3f} | {e['lin_vel_y']:.3f} | {e['ang_vel_z']:.3f} | "
              f"{e['falls per 1000 steps']:.2f} |", flush=True)
        levels = levels or (e.get("levels"), e.get("final levels"))
    if levels[0] is not None:
        print("\n| level | robot-steps | trained policy's planar error (vx + vy, m/s) |\n| --- | --- | --- |")
        for level, count, error in levels[0]:
            print(f"| {level} | {count} | {'-' if error is None else f'{error:.3f}'} |")
        final = torch.tensor(levels[1])
        print(f"levels after {args.steps} steps: mean {final.double().mean():.2f}, histogram "
              f"{torch.bincount(final, minlength=len(levels[0])).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
