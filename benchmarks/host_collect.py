"""The host collector's compiled policy half against the eager reference loop, side by side in one process.

PPO collects an engine-stepped environment (MuJoCo, Gymnasium) through :func:`rl_gpu.collect.reference.collect`
with ``--compile off`` and through :class:`rl_gpu.collect.host.HostCollector` (the policy's half of every step
compiled with Inductor) otherwise. This times ``PPO.collect()`` both ways, rounds alternating, and prints each
round's steps per second and the ratio compiled / eager.

    .venv/bin/python benchmarks/host_collect.py --env HalfCheetah-v5 --num-envs 64 --rounds 4
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from rl_gpu import make
from rl_gpu.algos.ppo import PPO, PPOConfig
from rl_gpu.nn.actor_critic import policy_for_env


def build(env_id: str, n: int, steps: int, mode: str, device: str) -> PPO:
    env = make(env_id, num_envs=n, device=device, seed=0)
    torch.manual_seed(0)
    policy = policy_for_env(env.spec, (64, 64), normalize_obs=True).to(device)
    return PPO(policy, PPOConfig(), 3e-4, seed=0, compile=mode, env=env, num_steps=steps)


def rate(algo: PPO, calls: int, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        algo.collect()
    if device == "cuda":
        torch.cuda.synchronize()
    return calls * algo.num_steps * algo.env.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    modes = ("off", "inductor")
    algos = {m: build(args.env, args.num_envs, args.num_steps, m, args.device) for m in modes}
    for algo in algos.values():
        algo.collect()  # compiles the policy half (inductor); warms the allocator
    print(f"{args.env} N={args.num_envs} T={args.num_steps} device={args.device} threads={args.threads} "
          f"load={os.getloadavg()[0]:.2f}")
    ratios = []
    for r in range(args.rounds):
        order = modes if r % 2 == 0 else modes[::-1]
        sps = {m: rate(algos[m], args.calls, args.device) for m in order}
        ratios.append(sps["inductor"] / sps["off"])
        print(f"round {r}: eager {sps['off']:,.0f} steps/s, compiled {sps['inductor']:,.0f} steps/s, "
              f"ratio {ratios[-1]:.2f}")
    ratios.sort()
    print(f"median ratio compiled/eager: {ratios[len(ratios) // 2]:.2f} (rounds: "
          f"{', '.join(f'{x:.2f}' for x in ratios)}); load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
