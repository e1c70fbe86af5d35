"""Building blocks of the networks: initialisation and MLPs, as plain PyTorch modules.

The CPU-fast forms of these networks (fused oneDNN linear + tanh, the sigmoid and rational forms of tanh, custom
autograd nodes) are not part of the definitions: :func:`rl_gpu.nn.cpu_kernels.use_cpu_kernels` swaps them into a
built network that runs on the CPU (the algorithms and the checkpoint loader do), and a network is plain
``nn.Sequential`` / ``nn.Linear`` / ``nn.Tanh`` everywhere else (a GPU, an export).

Shape legend: N = batch rows, I = input size, H = hidden width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2.0), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights and constant bias, the PPO-implementation-details initialisation."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def hidden_layers(in_size: int, hidden_sizes: Sequence[int],
                  activation: type[nn.Module] = nn.Tanh) -> tuple[list[nn.Module], int]:
    """``(layers, out_size)``: orthogonally initialised linear layers of ``hidden_sizes``, each followed by
    ``activation`` (the hidden part of an MLP or of an encoder)."""
    layers: list[nn.Module] = []
    size = in_size
    for hidden in hidden_sizes:
        layers += [layer_init(nn.Linear(size, hidden)), activation()]
        size = hidden
    return layers, size


def mlp(in_size: int, hidden_sizes: Sequence[int], out_size: int, out_gain: float) -> nn.Sequential:
    """Tanh MLP with orthogonal initialisation; the last layer gets gain ``out_gain``."""
    layers, size = hidden_layers(in_size, hidden_sizes)
    return nn.Sequential(*layers, layer_init(nn.Linear(size, out_size), gain=out_gain))


def relu_mlp(in_size: int, hidden_sizes: Sequence[int], out_size: int) -> nn.Sequential:
    """ReLU MLP with PyTorch's default ``nn.Linear`` initialisation: the networks of off-policy actors, as
    SAC's and TD3's reference implementations build them."""
    layers: list[nn.Module] = []
    size = in_size
    for hidden in hidden_sizes:
        layers += [nn.Linear(size, hidden), nn.ReLU()]
        size = hidden
    layers.append(nn.Linear(size, out_size))
    return nn.Sequential(*layers)
