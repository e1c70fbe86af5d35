"""APPO on HalfCheetah, side by side: rl_gpu's (``--algo appo --async``) and Sample Factory 2's MuJoCo example, the
same cores, the same frame budget, sides alternating seed by seed.

Sample Factory runs in its own virtual environment (``--sf-python``; ``pip install sample-factory``), with its
example's settings (``sf_examples.mujoco``: 64-64 tanh MLP, rollout 64, batch 1024, 2 epochs of 4 batches,
lr 2.95e-3 decayed linearly, normalised inputs and returns) except the workers: 2 rollout workers of 8
environments each, on the CPU. Its pins keep Gymnasium 0.29, whose HalfCheetah is ``-v4``; rl_gpu's is ``-v5``:
the two have the same model, reward and observation (v5 added arguments and renamed an info key).

    OMP_NUM_THREADS=1 python benchmarks/sample_factory_side_by_side.py --sf-python /path/to/venv/bin/python \\
        --frames 1000000 --seeds 1 2 3

Both sides report what their training episodes returned (Sample Factory's last "Avg episode reward", the mean of
its recent training episodes; rl_gpu's mean return of the episodes of its last iterations covering at least 32
episodes) and frames per second over the whole run (Sample Factory's own final count; rl_gpu's steps over the run's
clock, validations and all). Prints one line per run, then the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from intervals import mean_ci


def ours(args: argparse.Namespace, seed: int, folder: Path) -> dict:
    command = [sys.executable, "-m", "rl_gpu", "train", "--env", "HalfCheetah-v5", "--algo", args.algo,
               "--device", "cpu", "--seeds", str(seed), "--total-timesteps", str(args.frames), "--solve-threshold",
               "1e9", "--eval-every", "100000", "--output", str(folder), "--quiet", *(["--async"] * args.asynchronous)]
    subprocess.run(command, capture_output=True, text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})
    records = [json.loads(line) for line in (folder / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in records if "update_seconds" in r]
    recent, episodes = [], 0
    for r in reversed(updates):
        if r.get("episodes"):
            recent.append((r["episodes"], r["episode_return"]))
            episodes += r["episodes"]
        if episodes >= 32:
            break
    mean = sum(n * ret for n, ret in recent) / max(1, sum(n for n, _ in recent))
    return {"return": mean, "fps": updates[-1]["global_step"] / updates[-1]["time"], "frames": updates[-1]["global_step"]}


def sample_factory(args: argparse.Namespace, seed: int, folder: Path) -> dict:
    command = [args.sf_python, "-m", "sf_examples.mujoco.train_mujoco", "--env=mujoco_halfcheetah",
               f"--experiment=s{seed}", f"--train_dir={folder}", "--num_workers=2", "--num_envs_per_worker=8",
               f"--train_for_env_steps={args.frames}", "--device=cpu", f"--seed={seed}"]
    out = subprocess.run(command, capture_output=True, text=True, check=False,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    final = re.findall(r"Collected \{0: (\d+)\}, FPS: ([\d.]+)", text)
    rewards = re.findall(r"Avg episode reward: \[\(0, '(-?[\d.]+)'\)\]", text)
    if not final or not rewards:
        raise SystemExit(f"Sample Factory did not finish: {text[-600:]}")
    return {"return": float(rewards[-1]), "fps": float(final[-1][1]), "frames": int(final[-1][0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf-python", required=True, help="python of a virtual environment with sample-factory")
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--algo", default="appo", choices=["appo", "ppo", "impala"], help="rl_gpu's side")
    parser.add_argument("--no-async", dest="asynchronous", action="store_false", help="rl_gpu's synchronous loop")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"rl_gpu": [], "Sample Factory": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate(args.seeds):
            sides = [("rl_gpu", ours), ("Sample Factory", sample_factory)]
            for name, run in sides if i % 2 == 0 else sides[::-1]:
                row = run(args, seed, Path(tmp) / f"{name.replace(' ', '_')}-{seed}")
                results[name].append(row)
                print(f"seed {seed} {name}: return {row['return']:.1f}, {row['fps']:,.0f} frames/s "
                      f"({row['frames']:,} frames), load {os.getloadavg()[0]:.2f}", flush=True)
    rng = np.random.default_rng(0)
    print(f"\nHalfCheetah, {args.frames:,} frames per run, seeds {args.seeds}; rl_gpu: --algo {args.algo}"
          f"{' --async' if args.asynchronous else ''}")
    print("| side | return per seed | mean [95% CI] | frames/s per seed | median |")
    print("| --- | --- | --- | --- | ---: |")
    for name, rows in results.items():
        m, lo, hi = mean_ci([r["return"] for r in rows], rng)
        returns = ", ".join(f"{r['return']:.1f}" for r in rows)
        speeds = ", ".join(f"{r['fps']:,.0f}" for r in rows)
        median = float(np.median([r["fps"] for r in rows]))
        print(f"| {name} | {returns} | {m:.1f} [{lo:.1f}, {hi:.1f}] | {speeds} | {median:,.0f} |")
    ratio = np.median([r["fps"] for r in results["rl_gpu"]]) / np.median([r["fps"] for r in results["Sample Factory"]])
    print(f"rl_gpu's frames/s / Sample Factory's (medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
