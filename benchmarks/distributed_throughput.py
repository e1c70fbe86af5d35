"""Data-parallel PPO throughput: K processes under ``torchrun`` against one, the same ``--num-envs`` per process.

The driver (no ``--worker``) launches ``torchrun --standalone --nproc-per-node K`` on this script for each K in
``--processes`` (default: 1 and 2 on the CPU; 1 and every visible GPU on CUDA) and prints, for each K, the
transitions per second of all processes together, the speed-up over K=1 and the efficiency (speed-up / K), all
measured in this one invocation. Each worker builds its own CartPole-v1 environments (N rows, its own seed),
starts from rank 0's parameters and runs ``--warmup`` PPO iterations (collect T x N, then the update with its
gradient all-reduces), then ``--iterations`` timed ones; the time is the slowest rank's.

    python benchmarks/distributed_throughput.py --device cpu --num-envs 256          # 1 vs 2 processes
    python benchmarks/distributed_throughput.py --device cuda --num-envs 65536 --output artifacts/ddp.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

WORKER_TAG = "DDP-THROUGHPUT "


def worker(args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from rl_gpu.algos.base import Setup
    from rl_gpu.algos.ppo.config import PPOConfig
    from rl_gpu.algos.registry import make_algorithm
    from rl_gpu.core.seeding import derive_seed
    from rl_gpu.envs.registry import make
    from rl_gpu.runtime import distributed as D
    from rl_gpu.runtime.compile import resolve_compile
    from rl_gpu.training import ranks

    torch.set_num_threads(1)
    with D.process_group(args.device):
        device = torch.device("cuda" if args.device == "cuda" else "cpu")
        env = make("CartPole-v1", num_envs=args.num_envs, device=device, seed=derive_seed(0, "train-env", D.rank()),
                   validate_actions=False)
        torch.manual_seed(0)
        compile_mode = resolve_compile(ranks.resolve_compile(args.compile, device), device)
        setup = Setup(env=env, seed=ranks.algorithm_seed(0), learning_rate=1e-3, num_steps=args.num_steps,
                      compile=compile_mode)
        algo = make_algorithm("ppo", setup, PPOConfig(num_minibatches=4, update_epochs=4))
        ranks.broadcast_algorithm(algo)

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize()
            D.barrier()

        for _ in range(args.warmup):
            algo.iterate()
        sync()
        start = time.perf_counter()
        for _ in range(args.iterations):
            algo.iterate()
        sync()
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64,
                               device=device if device.type == "cuda" else "cpu")
        if D.is_distributed():
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        seconds = float(elapsed.item())
        k = D.world_size()
        if D.is_main_process():
            transitions = k * args.num_envs * args.num_steps * args.iterations
            print(WORKER_TAG + json.dumps({
                "processes": k, "device": args.device, "compile": compile_mode, "num_envs_per_process": args.num_envs,
                "num_steps": args.num_steps, "iterations": args.iterations, "seconds": seconds,
                "transitions_per_second": transitions / seconds, "updates_per_second": args.iterations / seconds,
            }), flush=True)


def launch(k: int, args: argparse.Namespace) -> dict:
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun) if torchrun.exists() else "torchrun", "--standalone", "--nproc-per-node", str(k),
               __file__, "--worker", "--device", args.device, "--num-envs", str(args.num_envs), "--num-steps",
               str(args.num_steps), "--warmup", str(args.warmup), "--iterations", str(args.iterations),
               "--compile", args.compile]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(WORKER_TAG)]
    if proc.returncode != 0 or not lines:
        sys.exit(f"K={k} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(WORKER_TAG):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--processes", type=int, nargs="+", default=None,
                        help="values of K (default: 1 2 on the CPU; 1 and the GPU count on CUDA)")
    parser.add_argument("--num-envs", type=int, default=256, help="environments per process")
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--compile", default="auto", choices=("auto", "off", "inductor"))
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.processes is None:
        gpus = torch.cuda.device_count() if args.device == "cuda" else 0
        args.processes = sorted({1, gpus}) if args.device == "cuda" else [1, 2]
    results = [launch(k, args) for k in args.processes]
    base = next((r["transitions_per_second"] for r in results if r["processes"] == 1), None)
    print(f"PPO on CartPole-v1, {args.device}, N={args.num_envs} per process, T={args.num_steps}, "
          f"compile {results[0]['compile']}:")
    print(f"{'K':>3} {'transitions/s':>15} {'updates/s':>10} {'speed-up':>9} {'efficiency':>10}")
    for r in results:
        ratio = r["transitions_per_second"] / base if base else float("nan")
        r["speedup"], r["efficiency"] = ratio, ratio / r["processes"]
        print(f"{r['processes']:>3} {r['transitions_per_second']:>15,.0f} {r['updates_per_second']:>10.2f} "
              f"{ratio:>8.2f}x {ratio / r['processes']:>10.2f}")
    if len(results) == 1:
        print("only one process count measured (one GPU visible): the multi-GPU rows need a machine with several")
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
