"""Building blocks of the networks: initialisation, the CPU-fast tanh, and MLPs.

Shape legend: N = batch rows, I = input size, H = hidden width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2.0), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights and constant bias, the PPO-implementation-details initialisation."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def _tanh_by_sigmoid(x: Tensor) -> Tensor:
    return torch.sigmoid(2.0 * x).mul_(2.0).sub_(1.0)


class _TanhBySigmoid(torch.autograd.Function):
    """``2 sigmoid(2x) - 1`` as one autograd node that saves only its output, as ``tanh`` does, with ``tanh``'s
    own fused backward kernel (one kernel instead of the three operations of ``grad * (1 - y^2)``).

    Written in the ``setup_context`` form with a generated vmap rule, so ``torch.func.vmap`` over a population
    of networks (and ``torch.func.grad``) runs through it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor) -> Tensor:
        return _tanh_by_sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class Tanh(nn.Module):
    """``tanh``, computed on CPU for large inputs as ``2 sigmoid(2x) - 1`` (derivative ``1 - tanh(x)^2``).

    PyTorch's CPU ``tanh`` forward kernel is slower than this form for large inputs and dominated the MLP's
    cost in rollouts and updates (measured by benchmarks/cpu_tanh.py). Below ``SIGMOID_FROM`` elements (a
    rollout step or an evaluation of a few dozen rows) the form's extra operations cost more than they save,
    so ``torch.tanh`` runs. The two agree to 2e-7 absolute (the form rounds near 0 to float32's spacing at
    1.0). Other devices use ``torch.tanh``. No parameters, so checkpoints are unaffected; exported models use
    ``nn.Tanh``.
    """

    SIGMOID_FROM = 8192

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type != "cpu" or x.numel() < self.SIGMOID_FROM:
            return torch.tanh(x)
        if torch.is_grad_enabled() and x.requires_grad:
            return _TanhBySigmoid.apply(x)
        return _tanh_by_sigmoid(x)


class MLP(nn.Sequential):
    """``nn.Sequential`` of layers whose forward calls each ``nn.Linear``'s function directly (no per-layer
    module call, so no forward hooks on the layers): on CPU the module-call overhead is a large share of a small
    batch's forward. Same parameters and ``state_dict`` keys."""

    def forward(self, x: Tensor) -> Tensor:
        for layer in self:
            x = F.linear(x, layer.weight, layer.bias) if type(layer) is nn.Linear else layer.forward(x)
        return x


def mlp(in_size: int, hidden_sizes: Sequence[int], out_size: int, out_gain: float) -> MLP:
    """Tanh MLP with orthogonal initialisation; the last layer gets gain ``out_gain``."""
    layers: list[nn.Module] = []
    size = in_size
    for hidden in hidden_sizes:
        layers += [layer_init(nn.Linear(size, hidden)), Tanh()]
        size = hidden
    layers.append(layer_init(nn.Linear(size, out_size), gain=out_gain))
    return MLP(*layers)


def relu_mlp(in_size: int, hidden_sizes: Sequence[int], out_size: int) -> MLP:
    """ReLU MLP with PyTorch's default ``nn.Linear`` initialisation: the networks of off-policy actors, as
    SAC's and TD3's reference implementations build them."""
    layers: list[nn.Module] = []
    size = in_size
    for hidden in hidden_sizes:
        layers += [nn.Linear(size, hidden), nn.ReLU()]
        size = hidden
    layers.append(nn.Linear(size, out_size))
    return MLP(*layers)
