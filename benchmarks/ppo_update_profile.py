"""Where a PPO update's time goes on CPU, and what micro-batches and the CPU sigmoid form of tanh change.

The configuration of ``rl-gpu bench --measure train`` (and of issue 13's PureJaxRL comparison): CartPole-v1,
N=4096 environments, T=16 steps, 4 epochs of 4 minibatches of 16,384 slots, two 64-64 tanh MLPs, fused Adam,
eager, one thread. One rollout is collected, then ``PPO.update`` is timed on it over several rounds, the
variants alternating within each round:

- the whole minibatch (one forward/backward of 16,384 rows, the default) against ``micro_batch_size`` 8192, 4096
  and 2048 rows;
- the CPU sigmoid form of tanh (:class:`rl_gpu.nn.cpu_kernels.Tanh`) against ``torch.tanh`` (``--tanh``: the form's
  threshold raised above every batch).

``--compiled`` instead times whole compiled iterations (``--compile inductor``, ``PPO.iterate``) of three
algorithms in one process, alternating: every hidden layer as ``addmm`` (ATen copies the broadcast bias into
the output first) and the heads' input gradients by BLAS; the bias added in the activation's loop
(:mod:`rl_gpu.runtime.inductor_passes`); and that plus the heads' input gradients as multiply-adds
(:class:`rl_gpu.nn.cpu_kernels._NarrowLinear`, the default).

Then torch.profiler's self time of one default update, grouped by what the operators do, with the GEMMs' share
of the update's floating-point work and the rate they ran at, against a 1024 x 1024 x 1024 matmul on the same
core (this CPU's practical GEMM peak). The update's GEMM work is counted from the network sizes: per row and
minibatch pass, forward 2 * sum(in * out) flops per network, backward twice that (less the first layer's input
gradient, which nothing needs).

    OMP_NUM_THREADS=1 python benchmarks/ppo_update_profile.py [--rounds 7] [--tanh | --compiled]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from dataclasses import replace

import torch

from rl_gpu.cli.bench import BenchConfig, _algo
from rl_gpu.nn.cpu_kernels import Tanh
from rl_gpu.runtime.allocator import keep_freed_host_memory

CATEGORIES = {
    "GEMM (mm, addmm, oneDNN's linear + tanh)": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                                                 "mkldnn::_linear_pointwise"),
    "activations (sigmoid, tanh, their backward)": ("aten::sigmoid", "aten::sigmoid_backward", "aten::tanh",
                                                   "aten::tanh_backward"),
    "bias / output copies (addmm's input, casts)": ("aten::copy_", "aten::_to_copy"),
    "minibatch gathers (index)": ("aten::index", "aten::index_select", "aten::gather"),
    "reductions (bias gradients, means)": ("aten::sum", "aten::mean", "aten::linalg_vector_norm",
                                           "aten::_foreach_norm"),
    "optimiser (fused Adam, clipping)": ("aten::_fused_adam_", "aten::_foreach_mul_", "Optimizer.step#Adam.step",
                                         "Optimizer.zero_grad#Adam.zero_grad"),
    "log-softmax and its backward": ("aten::_log_softmax", "aten::_log_softmax_backward_data"),
}


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1e3


def gemm_peak_gflops(size: int = 1024, calls: int = 20) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def update_gemm_flops(algo, slots: int) -> float:
    """Floating-point work of the update's GEMMs (forward + backward of both networks, every epoch)."""
    per_row = 0
    for net in (algo.policy.actor, algo.policy.critic):
        sizes = [(m.in_features, m.out_features) for m in net if isinstance(m, torch.nn.Linear)]
        forward = 2 * sum(i * o for i, o in sizes)
        first_input_grad = 2 * sizes[0][0] * sizes[0][1]
        per_row += forward + 2 * forward - first_input_grad
    return per_row * slots * algo.config.update_epochs


def compiled_forms(rounds: int) -> None:
    """Whole compiled iterations with and without the compiled CPU forms, alternating in one process."""
    from rl_gpu.nn import cpu_kernels as layers
    from rl_gpu.runtime import inductor_passes

    options, narrow = dict(inductor_passes.INDUCTOR_OPTIONS), layers.NARROW_OUT
    forms = {"hidden layers as addmm, heads' input gradient by BLAS": ({}, 0),
             "bias in the activation's loop": (options, 0),
             "and heads' input gradient as multiply-adds (default)": (options, narrow)}
    algos, slots = {}, 0
    try:
        for name, (form_options, form_narrow) in forms.items():
            # Options are read when a unit is built, NARROW_OUT when it is traced (and guarded on).
            inductor_passes.INDUCTOR_OPTIONS.clear()
            inductor_passes.INDUCTOR_OPTIONS.update(form_options)
            layers.NARROW_OUT = form_narrow
            env, algo, steps = _algo(BenchConfig(env="CartPole-v1"), torch.device("cpu"), 4096, "inductor")
            start = time.perf_counter()
            algo.iterate()
            print(f"compiled ({name}): first call {time.perf_counter() - start:.1f} s", flush=True)
            algos[name], slots = algo, steps * env.num_envs
        times: dict[str, list[float]] = defaultdict(list)
        for r in range(rounds + 1):  # the first round warms up and is not counted
            for name in (list(forms) if r % 2 == 0 else list(forms)[::-1]):
                layers.NARROW_OUT = forms[name][1]
                start = time.perf_counter()
                algos[name].iterate()
                times[name].append(time.perf_counter() - start)
    finally:
        inductor_passes.INDUCTOR_OPTIONS.clear()
        inductor_passes.INDUCTOR_OPTIONS.update(options)
        layers.NARROW_OUT = narrow
    base = list(forms)[0]
    print(f"\nPPO.iterate compiled (N=4096, T=16, {slots} transitions), median of {rounds} alternating rounds:")
    for name, t in times.items():
        ms = median_ms(t[1:])
        faster = sum(a < b for a, b in zip(t[1:], times[base][1:]))
        print(f"  {name:<55} {ms:7.1f} ms  {slots / ms * 1e3:>9,.0f}/s  {median_ms(times[base][1:]) / ms:5.2f}x"
              + ("" if name == base else f"  (faster in {faster} of {rounds} rounds)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    parser.add_argument("--tanh", action="store_true", help="also time the MLP with torch.tanh layer by layer")
    parser.add_argument("--compiled", action="store_true",
                        help="time compiled iterations with and without the compiled CPU forms instead")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.tanh and args.compiled:
        parser.error("--tanh times the eager update; it cannot be combined with --compiled")
    torch.set_num_threads(1)
    keep_freed_host_memory()  # as rl-gpu train and bench do
    if args.compiled:
        compiled_forms(args.rounds)
        return
    env, algo, steps = _algo(BenchConfig(env="CartPole-v1"), torch.device("cpu"), 4096, "off")
    slots = steps * env.num_envs
    minibatch = slots // algo.config.num_minibatches
    print(f"CartPole-v1, N={env.num_envs}, T={steps}: {slots} slots, {algo.config.update_epochs} epochs x "
          f"{algo.config.num_minibatches} minibatches of {minibatch}, eager, 1 thread")
    algo.iterate()
    rollout = algo.collect()
    config = algo.config
    variants = {"whole minibatch (default)": (None, Tanh.SIGMOID_FROM)}
    variants.update({f"micro-batches of {m} rows": (m, Tanh.SIGMOID_FROM) for m in (8192, 4096, 2048)})
    if args.tanh:
        variants["whole minibatch, torch.tanh"] = (None, 1 << 62)
    times: dict[str, list[float]] = defaultdict(list)
    sigmoid_from = Tanh.SIGMOID_FROM
    try:
        for _ in range(args.rounds + 1):  # the first round warms up and is not counted
            for name, (micro, threshold) in variants.items():
                algo.units.config = replace(config, micro_batch_size=micro)
                Tanh.SIGMOID_FROM = threshold
                start = time.perf_counter()
                algo.update(rollout)
                times[name].append(time.perf_counter() - start)
    finally:
        algo.units.config, Tanh.SIGMOID_FROM = config, sigmoid_from
    base = median_ms(times["whole minibatch (default)"][1:])
    print(f"\nPPO.update, median of {args.rounds} alternating rounds (transitions/s = slots / update time):")
    for name, t in times.items():
        ms = median_ms(t[1:])
        print(f"  {name:<40} {ms:8.1f} ms  {slots / ms * 1e3:>11,.0f}/s  {base / ms:5.2f}x the whole minibatch")

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        algo.update(rollout)
    rows = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    total = sum(rows.values())
    print(f"\nprofile of one default update (self time, profiler overhead included): {total / 1e3:.1f} ms")
    seen = set()
    for category, names in CATEGORIES.items():
        us = sum(rows.get(n, 0.0) for n in names)
        seen.update(names)
        print(f"  {category:<46} {us / 1e3:8.1f} ms  {us / total:6.1%}")
    rest = sorted(((us, key) for key, us in rows.items() if key not in seen), reverse=True)
    print(f"  {'everything else':<46} {sum(us for us, _ in rest) / 1e3:8.1f} ms  "
          f"{sum(us for us, _ in rest) / total:6.1%}  (largest: "
          f"{', '.join(f'{k} {us / 1e3:.1f}' for us, k in rest[:5])})")
    gemm_us = sum(rows.get(n, 0.0) for n in CATEGORIES["GEMM (mm, addmm, oneDNN's linear + tanh)"])
    flops = update_gemm_flops(algo, slots)
    peak = gemm_peak_gflops()
    print(f"\nGEMM work {flops / 1e9:.1f} GFLOP per update: {flops / gemm_us / 1e3:.1f} GFLOP/s inside the GEMMs, "
          f"{flops / total / 1e3:.1f} GFLOP/s over the whole update; this core's 1024^3 matmul: {peak:.1f} GFLOP/s")
    print(f"an update made of GEMMs alone at that peak would take {flops / peak / 1e6:.1f} ms")


if __name__ == "__main__":
    main()
