"""Multi-task throughput: N rows split over K tasks (``multitask:``) against the same N rows of one task, side by side
in one process, the sides alternating round by round. Two measures: the environment alone (random actions, steps
per second) and PPO's whole iteration (collection and update; transitions per second), the same policy sizes.

Parameter variants of an environment that takes a parameter per row (CartPole) step in one call, the varying
parameters as ``[N]`` tensors; other tasks step block by block (K times a step's per-operation cost on 1/K of the
rows each), which ``--tasks`` of rewired CartPoles would show.

    OMP_NUM_THREADS=1 python benchmarks/multitask_throughput.py --num-envs 256 4096 --tasks 3 10 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from rl_gpu import make
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.nn.actor_critic import policy_for_env

LENGTHS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6)


def batch_id(base: str, k: int) -> str:
    """``k`` parameter variants of ``base`` (CartPole's pole lengths) in one batch."""
    return "multitask:" + "|".join(f"{base}?length={LENGTHS[i]}" for i in range(k))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rate_env(env, steps: int, g: torch.Generator) -> float:
    actions = torch.randint(0, env.num_actions, (steps, env.num_envs), generator=g).to(env.device)
    sync(env.device)
    start = time.perf_counter()
    for t in range(steps):
        env.step(actions[t])
    sync(env.device)
    return env.num_envs * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--tasks", type=int, nargs="+", default=[3, 10])
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.base} variants on {args.device}, T={args.num_steps}, {args.rounds} rounds, "
          f"load {os.getloadavg()[0]:.2f}")
    print("| N | K | measure | one task, per round | K tasks, per round | median ratio K/one |")
    print("| ---: | ---: | --- | --- | --- | ---: |")
    for n in args.num_envs:
        for k in args.tasks:
            # One task: the plain environment (its observation without a one-hot; the policy K inputs narrower).
            ids = (f"{args.base}?length={LENGTHS[0]}", batch_id(args.base, k))
            envs = [make(i, num_envs=n, seed=1, device=args.device) for i in ids]
            g = torch.Generator().manual_seed(0)
            env_rates: list[list[float]] = [[], []]
            for env in envs:
                rate_env(env, 8, g)  # warm-up
            for r in range(args.rounds):
                for i in (0, 1) if r % 2 == 0 else (1, 0):
                    env_rates[i].append(rate_env(envs[i], args.num_steps, g))
            algos = []
            for i in ids:
                torch.manual_seed(0)
                env = make(i, num_envs=n, seed=2, device=args.device)
                policy = policy_for_env(env.spec).to(env.device)
                algos.append(PPO(policy, PPOConfig(num_minibatches=4), 3e-4, seed=0, env=env, num_steps=args.num_steps))
            for algo in algos:
                algo.iterate()  # warm-up
            ppo_rates: list[list[float]] = [[], []]
            for r in range(args.rounds):
                for i in (0, 1) if r % 2 == 0 else (1, 0):
                    sync(torch.device(args.device))
                    start = time.perf_counter()
                    algos[i].iterate()
                    sync(torch.device(args.device))
                    ppo_rates[i].append(n * args.num_steps / (time.perf_counter() - start))
            for name, rates in (("env steps/s", env_rates), ("PPO transitions/s", ppo_rates)):
                ratio = statistics.median(rates[1]) / statistics.median(rates[0])
                cells = [", ".join(f"{x:,.0f}" for x in side) for side in rates]
                print(f"| {n} | {k} | {name} | {cells[0]} | {cells[1]} | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
