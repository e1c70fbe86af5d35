"""bf16 / fp16 against fp32 for PPO's update (``--precision``), on this machine's device, in one process with the
precisions alternating round by round.

Paths: the MinAtar CNN (``MinAtar-Breakout-v1``'s preset policy: one 3x3 conv of 16 channels, 128 hidden) and a
256x256 MLP (CartPole-v1 observations), each on the rollout of its preset size (64 envs x 128 steps, 4 epochs of 8
minibatches). Prints every round's update time and the median ratio fp32 / mixed (above 1: mixed is faster).

    OMP_NUM_THREADS=1 python benchmarks/precision.py --rounds 5 [--device cuda] [--precisions bf16 fp16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.registry import make_algorithm
from rl_gpu.envs.registry import make

PATHS = {"minatar_cnn": ("MinAtar-Breakout-v1", (128,)), "mlp_256x256": ("CartPole-v1", (256, 256))}


def _algo(env_id: str, hidden: tuple[int, ...], precision: str, device: str, num_envs: int = 64):
    torch.manual_seed(0)
    env = make(env_id, num_envs=num_envs, seed=0, device=device)
    setup = Setup(env=env, seed=0, num_steps=128, hidden_sizes=hidden, precision=precision)
    return make_algorithm("ppo", setup, PPOConfig(update_epochs=4, num_minibatches=8))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precisions", nargs="+", default=["bf16"])
    parser.add_argument("--num-envs", type=int, default=64, help="rows of the rollout (the presets' 64 by default)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"device {args.device}, {args.num_envs} envs x 128 steps, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)")
    for path, (env_id, hidden) in PATHS.items():
        algos = {p: _algo(env_id, hidden, p, args.device, args.num_envs) for p in ["fp32", *args.precisions]}
        rollout = algos["fp32"].collect().clone()
        for algo in algos.values():  # warm-up
            algo.update(rollout)
        times = {p: [] for p in algos}
        for _ in range(args.rounds):
            for p, algo in algos.items():
                _sync(args.device)
                start = time.perf_counter()
                algo.update(rollout)
                _sync(args.device)
                times[p].append(time.perf_counter() - start)
        for p in args.precisions:
            ratio = statistics.median(times["fp32"]) / statistics.median(times[p])
            rounds = ", ".join(f"{a * 1e3:.0f}/{b * 1e3:.0f}" for a, b in zip(times["fp32"], times[p]))
            print(f"{path:12s} fp32/{p} update ms per round: {rounds}; median ratio fp32/{p} {ratio:.2f} "
                  f"({'faster' if ratio > 1 else 'slower'} in {p})")


if __name__ == "__main__":
    main()
