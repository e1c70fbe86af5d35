"""Why rl_gpu's tanh MLPs run on CPU as ``Linear`` + ``sigmoid`` (tanh's affine maps folded into the weights) from
8192 hidden elements up: the activation alone (``torch.tanh`` against ``2 sigmoid(2x) - 1``), then a 4-64-64-2
MLP's forward and forward + backward, layer by layer with ``torch.tanh`` against :class:`rl_gpu.nn.layers.MLP`'s
sigmoid form, alternating, one thread.

    OMP_NUM_THREADS=1 python benchmarks/cpu_tanh.py
"""

import copy
import time

import torch
from torch import nn

from rl_gpu.nn.layers import MLP, mlp


def median_us(fn, *args, calls=50, repeats=7):
    fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        times.append((time.perf_counter() - start) / calls)
    return sorted(times)[repeats // 2] * 1e6


def train_step(net, x, grad):
    net.zero_grad(set_to_none=True)
    net(x).backward(grad)


def main():
    torch.set_num_threads(1)
    print("activation alone:")
    for rows in (32, 128, 512, 4096):
        x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(0)) * 2
        plain = median_us(torch.tanh, x)
        form = median_us(lambda v: torch.sigmoid(2 * v).mul_(2).sub_(1), x)
        print(f"  [{rows}, 64]: torch.tanh {plain:8.1f} us, 2 sigmoid(2x) - 1 {form:8.1f} us")
    print("4-64-64-2 tanh MLP (layer by layer with torch.tanh | MLP, sigmoid form where it applies):")
    torch.manual_seed(0)
    net = mlp(4, (64, 64), 2, out_gain=0.01)
    plain_net = nn.Sequential(*[nn.Tanh() if isinstance(m, nn.Tanh) else m for m in copy.deepcopy(net)])
    for rows in (32, 128, 1024, 4096, 16384):
        x = torch.randn(rows, 4)
        grad = torch.randn(rows, 2)
        form = "sigmoid form" if net._sigmoid_form(x) else "layer by layer"
        with torch.no_grad():
            fwd = [median_us(plain_net, x), median_us(net, x)]
        both = [median_us(train_step, plain_net, x, grad), median_us(train_step, net, x, grad)]
        print(f"  [{rows}, 4] ({form}): forward {fwd[0]:9.1f} | {fwd[1]:9.1f} us ({fwd[0] / fwd[1]:.2f}x), "
              f"forward+backward {both[0]:9.1f} | {both[1]:9.1f} us ({both[0] / both[1]:.2f}x)")
    grid = torch.linspace(-10, 10, 200001)
    print(f"max |difference| of the activation on [-10, 10]: "
          f"{(torch.tanh(grid) - (2 * torch.sigmoid(2 * grid) - 1)).abs().max().item():.2e}; "
          f"MLP.SIGMOID_FROM = {MLP.SIGMOID_FROM}")


if __name__ == "__main__":
    main()
