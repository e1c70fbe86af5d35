"""K CartPole PPO runs trained at once (``PopulationPPO``: one K * N-row rollout, one batched call per layer)
against the same K runs one after another, in one process: total transitions per second of each, and the ratio.

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/population.py [--members 16] [--num-envs 256]
    ... benchmarks/population.py --env vmas:navigation --members 4 --num-envs 128 --num-steps 96

With ``--env vmas:<scenario>`` the runs are MAPPO (``PopulationMAPPO``, VMAS installed), N worlds per member and
a transition being one world step.

Both sides run the same members (same seeds, same hyper-parameters: the CartPole preset's, T = 128, 16
minibatches, 4 epochs), eagerly, on one CPU thread; each side runs one warm-up iteration, then ``--iterations``
timed rounds alternate between the sides (so a change in the machine's load falls on both): one iteration of
each of the K lone runs in turn, then one population iteration.

Then what batching can give on this machine: a lone run's iteration at N rows (``T_N``) against the same run at
1 row (``T_1``: the same calls, Python and dispatch, with almost no arithmetic), alternately. A population
removes per-call cost; the work that grows with the rows, ``T_N - T_1`` (the products and the passes over the
activations), it still does K times, and its batched products run at a lone run's rate (benchmarks/HISTORY.md,
section 21). Removing all per-call cost while doing the per-row work at a lone run's rate gives
``T_N / (T_N - T_1)``: an estimate (both times move with the host), not a strict bound, since some per-row work is
a little cheaper in one large call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.mappo.algorithm import MAPPO
from rl_gpu.algos.mappo.config import MAPPOConfig
from rl_gpu.algos.population.mappo import PopulationMAPPO
from rl_gpu.algos.population.ppo import PopulationPPO
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.core.seeding import derive_seed
from rl_gpu.envs.registry import make
from rl_gpu.runtime.allocator import keep_freed_host_memory
from selfplay_dynamics import bounded_int

ENV = "CartPole-v1"
MINIBATCHES = 16
"""The CartPole preset's minibatches per epoch."""


def member(seed: int, num_envs: int, num_steps: int, config: PPOConfig, env_id: str = ENV) -> PPO:
    """Member ``seed`` built as a lone run builds it (the runner's seeding)."""
    torch.manual_seed(derive_seed(seed, "torch"))
    env = make(env_id, num_envs=num_envs, device="cpu", seed=derive_seed(seed, "train-env"), validate_actions=False)
    algo = MAPPO if env_id.startswith("vmas:") else PPO
    return algo.from_setup(Setup(env=env, seed=seed, num_steps=num_steps, learning_rate=1e-3, anneal_lr=False),
                           config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=ENV, help="CartPole-v1 (PPO) or vmas:<scenario> (MAPPO)")
    parser.add_argument("--members", type=bounded_int(1, 1024), default=16, help="K")
    parser.add_argument("--num-envs", type=bounded_int(1, 1 << 20), default=256, help="N, rows per member")
    parser.add_argument("--num-steps", type=bounded_int(MINIBATCHES, 1 << 16), default=128,
                        help=f"T, a multiple of {MINIBATCHES} (the minibatches, also at the estimate's 1 row)")
    parser.add_argument("--iterations", type=bounded_int(1, 1000), default=2, help="timed rounds (after one warm-up)")
    parser.add_argument("--threads", type=bounded_int(1, 4 * (os.cpu_count() or 1)), default=1,
                        help="torch threads, both sides")
    parser.add_argument("--per-call-rounds", type=bounded_int(0, 1000), default=5,
                        help="alternating lone iterations at N and at 1 row for the per-call estimate (0: skip it)")
    args = parser.parse_args()
    if args.num_steps % MINIBATCHES:
        parser.error(f"--num-steps must be a multiple of {MINIBATCHES}, got {args.num_steps}")
    torch.set_num_threads(args.threads)
    keep_freed_host_memory()  # as rl-gpu train and bench do
    multi_agent = args.env.startswith("vmas:")
    config = (MAPPOConfig(num_minibatches=MINIBATCHES, update_epochs=4, ent_coef=0.0) if multi_agent
              else PPOConfig(num_minibatches=MINIBATCHES, update_epochs=4, ent_coef=0.01))
    seeds = range(1, args.members + 1)
    transitions = args.members * args.num_envs * args.num_steps * args.iterations

    lone = [member(seed, args.num_envs, args.num_steps, config, args.env) for seed in seeds]
    members = [member(seed, args.num_envs, args.num_steps, config, args.env) for seed in seeds]
    stepper = make(args.env, num_envs=args.members * args.num_envs, device="cpu", seed=0, validate_actions=False)
    population = (PopulationMAPPO if multi_agent else PopulationPPO)(members, stepper)
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

    print(f"{args.env}: K={args.members} members x N={args.num_envs} rows x T={args.num_steps} steps, "
          f"{args.iterations} alternating timed rounds, torch threads: {torch.get_num_threads()}")
    print(f"  one after another: {transitions / sequential:10.0f} transitions/s ({sequential:.1f} s)")
    print(f"  population       : {transitions / parallel:10.0f} transitions/s ({parallel:.1f} s)")
    per_round = sorted(a / b for a, b in rounds)
    print(f"  speed-up: {sequential / parallel:.2f}x (by round: " + ", ".join(f"{r:.2f}x" for r in per_round)
          + f"; median {statistics.median(per_round):.2f}x)")
    if args.per_call_rounds:
        per_call_estimate(args.num_envs, args.num_steps, config, args.per_call_rounds, args.env)
        product_rates(args.members, args.num_envs * args.num_steps // config.num_minibatches)


def per_call_estimate(num_envs: int, num_steps: int, config: PPOConfig, rounds: int, env_id: str = ENV) -> None:
    """Print ``T_N``, ``T_1`` and ``T_N / (T_N - T_1)`` (module docstring), medians of ``rounds``
    alternating iterations of member 1 at N rows and at 1 row, after one warm-up each."""
    runs = {n: member(1, n, num_steps, config, env_id) for n in (num_envs, 1)}
    times: dict[int, list[float]] = {n: [] for n in runs}
    for i in range(rounds + 1):
        for n, run in runs.items():
            start = time.perf_counter()
            run.iterate()
            if i:
                times[n].append(time.perf_counter() - start)
    full, calls = (statistics.median(times[n]) for n in (num_envs, 1))
    rows = full - calls
    print(f"  per-call cost: a lone iteration takes {full * 1e3:.0f} ms at N={num_envs} and {calls * 1e3:.0f} ms at "
          f"N=1 (median of {rounds}); without any per-call cost and with the per-row work at a lone run's rate, "
          + (f"K runs together would be {full / rows:.2f}x faster than one after another"
             if rows > 0 else "the rows cost nothing measurable here"))


def product_rates(members: int, rows: int, width: int = 64, repeats: int = 50) -> None:
    """Print the rate of a minibatch's hidden-layer product, ``[rows, width] x [width, width]``, as a lone run
    takes it (``mm``) and as the population takes it for all members (``bmm``), in GFLOP/s."""
    x, w = torch.randn(members, rows, width), torch.randn(members, width, width)

    def rate(product) -> float:
        product()
        start = time.perf_counter()
        for _ in range(repeats):
            product()
        return repeats * members * 2 * rows * width * width / (time.perf_counter() - start) / 1e9

    lone = rate(lambda: [x[k] @ w[k] for k in range(members)])
    batched = rate(lambda: torch.bmm(x, w))
    print(f"  a hidden layer's product, [{rows}, {width}] x [{width}, {width}]: {lone:.0f} GFLOP/s one member at a "
          f"time, {batched:.0f} GFLOP/s as one batched product of {members}")


if __name__ == "__main__":
    main()
