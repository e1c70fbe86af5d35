"""GRPO's speed and memory on Addition-v0 for transformer policies of a few sizes: generation tokens/s (rows x R
positions per second of the generation phase: the key-value cache path, stepping the environment), update seconds
per iteration, and the learner's peak memory (peak RSS of a process that trains only that size on the CPU; peak
allocated CUDA memory on a GPU).

    OMP_NUM_THREADS=1 python benchmarks/llm/grpo_throughput.py --device cpu --sizes 128x4 256x6
    python benchmarks/llm/grpo_throughput.py --device cuda --num-envs 4096 --sizes 256x6 512x8

Each size runs in its own process (so peak RSS is that size's; a single size runs in this one); one warm-up
iteration, then --iterations timed ones (time.perf_counter around each phase, synchronised on CUDA). Prints one table.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike getrusage's maxrss, it does not carry over the memory of
    the process that forked this one)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The settings both sides of benchmarks/llm/grpo_side_by_side.py take (TRL's script imports this too)."""
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--prompts-per-step", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--beta", type=float, default=0.04)


def one(size: str, device: str, num_envs: int, iterations: int, group_size: int) -> dict:
    import torch

    from rl_gpu.algos.base import Setup
    from rl_gpu.algos.lm.common import generate
    from rl_gpu.algos.lm.config import GRPOConfig
    from rl_gpu.algos.lm.grpo import GRPO
    from rl_gpu.envs.registry import make

    torch.set_num_threads(1)
    width, layers = (int(x) for x in size.split("x"))
    env = make("Addition-v0", num_envs=num_envs, device=device, seed=0)
    algo = GRPO.from_setup(Setup(env=env, seed=0, learning_rate=1e-4, hidden_sizes=(width,) * layers),
                           GRPOConfig(group_size=group_size))

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    gen, upd = [], []
    for i in range(iterations + 1):
        sync()
        start = time.perf_counter()
        env.group(group_size)
        responses = generate(algo.policy, env, algo.rngs["sample"], group=group_size)
        sync()
        middle = time.perf_counter()
        algo.update(responses)
        sync()
        end = time.perf_counter()
        if i:  # the first is a warm-up
            gen.append(middle - start)
            upd.append(end - middle)
    tokens = num_envs * env.response_length
    params = sum(p.numel() for p in algo.policy.parameters())
    peak = (torch.cuda.max_memory_allocated() / 2 ** 20 if device.startswith("cuda")
            else peak_rss_mib())
    return {"size": size, "params": params, "tokens_per_s": tokens / (sum(gen) / len(gen)),
            "update_s": sum(upd) / len(upd), "peak_mib": peak, "num_envs": num_envs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", nargs="+", default=["128x4", "256x6"], help="WIDTHxBLOCKS per model")
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.device, args.num_envs, args.iterations, args.group_size)))
        return
    rows = []
    for size in args.sizes if len(args.sizes) > 1 else ():  # one size: in this process (no second start-up)
        out = subprocess.run([sys.executable, __file__, "--one", size, "--device", args.device, "--num-envs",
                              str(args.num_envs), "--iterations", str(args.iterations), "--group-size",
                              str(args.group_size)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if len(args.sizes) == 1:
        rows.append(one(args.sizes[0], args.device, args.num_envs, args.iterations, args.group_size))
    memory = "peak CUDA MiB" if args.device.startswith("cuda") else "peak RSS MiB"
    print(f"GRPO on Addition-v0, {args.num_envs} rows (groups of {args.group_size}), {args.device}, "
          f"{args.iterations} timed iterations")
    print(f"| model | parameters | generation tokens/s | update s/iteration | {memory} |\n|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['size']} | {r['params']:,} | {r['tokens_per_s']:,.0f} | {r['update_s']:.3f} "
              f"| {r['peak_mib']:,.0f} |")


if __name__ == "__main__":
    main()
