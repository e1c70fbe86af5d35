"""Generation's decoding step eager against compiled (``--compile inductor``; on CUDA also ``cudagraphs``): tokens
per second of GRPO's generation phase (prompt pass, then one cached step per response token, stepping the
environment) on Addition-v0 for a transformer policy of one size, modes alternating round by round in one process.

    OMP_NUM_THREADS=1 python benchmarks/llm/decode_compile.py --device cpu --size 128x4 --num-envs 512
    python benchmarks/llm/decode_compile.py --device cuda --size 256x6 --num-envs 4096   # a gpu_check.sh stage

The first call of each compiled mode (compilation, capture) is a warm-up and is not timed; its seconds are printed.
Prints every round and one table: median tokens/s per mode and the ratio to eager.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rl_gpu.algos.lm.common import generate
from rl_gpu.algos.lm.decode import Decoder
from rl_gpu.envs.registry import make
from rl_gpu.nn.transformer import TransformerPolicy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", default="128x4", help="WIDTHxBLOCKS")
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, help="generations timed per round and mode")
    args = parser.parse_args()
    device = torch.device(args.device)
    width, blocks = map(int, args.size.split("x"))
    env = make("Addition-v0", num_envs=args.num_envs, seed=0, device=device)
    torch.manual_seed(0)
    policy = TransformerPolicy(env.vocab.size, env.prompt_length, env.response_length, width, blocks,
                               max(1, width // 32)).to(device).eval()
    modes = ["off", "inductor"] + (["cudagraphs"] if device.type == "cuda" else [])
    decoders = {mode: Decoder(policy, mode) for mode in modes}
    generator = torch.Generator(device=device).manual_seed(0)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def run(mode: str, calls: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            env.group(args.group_size)
            generate(policy, env, generator, group=args.group_size, decoder=decoders[mode])
        sync()
        return calls * args.num_envs * env.response_length / (time.perf_counter() - start)

    for mode in modes:
        start = time.perf_counter()
        run(mode, 2)  # compile / capture and warm up
        print(f"{mode}: first two generations {time.perf_counter() - start:.1f} s", flush=True)
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            rates[mode].append(run(mode, args.calls))
            print(f"round {r + 1} {mode}: {rates[mode][-1]:,.0f} tokens/s", flush=True)
    eager = statistics.median(rates["off"])
    print(f"\nGRPO generation, transformer {args.size}, {args.num_envs} rows in groups of {args.group_size}, "
          f"R={env.response_length}, {device}")
    print("| decoding | tokens/s (median) | vs eager |\n| --- | ---: | ---: |")
    for mode in modes:
        rate = statistics.median(rates[mode])
        print(f"| {mode} | {rate:,.0f} | {rate / eager:.2f} |")


if __name__ == "__main__":
    main()
