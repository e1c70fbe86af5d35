"""Why rl_gpu.policy.Tanh computes tanh as 2 sigmoid(2x) - 1 on CPU from 8192 elements up: time both forms,
forward only (rollouts, evaluation) and forward + backward (updates), eager and compiled.

``--linear`` instead times a whole hidden layer's forward, ``tanh(x W^T + b)``, as oneDNN's fused linear + tanh
against the sigmoid form ``2 sigmoid(x (2W)^T + 2b) - 1`` (the two forms :class:`rl_gpu.nn.cpu_kernels._LinearTanh`
chooses between; ``USE_ONEDNN`` is on where ATen's kernels use AVX-512), at the MLPs' shapes, the two alternating.

    OMP_NUM_THREADS=1 python benchmarks/cpu_tanh.py [--linear]
"""

import argparse
import time

import torch

from rl_gpu.nn import cpu_kernels
from rl_gpu.nn.cpu_kernels import Tanh, _tanh_by_sigmoid, _TanhBySigmoid


def median_us(fn, x, calls=200, repeats=5):
    fn(x)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        times.append((time.perf_counter() - start) / calls)
    return sorted(times)[repeats // 2] * 1e6


def main():
    torch.set_num_threads(1)
    for shape in ((32, 64), (128, 64), (512, 64), (4096, 64)):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 2
        grad = torch.ones(shape)
        xg = x.clone().requires_grad_()
        rows = {
            "forward": (torch.tanh, _tanh_by_sigmoid),
            "compiled forward": (torch.compile(torch.tanh), torch.compile(_tanh_by_sigmoid)),
            "forward+backward": (lambda v: torch.tanh(v).backward(grad),
                                 lambda v: _TanhBySigmoid.apply(v).backward(grad)),
        }
        for name, (tanh, form) in rows.items():
            arg = xg if "backward" in name else x
            print(f"{name:>17} {list(shape)}: torch.tanh {median_us(tanh, arg):8.1f} us, "
                  f"2*sigmoid(2x)-1 {median_us(form, arg):8.1f} us")
        print(f"rl_gpu.policy.Tanh uses the {'sigmoid form' if x.numel() >= Tanh.SIGMOID_FROM else 'torch.tanh'}")
    grid = torch.linspace(-10, 10, 200001)
    print(f"max |difference| on [-10, 10]: {(torch.tanh(grid) - _tanh_by_sigmoid(grid)).abs().max().item():.2e}")


def linear_forms(rounds: int = 3) -> None:
    torch.set_num_threads(1)
    if not cpu_kernels._onednn_available():
        print("this torch build cannot run oneDNN's fused linear")
        return
    print(f"ATen CPU capability {torch.backends.cpu.get_cpu_capability()}; USE_ONEDNN {cpu_kernels.USE_ONEDNN}")
    for rows, inputs in ((16384, 4), (16384, 64), (4096, 64), (1024, 64), (1024, 400), (1024, 600), (64, 600)):
        g = torch.Generator().manual_seed(0)
        x, w, b = torch.rand(rows, inputs, generator=g), torch.randn(64, inputs, generator=g) * 0.1, torch.randn(64)
        onednn, sigmoid = [], []
        for _ in range(rounds):
            onednn.append(median_us(lambda v: cpu_kernels._onednn_linear_tanh(v, w, b), x, calls=50))
            sigmoid.append(median_us(lambda v: cpu_kernels._sigmoid_linear_tanh(v, w, b), x, calls=50))
        ratio = sorted(onednn)[rounds // 2] / sorted(sigmoid)[rounds // 2]
        print(f"[{rows}, {inputs}] -> 64: oneDNN {', '.join(f'{t:.0f}' for t in onednn)} us, sigmoid form "
              f"{', '.join(f'{t:.0f}' for t in sigmoid)} us (oneDNN / sigmoid form, medians: {ratio:.2f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--linear", action="store_true", help="time a hidden layer's two forward forms instead")
    if parser.parse_args().linear:
        linear_forms()
    else:
        main()
