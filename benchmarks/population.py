"""K CartPole PPO runs trained at once (``PopulationPPO``: one K * N-row rollout, one batched call per layer)
against the same K runs one after another, in one process: total transitions per second of each, and the ratio.

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/population.py [--members 16] [--num-envs 256]

Both sides run the same members (same seeds, same hyper-parameters: the CartPole preset's, T = 128, 16
minibatches, 4 epochs), eagerly, on one CPU thread; each side runs one warm-up iteration, then ``--iterations``
timed rounds alternate between the sides (so a change in the machine's load falls on both): one iteration of
each of the K lone runs in turn, then one population iteration.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.population.ppo import PopulationPPO
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.core.seeding import derive_seed
from rl_gpu.envs.registry import make
from rl_gpu.runtime.allocator import keep_freed_host_memory

ENV = "CartPole-v1"


def member(seed: int, num_envs: int, num_steps: int, config: PPOConfig) -> PPO:
    """Member ``seed`` built as a lone run builds it (the runner's seeding)."""
    torch.manual_seed(derive_seed(seed, "torch"))
    env = make(ENV, num_envs=num_envs, device="cpu", seed=derive_seed(seed, "train-env"), validate_actions=False)
    return PPO.from_setup(Setup(env=env, seed=seed, num_steps=num_steps, learning_rate=1e-3, anneal_lr=False),
                          config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=16, help="K")
    parser.add_argument("--num-envs", type=int, default=256, help="N, rows per member")
    parser.add_argument("--num-steps", type=int, default=128, help="T")
    parser.add_argument("--iterations", type=int, default=2, help="timed rounds (after one warm-up)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    keep_freed_host_memory()  # as rl-gpu train and bench do
    config = PPOConfig(num_minibatches=16, update_epochs=4, ent_coef=0.01)
    seeds = range(1, args.members + 1)
    transitions = args.members * args.num_envs * args.num_steps * args.iterations

    lone = [member(seed, args.num_envs, args.num_steps, config) for seed in seeds]
    members = [member(seed, args.num_envs, args.num_steps, config) for seed in seeds]
    stepper = make(ENV, num_envs=args.members * args.num_envs, device="cpu", seed=0, validate_actions=False)
    population = PopulationPPO(members, stepper)
    for run in lone:
        run.iterate()
    population.iterate()
    rounds = []
    for _ in range(args.iterations):
        start = time.perf_counter()
        for run in lone:
            run.iterate()
        middle = time.perf_counter()
        population.iterate()
        rounds.append((middle - start, time.perf_counter() - middle))
    sequential, parallel = (sum(r[i] for r in rounds) for i in (0, 1))

    print(f"{ENV}: K={args.members} members x N={args.num_envs} rows x T={args.num_steps} steps, "
          f"{args.iterations} alternating timed rounds, torch threads: {torch.get_num_threads()}")
    print(f"  one after another: {transitions / sequential:10.0f} transitions/s ({sequential:.1f} s)")
    print(f"  population       : {transitions / parallel:10.0f} transitions/s ({parallel:.1f} s)")
    per_round = sorted(a / b for a, b in rounds)
    print(f"  speed-up: {sequential / parallel:.2f}x (by round: " + ", ".join(f"{r:.2f}x" for r in per_round)
          + f"; median {statistics.median(per_round):.2f}x)")


if __name__ == "__main__":
    main()
