"""Velocity-tracking error of a Go1-Velocity-v0 checkpoint next to a standing (zero-action) and a random policy.

    python benchmarks/quadruped_tracking.py artifacts/learning/Go1-Velocity-v0/seed-11/best.pt [--num-envs 64]

Each policy drives ``--num-envs`` robots for one full episode length (1000 steps, 20 s, commands redrawn every
10 s, pushes on, randomised physics) from the same seed; the table gives the mean absolute error between command
and body-frame velocity over every robot-step (falls reset the robot and count), and falls per robot-episode.
"""

from __future__ import annotations

import argparse
import sys

import torch

import rl_gpu
from rl_gpu.envs.registry import make


def run(act, num_envs: int, steps: int, seed: int) -> dict[str, float]:
    env = make("Go1-Velocity-v0", num_envs, seed=seed, validate_actions=False)
    obs = env.reset().obs
    env.tracking_error_stats()
    falls = 0
    for _ in range(steps):
        result = env.step(act(obs))
        obs = result.obs
        falls += int(result.terminated.sum())
    errors = {k: float(v) for k, v in env.tracking_error_stats().items()}
    errors["falls per 1000 steps"] = falls / num_envs * 1000 / steps
    env.close()
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = rl_gpu.load(args.checkpoint)
    generator = torch.Generator().manual_seed(args.seed)
    policies = {
        "trained (deterministic)": lambda obs: torch.as_tensor(policy.act(obs, deterministic=True)),
        "standing (zero action)": lambda obs: torch.zeros(obs.shape[0], 12),
        "random U(-1, 1)": lambda obs: torch.rand(obs.shape[0], 12, generator=generator) * 2 - 1,
    }
    print("| policy | vx error (m/s) | vy error (m/s) | yaw-rate error (rad/s) | falls per robot per 1000 steps |")
    print("| --- | --- | --- | --- | --- |")
    for name, act in policies.items():
        e = run(act, args.num_envs, args.steps, args.seed)
        print(f"| {name} | {e['lin_vel_x']:.3f} | {e['lin_vel_y']:.3f} | {e['ang_vel_z']:.3f} | "
              f"{e['falls per 1000 steps']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
