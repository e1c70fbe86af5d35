"""Why rl_gpu.policy.Tanh computes tanh as 2 sigmoid(2x) - 1 on CPU from 8192 elements up: time both forms,
forward only (rollouts, evaluation) and forward + backward (updates), eager and compiled.

    OMP_NUM_THREADS=1 python benchmarks/cpu_tanh.py
"""

import time

import torch

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


if __name__ == "__main__":
    main()
