"""Why rl_gpu.policy.Tanh computes tanh as 2 sigmoid(2x) - 1 on CPU: time both forms, eager and compiled.

    OMP_NUM_THREADS=1 python benchmarks/cpu_tanh.py
"""

import time

import torch


def median_us(fn, x, calls=200, repeats=5):
    fn(x)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        times.append((time.perf_counter() - start) / calls)
    return sorted(times)[repeats // 2] * 1e6


def by_sigmoid(x):
    return torch.sigmoid(2.0 * x) * 2.0 - 1.0


def main():
    torch.set_num_threads(1)
    for shape in ((256, 64), (4096, 64)):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 2
        rows = {"eager": (torch.tanh, by_sigmoid),
                "compiled": (torch.compile(torch.tanh), torch.compile(by_sigmoid))}
        for name, (tanh, form) in rows.items():
            print(f"{name:>8} {list(shape)}: torch.tanh {median_us(tanh, x):8.1f} us, "
                  f"2*sigmoid(2x)-1 {median_us(form, x):8.1f} us")
    grid = torch.linspace(-10, 10, 200001)
    print(f"max |difference| on [-10, 10]: {(torch.tanh(grid) - by_sigmoid(grid)).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
