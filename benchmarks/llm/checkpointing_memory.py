"""The learner's memory with and without gradient checkpointing, for transformer policies of a few sizes.

Each (size, setting) runs in a fresh process: build the policy, generate one batch of responses to Addition-v0
prompts, warm up on two of them, then time one training pass (the update's forward over the whole token buffer,
and its backward) and measure what the forward keeps for the backward (the bytes of every tensor autograd saves,
counted by a saved-tensors hook: exact), and the process's peak resident memory during the pass above its
resident memory just before it (on a GPU: the peak allocated memory above the allocation before it; on a CPU the
allocator's reuse makes this one noisy). Prints one table.

    OMP_NUM_THREADS=1 python benchmarks/llm/checkpointing_memory.py --sizes 128x4 256x6 512x8 --rows 256
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _one(width: int, layers: int, rows: int, recompute: bool, device: str) -> dict:
    import torch

    from rl_gpu.algos.lm.common import generate
    from rl_gpu.envs.registry import make
    from rl_gpu.nn.transformer import TransformerPolicy

    torch.set_num_threads(1)
    torch.manual_seed(0)
    env = make("Addition-v0", num_envs=rows, seed=0, device=device)
    policy = TransformerPolicy(env.vocab.size, env.prompt_length, env.response_length, width, layers,
                               max(1, width // 64)).to(device)
    tokens = generate(policy, env, torch.Generator(device=device).manual_seed(0)).tokens
    policy.model.gradient_checkpointing = recompute
    logits, values = policy.response_outputs(tokens[:2])  # a warm-up on two rows: one-time set-up costs
    (logits.mean() + values.mean()).backward()
    policy.zero_grad()
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated() / 2**20
    else:
        before = _rss_mib()
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits, values = policy.response_outputs(tokens)
        loss = logits.log_softmax(-1).mean() + values.square().mean()
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": time.perf_counter() - start, "peak_above_mib": peak - before, "saved_mib": saved[0] / 2**20,
            "params_m": sum(p.numel() for p in policy.parameters()) / 1e6}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["128x4", "256x6", "512x8"], help="WIDTHxLAYERS")
    parser.add_argument("--rows", type=int, default=256, help="responses in the batch")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for size in args.sizes:
        parts = size.split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts) or int(parts[0]) % 64:
            parser.error(f"--sizes takes WIDTHxLAYERS with a width that is a multiple of 64, got {size!r}")
    if args.rows < 1:
        parser.error(f"--rows must be at least 1, got {args.rows}")
    if args.one:
        width, layers, recompute = json.loads(args.one)
        print(json.dumps(_one(width, layers, args.rows, recompute, args.device)))
        return
    print(f"rows {args.rows}, device {args.device}, load {os.getloadavg()[0]:.2f}")
    print("| width x blocks | parameters (M) | setting | pass s | saved for backward (MiB) | "
          "peak above the start (MiB) |")
    print("|---|---:|---|---:|---:|---:|")
    for size in args.sizes:
        width, layers = (int(v) for v in size.split("x"))
        for recompute in (False, True):
            out = subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--device", args.device,
                                  "--one", json.dumps([width, layers, recompute])],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            setting = "checkpointed" if recompute else "plain"
            print(f"| {width} x {layers} | {r['params_m']:.2f} | {setting} | {r['seconds']:.2f} | "
                  f"{r['saved_mib']:.0f} | {r['peak_above_mib']:.0f} |")


if __name__ == "__main__":
    main()
