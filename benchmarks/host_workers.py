"""Host simulators in worker processes (``gym:<id>?workers=K``) against stepping them in the learner's process,
side by side in one run.

PPO collects a Gymnasium id whose sub-environments step in Python (``SyncVectorEnv``: one Python ``step`` per
row) through :func:`rl_gpu.collect.reference.collect`, once with the rows in this process and once split over K
worker processes; rounds alternate and each prints steps per second and the ratio workers / in-process.

    OMP_NUM_THREADS=1 python benchmarks/host_workers.py --env CartPole-v1 --num-envs 256 --workers 2 --rounds 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from rl_gpu import make
from rl_gpu.algos.ppo import PPO, PPOConfig
from rl_gpu.nn.actor_critic import policy_for_env


def build(env_id: str, n: int, steps: int) -> PPO:
    env = make(env_id, num_envs=n, seed=0)
    torch.manual_seed(0)
    return PPO(policy_for_env(env.spec, (64, 64)), PPOConfig(), 3e-4, seed=0, env=env, num_steps=steps)


def timed(algo: PPO, repeats: int) -> float:
    algo.collect()  # warm up
    start = time.perf_counter()
    for _ in range(repeats):
        algo.collect()
    return repeats * algo.num_steps * algo.env.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1", help="a Gymnasium id")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="collections timed per round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sides = {"in-process": build(f"gym:{args.env}", args.num_envs, args.num_steps),
             f"{args.workers} workers": build(f"gym:{args.env}?workers={args.workers}", args.num_envs, args.num_steps)}
    ratios = []
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        speed = {name: timed(sides[name], args.repeats) for name in order}
        ratio = speed[f"{args.workers} workers"] / speed["in-process"]
        ratios.append(ratio)
        print(f"round {r}: " + ", ".join(f"{k} {v:,.0f} steps/s" for k, v in speed.items())
              + f"; ratio {ratio:.2f}; load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"gym:{args.env}, N={args.num_envs}, T={args.num_steps}: median ratio workers / in-process "
          f"{statistics.median(ratios):.2f}")
    for algo in sides.values():
        algo.env.close()


if __name__ == "__main__":
    main()
