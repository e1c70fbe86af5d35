"""Train every built-in environment with its preset and print a Markdown table of what each reached.

    python benchmarks/learning.py [--envs CartPole-v1 ...] [--seeds 11] [--output artifacts/learning]

Each run is one `python -m rl_gpu train --env ID --device cpu --quiet` process: the whole-process wall time
includes interpreter start, imports, compilation (if any), every validation and the final evaluation;
"train s" is the time inside the training loop (collect + update) from summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ENVS = ("RussianRoulette-v0", "CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0",
        "MountainCarContinuous-v0")
ROBOTS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5", "Go1-Velocity-v0")
"""MuJoCo tasks (``--envs robots``); ``--total-timesteps`` gives the ones without a target a budget."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[11])
    parser.add_argument("--output", type=Path, default=Path("artifacts/learning"))
    parser.add_argument("--total-timesteps", type=int, default=None,
                        help="a step budget for every run (default: each preset's)")
    args = parser.parse_args()
    if args.envs == ["robots"]:
        args.envs = list(ROBOTS)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print("| env | seed | solved | threshold | best (final eval, 95% CI) | env steps | train s | process s | command |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for env_id in args.envs:
        for seed in args.seeds:
            out = args.output / env_id
            cmd = [sys.executable, "-m", "rl_gpu", "train", "--env", env_id, "--device", "cpu", "--quiet",
                   "--seeds", str(seed), "--output", str(out), "--overwrite"]
            if args.total_timesteps is not None:
                cmd += ["--total-timesteps", str(args.total_timesteps)]
            start = time.perf_counter()
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = time.perf_counter() - start
            summary = json.loads((out / f"seed-{seed}" / "summary.json").read_text())
            config = json.loads((out / f"seed-{seed}" / "config.json").read_text())
            best = summary["final_evaluation"]["best"]
            if env_id == "RussianRoulette-v0":
                result = (f"win {best['win_rate']:.4f} [{best['ci_low']:.4f}, {best['ci_high']:.4f}] vs "
                          f"initial {summary['final_evaluation']['initial']['win_rate']:.4f}")
                threshold = f"z >= {config['success_z']}"
            else:
                result = f"{best['mean_return']:.1f} ± {best['return_ci']:.1f} ({best['episodes']} ep.)"
                threshold = str(config["solve_threshold"] or f"budget {config['total_timesteps']:,} steps")
            shown = " ".join(cmd[1:]).replace(sys.executable, "python")
            print(f"| {env_id} | {seed} | {'yes' if summary['success'] else 'no'} | {threshold} | {result} | "
                  f"{summary['global_step']:,} | {summary['train_seconds']:.1f} | {wall:.1f} | `python {shown}` |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
