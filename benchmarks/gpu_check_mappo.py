"""MAPPO on vmas:navigation at many worlds: steps/s of whole iterations (VMAS stepping, the shared actor, the
update on every agent's rows), eager against torch.compile (inductor) and against the world critic
(``--world-critic``, eager), sides alternating.

    python benchmarks/gpu_check_mappo.py --device cuda --num-envs 65536 --num-steps 32   # a stage of gpu_check.sh
    OMP_NUM_THREADS=1 python benchmarks/gpu_check_mappo.py --device cpu --num-envs 64 --num-steps 8 --rounds 1

Prints one line per (round, mode) and a table: world steps per second (median over rounds) and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.mappo.algorithm import MAPPO
from rl_gpu.algos.mappo.config import MAPPOConfig
from rl_gpu.envs.registry import make


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


MODES = {"off": ("off", False), "inductor": ("inductor", False), "world-critic": ("off", True)}
"""Each side: (compile mode, world critic)."""


def build(args: argparse.Namespace, mode: str) -> MAPPO:
    compile_mode, world_critic = MODES[mode]
    env = make("vmas:navigation", num_envs=args.num_envs, device=args.device, seed=0,
               max_episode_steps=args.num_steps)
    setup = Setup(env=env, seed=0, learning_rate=3e-4, num_steps=args.num_steps, compile=compile_mode)
    return MAPPO.from_setup(setup, MAPPOConfig(update_epochs=4, num_minibatches=4, world_critic=world_critic))


def timed(algo: MAPPO, iterations: int, device: torch.device) -> float:
    """World steps per second over ``iterations`` iterations (after one warm-up iteration)."""
    algo.iterate()
    sync(device)
    start = time.perf_counter()
    for _ in range(iterations):
        out = algo.iterate()
    float(out["loss"])
    sync(device)
    return iterations * algo.env.num_envs * algo.num_steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--num-envs", type=int, default=65536)
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    device = torch.device(args.device)
    modes = tuple(MODES)
    algos = {mode: build(args, mode) for mode in modes}
    figures: dict[str, list[float]] = {mode: [] for mode in modes}
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            rate = timed(algos[mode], args.iterations, device)
            figures[mode].append(rate)
            print(f"round {r + 1} {mode}: {rate:,.0f} world steps/s", flush=True)
    agents = algos["off"].env.spec.num_agents
    print(f"\nMAPPO on vmas:navigation ({agents} agents), N={args.num_envs} worlds x T={args.num_steps} on {device}")
    print("| side | world steps/s (median) | agent steps/s | vs eager |")
    print("| --- | ---: | ---: | ---: |")
    eager = statistics.median(figures["off"])
    for mode in modes:
        rate = statistics.median(figures[mode])
        print(f"| {mode} | {rate:,.0f} | {rate * agents:,.0f} | {rate / eager:.2f} |")
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"num_envs": args.num_envs, "num_steps": args.num_steps, "rounds": figures}, f, indent=1)


if __name__ == "__main__":
    main()
