"""Learning while collecting (``--async``) against the synchronous loop, side by side in one run.

Each round trains every setting once from one command (``rl-gpu train --env ENV --device cpu``, the
environment's preset, a step budget, one validation at the end), the settings' order alternating round by round,
and reads from the run's files:

- training steps/s: environment steps over the seconds of the iterations (collection and update phases; the
  validation and final evaluation left out);
- the best policy's mean return in the run's final evaluation (its own fresh episodes), per seed.

    OMP_NUM_THREADS=1 python benchmarks/async_collect.py --env HalfCheetah-v5 --steps 200000 --seeds 1 2 3

Settings: ``sync-t1`` (torch on 1 thread), ``sync-t2`` (2 threads: the synchronous loop's other setting on two
cores), ``async-t1`` (``--async``, 1 torch thread in each of the two threads), ``double-t1``
(``--double-buffer``: the rows in two halves, the engine stepping one while the policy acts on the other; the
synchronous loop's results, so its return is sync-t1's), ``appo-async-t1`` and ``appo-decoupled-t1`` (APPO
with ``--async``, clipping to the collecting policy or, ``--decoupled-clip``, to the learner as its update starts,
whatever ``--algo`` says); ``--algo appo`` or ``impala`` for the V-trace learners in the other settings.
Prints one line per run as it goes, then a table: steps/s per seed and median, the ratio of medians to the best
synchronous setting, and the mean return with a 95% bootstrap interval over seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from intervals import mean_ci

SETTINGS = {"sync-t1": ["--threads", "1"], "sync-t2": ["--threads", "2"], "async-t1": ["--threads", "1", "--async"],
            "double-t1": ["--threads", "1", "--double-buffer"],
            "appo-async-t1": ["--threads", "1", "--algo", "appo", "--async"],
            "appo-decoupled-t1": ["--threads", "1", "--algo", "appo", "--async", "--decoupled-clip"]}


def run(env: str, algo: str, steps: int, seed: int, flags: list[str], folder: Path) -> dict:
    algo = flags[flags.index("--algo") + 1] if "--algo" in flags else algo  # a setting may name its own
    flags = [f for i, f in enumerate(flags) if f != "--algo" and (i == 0 or flags[i - 1] != "--algo")]
    command = [sys.executable, "-m", "rl_gpu", "train", "--env", env, "--algo", algo, "--device", "cpu",
               "--seeds", str(seed), "--total-timesteps", str(steps), "--solve-threshold", "1e9",
               "--eval-every", "100000", "--output", str(folder), "--quiet", *flags]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          check=False)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    records = [json.loads(line) for line in (folder / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in records if "update_seconds" in r]
    seconds = sum(r["collect_seconds"] + r["update_seconds"] for r in updates)
    summary = json.loads((folder / f"seed-{seed}" / "summary.json").read_text())
    return {"steps_per_second": updates[-1]["global_step"] / seconds, "seconds": seconds,
            "return": summary["final_evaluation"]["best"]["mean_return"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--algo", default="ppo", choices=["ppo", "appo", "impala"])
    parser.add_argument("--steps", type=int, default=200_000, help="environment steps per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args()
    results: dict[str, list[dict]] = {name: [] for name in args.settings}
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate(args.seeds):
            order = args.settings if i % 2 == 0 else args.settings[::-1]
            for name in order:
                row = run(args.env, args.algo, args.steps, seed, SETTINGS[name], Path(tmp) / f"{name}-{seed}")
                results[name].append(row)
                print(f"seed {seed} {name}: {row['steps_per_second']:,.0f} steps/s ({row['seconds']:.0f} s), "
                      f"return {row['return']:.1f}, load {os.getloadavg()[0]:.2f}", flush=True)
    rng = np.random.default_rng(0)
    medians = {name: float(np.median([r["steps_per_second"] for r in rows])) for name, rows in results.items()}
    best_sync = max((v for k, v in medians.items() if k.startswith("sync")), default=None)
    print(f"\n{args.algo} on {args.env}, {args.steps:,} steps per run, seeds {args.seeds}")
    print("| setting | steps/s per seed | median | / best sync | return per seed | mean [95% CI] |")
    print("| --- | --- | ---: | ---: | --- | --- |")
    for name, rows in results.items():
        speeds = ", ".join(f"{r['steps_per_second']:,.0f}" for r in rows)
        returns = ", ".join(f"{r['return']:.1f}" for r in rows)
        m, lo, hi = mean_ci([r["return"] for r in rows], rng)
        ratio = f"{medians[name] / best_sync:.2f}" if best_sync else "-"
        print(f"| {name} | {speeds} | {medians[name]:,.0f} | {ratio} | {returns} | {m:.1f} [{lo:.1f}, {hi:.1f}] |")


if __name__ == "__main__":
    main()
