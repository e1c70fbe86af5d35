"""SAC and TD3 iterations on a GPU, eager vs compiled (Inductor) vs graph-captured (one CUDA graph per
iteration), at N=1024 and 4096 parallel Pendulum-v1 environments (called by benchmarks/gpu_check.sh).

One iteration: one vector step of the N environments into the on-device replay buffer, then U gradient updates
of the 256x256 actor and twin critics on batches of B transitions. Each (algorithm, N, mode) is built fresh,
run for ``--warmup`` iterations (compilation, CUDA-graph warm-up and capture happen there), then timed over
``--iterations`` iterations bracketed by ``torch.cuda.synchronize()``. Printed: updates/s, transitions/s and the
speed-up over eager; the JSON goes to ``--output``. Also checks that the three modes reach the same parameters
after the same iterations (to a tolerance).

    python benchmarks/gpu_check_offpolicy.py --output artifacts/gpu_check/offpolicy.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.registry import make_algorithm
from rl_gpu.algos.sac import SACConfig
from rl_gpu.algos.td3 import TD3Config
from rl_gpu.envs.registry import make

CONFIGS = {"sac": SACConfig, "td3": TD3Config}


def build(algo: str, num_envs: int, mode: str, updates: int, batch: int):
    env = make("Pendulum-v1", num_envs=num_envs, seed=0, device="cuda", validate_actions=False)
    torch.manual_seed(0)
    config = CONFIGS[algo](learning_starts=num_envs, batch_size=batch, buffer_size=max(256 * num_envs, 10**6),
                           updates_per_step=float(updates))
    setup = Setup(env=env, seed=0, hidden_sizes=(256, 256), num_steps=1, compile=mode, learning_rate=3e-4)
    return make_algorithm(algo, setup, config)


def run(algo_name: str, num_envs: int, mode: str, args: argparse.Namespace) -> dict:
    algo = build(algo_name, num_envs, mode, args.updates, args.batch)
    start = time.perf_counter()
    for _ in range(args.warmup):
        algo.iterate()
    torch.cuda.synchronize()
    warmup = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iterations):
            algo.iterate()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / args.iterations)
    per_iteration = statistics.median(times)
    params = torch.cat([p.detach().flatten() for p in [*algo.policy.parameters(), *algo.critic.parameters()]])
    return {"algo": algo_name, "num_envs": num_envs, "mode": algo.compile, "warmup_seconds": warmup,
            "iteration_seconds": per_iteration, "updates_per_second": args.updates / per_iteration,
            "transitions_per_second": num_envs / per_iteration, "params": params.cpu()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", nargs="+", default=["sac", "td3"], choices=sorted(CONFIGS))
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--modes", nargs="+", default=["off", "inductor", "cudagraphs"])
    parser.add_argument("--updates", type=int, default=4, help="gradient updates per iteration (U)")
    parser.add_argument("--batch", type=int, default=4096, help="transitions per update (B)")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=Path("artifacts/gpu_check/offpolicy.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    rows, ok = [], True
    for algo in args.algos:
        for n in args.num_envs:
            base = None
            for mode in args.modes:
                row = run(algo, n, mode, args)
                params = row.pop("params")
                if base is None:
                    base, eager_rate = params, row["updates_per_second"]
                else:
                    # The same draws and the same arithmetic up to kernel rounding: parameters stay close.
                    row["max_param_difference"] = float((params - base).abs().max())
                    ok &= row["max_param_difference"] < 1e-2
                row["speedup_over_first_mode"] = row["updates_per_second"] / eager_rate
                rows.append(row)
                print(f"{algo} N={n:>5} {row['mode']:>10}: {row['updates_per_second']:9.1f} updates/s, "
                      f"{row['transitions_per_second']:11,.0f} transitions/s, x{row['speedup_over_first_mode']:.2f}"
                      f" over {args.modes[0]} (warm-up {row['warmup_seconds']:.1f} s"
                      + (f", max |param diff| {row['max_param_difference']:.1e}" if "max_param_difference" in row
                         else "") + ")", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                       "settings": {k: v for k, v in vars(args).items() if k != "output"}
                                       | {"output": str(args.output)}, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.output}")
    if not ok:
        print("FAILED: a compiled or graph-captured run drifted from eager", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
