"""Building blocks of the networks: initialisation and MLPs (with a CPU-fast form of tanh MLPs).

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


class Tanh(nn.Tanh):
    """``nn.Tanh``, marking the hidden activations that :class:`MLP` may compute in its CPU sigmoid form. A
    module of its own (and no parameters) so checkpoints and exports see a plain tanh."""


class MLP(nn.Sequential):
    """``nn.Sequential`` of layers whose forward calls each ``nn.Linear``'s function directly (no per-layer
    module call, so no forward hooks on the layers): on CPU the module-call overhead is a large share of a small
    batch's forward. Same parameters and ``state_dict`` keys.

    **The CPU sigmoid form.** PyTorch's CPU ``tanh`` kernel is several times slower than ``sigmoid``
    (benchmarks/cpu_tanh.py), and every elementwise pass over a ``[N, H]`` activation is a pass through memory
    that a large batch does not keep in cache. A tanh MLP (``Linear``, :class:`Tanh`, ..., ``Linear``) on CPU
    with at least ``SIGMOID_FROM`` hidden elements therefore runs as ``Linear`` + ``sigmoid`` only, the affine
    maps of ``tanh(z) = 2 sigmoid(2z) - 1`` folded into the (small) weights and biases: with the layer input
    ``h = a s + c`` held as ``s`` (``a, c = 1, 0`` for the observation, ``2, -1`` after a hidden layer),

        W h + b = (a W) s + (b + c W 1),    tanh(W h + b) = 2 sigmoid(2 (a W) s + 2 (b + c W 1)) - 1,

    so each hidden layer is one ``addmm`` and one ``sigmoid`` forward, one ``sigmoid_backward`` backward, and the
    parameters keep their meaning (exports compute ``nn.Tanh``). It agrees with ``torch.tanh`` to about 1e-6
    (tested): ``s`` holds ``tanh``'s value with float32's spacing at 1.0. Smaller batches, other devices and other
    activations run layer by layer.
    """

    SIGMOID_FROM = 8192

    def forward(self, x: Tensor) -> Tensor:
        if self._sigmoid_form(x):
            return self._forward_sigmoid_form(x)
        for layer in self:
            x = F.linear(x, layer.weight, layer.bias) if type(layer) is nn.Linear else layer.forward(x)
        return x

    def _sigmoid_form(self, x: Tensor) -> bool:
        layers = list(self._modules.values())
        if x.device.type != "cpu" or len(layers) < 3 or len(layers) % 2 == 0:
            return False
        linear, act = layers[::2], layers[1::2]
        if any(type(m) is not nn.Linear or m.bias is None for m in linear) or any(type(m) is not Tanh for m in act):
            return False
        return x.numel() // x.shape[-1] * linear[0].out_features >= self.SIGMOID_FROM

    def _forward_sigmoid_form(self, x: Tensor) -> Tensor:
        layers = list(self._modules.values())
        a, c = 1.0, 0.0
        s = x
        for layer in layers[:-1:2]:
            w, b = layer.weight, layer.bias
            bias = 2.0 * b if c == 0.0 else 2.0 * (b + c * w.sum(1))
            s = torch.sigmoid(F.linear(s, (2.0 * a) * w, bias))
            a, c = 2.0, -1.0
        w, b = layers[-1].weight, layers[-1].bias
        return F.linear(s, a * w, b + c * w.sum(1))


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
