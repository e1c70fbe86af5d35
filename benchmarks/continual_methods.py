"""Methods against forgetting on one task sequence, over seeds: each method is one ``rl-gpu continual`` run (all
seeds), one after the other, and the table gives each measure's mean and 95% interval over the seeds.

The default sequence is three CartPole tasks: the plain one, the same with its two pushes swapped
(``action_perm=1,0``: the policy that solves it does the opposite of the first's), and a pole twice as long (close
to the first). Fine-tuning forgets the first task while it learns the second, and the second while it learns the
third; a method that keeps them should keep its forgetting low without giving up the last task.

    OMP_NUM_THREADS=1 python benchmarks/continual_methods.py --seeds 1 2 3 --steps-per-task 300000 --measure return
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TASKS = ["CartPole-v1", "CartPole-v1?action_perm=1,0", "CartPole-v1?length=1.0"]
METHODS = {
    "finetune": [],
    "rehearsal 0.25": ["--method", "rehearsal", "--rehearsal-share", "0.25"],
    "l2 0.3": ["--method", "l2", "--anchor-coef", "0.3"],
    "ewc 1000": ["--method", "ewc", "--anchor-coef", "1000"],
    "multihead": ["--fixed", "policy=multihead"],
    "multihead + ewc 1000": ["--method", "ewc", "--anchor-coef", "1000", "--fixed", "policy=multihead"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps-per-task", type=int, default=150_000)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--output", type=Path, default=Path("artifacts/continual_methods"))
    parser.add_argument("--measure", choices=["success", "return"], default="return")
    args = parser.parse_args()
    print(f"tasks {TASKS}, {args.steps_per_task:,} steps per task, seeds {args.seeds}, measure {args.measure}, load "
          f"{os.getloadavg()[0]:.2f}")
    rows = []
    for name in args.methods:
        out = args.output / name.replace(" ", "_").replace("+", "plus")
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "rl_gpu", "continual", "--tasks", *TASKS, "--steps-per-task",
               str(args.steps_per_task), "--seeds", *map(str, args.seeds), "--output", str(out), "--overwrite",
               "--device", "cpu", "--measure", args.measure, *METHODS[name]]
        done = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            print(f"{name}: failed ({done.returncode}): {done.stderr.strip()[-500:]}")
            continue
        summary = json.loads((out / "continual.json").read_text())
        matrices = [json.loads((out / f"continual-seed-{s}.json").read_text())["performance"] for s in args.seeds]
        cells = [f"{summary[m]['mean']:.3f} ± {summary[m]['ci95']:.3f}" for m in
                 ("forgetting", "average_performance", "final_task_performance", "forward_transfer")]
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {seconds:.0f} |")
        print(f"{name}: {cells}; per seed forgetting {summary['forgetting']['values']}; matrices {matrices}",
              flush=True)
    print("\n| method | forgetting | average performance | last task | forward transfer | wall s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
