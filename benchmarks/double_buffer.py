"""Double-buffered collection (``--double-buffer``) against the synchronous one, side by side in one process:
PPO's ``collect`` of one rollout on a MuJoCo task, the two engines alternating round by round, the same policy.

The double-buffered engine steps the rows in two halves: the policy acts on one while a worker thread steps the
other (MuJoCo's rollout and torch's kernels release the GIL). It pays twice the Python dispatch of a step (each half
runs every operation), so it can only win where a half's compute outweighs that.

    OMP_NUM_THREADS=1 python benchmarks/double_buffer.py --env HalfCheetah-v5 --num-envs 64 256 1024 --rounds 3
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch

from rl_gpu import make
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.nn.actor_critic import policy_for_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engine-threads", type=int, default=1, help="MuJoCo engine threads (num_threads)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.env}, T={args.num_steps}, hidden {args.hidden}, engine threads {args.engine_threads}, "
          f"load {os.getloadavg()[0]:.2f}")
    print("| N | sync steps/s per round | double-buffered | median ratio |\n| ---: | --- | --- | ---: |")
    for n in args.num_envs:
        torch.manual_seed(0)
        kwargs = {"num_threads": args.engine_threads} if args.env.endswith(("-v5", "-v0")) else {}
        envs = [make(args.env, num_envs=n, seed=1, **kwargs) for _ in range(2)]
        policy = policy_for_env(envs[0].spec, hidden_sizes=tuple(args.hidden))
        algos = [PPO(copy.deepcopy(policy), PPOConfig(), 3e-4, seed=0, env=env, num_steps=args.num_steps,
                     double_buffer=on) for env, on in zip(envs, (False, True))]
        for algo in algos:
            algo.collect()  # warm-up
        rates: list[list[float]] = [[], []]
        for r in range(args.rounds):
            for i in (0, 1) if r % 2 == 0 else (1, 0):
                start = time.perf_counter()
                algos[i].collect()
                rates[i].append(n * args.num_steps / (time.perf_counter() - start))
        ratio = statistics.median(rates[1]) / statistics.median(rates[0])
        cells = [", ".join(f"{x:,.0f}" for x in r) for r in rates]
        print(f"| {n} | {cells[0]} | {cells[1]} | {ratio:.2f} |", flush=True)


if __name__ == "__main__":
    main()
