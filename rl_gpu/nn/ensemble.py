"""An ensemble of E independent MLPs evaluated in one batched call: the twin (or larger) Q critic of SAC and TD3.

Shape legend: E = members, B = batch rows, I = input size, O = output size.

Each layer holds its members' weights stacked (``[E, I, O]``) and runs as one batched matrix multiply, so E
critics cost one kernel per layer instead of E, with the same parameters, gradients and results as E separate
``nn.Linear`` stacks (each member is initialised as ``nn.Linear`` would be).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class EnsembleLinear(nn.Module):
    """E linear layers ``x @ weight[e] + bias[e]``; ``weight`` ``[E, I, O]``, ``bias`` ``[E, 1, O]``."""

    def __init__(self, members: int, in_size: int, out_size: int) -> None:
        super().__init__()
        if members <= 0 or in_size <= 0 or out_size <= 0:
            raise ValueError(f"members, in_size and out_size must be positive, got {members}, {in_size}, "
                             f"{out_size}")
        # nn.Linear's default: kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(I), 1/sqrt(I)) for the weight, and
        # the bias uses the same bound.
        bound = 1.0 / math.sqrt(in_size)
        self.weight = nn.Parameter(torch.empty(members, in_size, out_size).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, out_size).uniform_(-bound, bound))

    def forward(self, x: Tensor, members: int | None = None, detached: bool = False) -> Tensor:
        """``[E', B, O]`` from ``x`` ``[B, I]`` (the same input for every member) or ``[E', B, I]``.

        ``members``: use only the first E' members (all by default). ``detached``: the weights take no
        gradient (the input still does), as when a critic scores an actor's actions.
        """
        weight, bias = self.weight, self.bias
        if members is not None:
            weight, bias = weight[:members], bias[:members]
        if detached:
            weight, bias = weight.detach(), bias.detach()
        if x.dim() == 2:
            x = x.expand(weight.shape[0], *x.shape)
        if weight.shape[-1] == 1:
            # One output (a Q value): a multiply and a sum. CPU batched matrix multiplies with one output
            # column ran tens of times slower than their arithmetic needs.
            return (x * weight.transpose(-1, -2)).sum(-1, keepdim=True) + bias
        return torch.baddbmm(bias, x, weight)


class EnsembleMLP(nn.Module):
    """E ReLU MLPs ``I -> hidden... -> out`` as :class:`EnsembleLinear` layers.

    Args:
        members: E.
        in_size: I.
        hidden_sizes: widths of the hidden layers.
        out_size: outputs per member (1 for a Q function).
    """

    def __init__(self, members: int, in_size: int, hidden_sizes: Sequence[int], out_size: int = 1) -> None:
        super().__init__()
        widths = [in_size, *hidden_sizes, out_size]
        self.members = members
        self.layers = nn.ModuleList(EnsembleLinear(members, a, b) for a, b in itertools.pairwise(widths))

    def forward(self, x: Tensor, members: int | None = None, detached: bool = False) -> Tensor:
        """``[E', B]`` (``out_size`` 1) or ``[E', B, O]`` from ``x`` ``[B, I]``; ``members`` and ``detached`` as
        in :meth:`EnsembleLinear.forward`."""
        for i, layer in enumerate(self.layers):
            x = layer(x, members, detached)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x.squeeze(-1) if x.shape[-1] == 1 else x
