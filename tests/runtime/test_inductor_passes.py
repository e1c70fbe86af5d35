"""The Inductor pass of every compiled unit: a CPU layer's bias goes into its activation's loop, not ``addmm``."""

import re

import torch
from torch._inductor.utils import run_and_get_code

from rl_gpu.nn.cpu_kernels import use_cpu_kernels
from rl_gpu.nn.layers import mlp
from rl_gpu.runtime.compile import compile_unit


def test_hidden_layers_add_their_bias_in_the_activation_loop_and_match_eager():
    torch.manual_seed(0)
    net = use_cpu_kernels(mlp(4, (64, 64), 2, out_gain=0.01))  # as the algorithms train it on the CPU
    x = torch.randn(512, 4)

    def loss(x):
        return net(x).square().sum()

    expected = loss(x)
    expected.backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()

    compiled = compile_unit(loss, "inductor")

    def step():
        value = compiled(x)
        value.backward()
        return value

    value, code = run_and_get_code(step)
    calls = re.findall(r"extern_kernels\.(addmm|mm)\(", "\n".join(code))
    # Forward: two hidden products as mm (their bias in the tanh loop), the head's addmm (its user is the
    # squared sum's reduction, not elementwise); backward: mm only (three weight gradients, one input gradient:
    # the head's is multiply-adds, see _NarrowLinear).
    assert calls.count("addmm") == 1, calls
    assert calls.count("mm") == 2 + 4, calls
    torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-5)
    for p, g in zip(net.parameters(), grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)
