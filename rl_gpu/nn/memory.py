"""Policies with memory: the recurrent protocol that collectors carry a state for, and a GRU building block.

A recurrent policy declares ``is_recurrent = True`` and keeps no state of its own: the state is explicit, an
input and an output of every step, so collection stays a function of tensors (it can be compiled, and a rollout
can be replayed from its ``policy_state0``). Shape legend: N rows, O observation size, H state size.

- ``initial_state(num_envs) -> state``: the state of a fresh episode (a tensor or a tuple of tensors, each
  ``[N, ...]`` on the policy's device);
- ``act_with_state(obs, state, action_mask, generator, deterministic, noise, critic_obs=None)
  -> (PolicyOutput, next_state)``: one decision, and the state after ``obs`` was seen;
- ``value_with_state(obs, state, critic_obs=None) -> [N]``: V(obs) for a policy in ``state`` (the state before
  ``obs``: what bootstrapping a truncated episode from ``final_obs`` needs).

The collector (:func:`rl_gpu.collect.reference.collect`) resets the state to ``initial_state`` in exactly the
rows whose episode ended (``torch.where``, no boolean-index write) and keeps it in the others.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

from rl_gpu.core.pytree import tree_where
from rl_gpu.core.types import PolicyOutput


class RecurrentActor(Protocol):
    """What a collector needs of a policy with memory (see the module docstring)."""

    is_recurrent: bool
    is_continuous: bool

    def initial_state(self, num_envs: int) -> Any: ...

    def act_with_state(self, obs: Tensor, state: Any, action_mask: Tensor | None = None,
                       generator: torch.Generator | None = None, deterministic: bool = False,
                       noise: Tensor | None = None) -> tuple[PolicyOutput, Any]: ...

    def value_with_state(self, obs: Tensor, state: Any) -> Tensor: ...


def is_recurrent(policy: object) -> bool:
    """Whether ``policy`` declares the recurrent protocol (``is_recurrent = True``); feed-forward policies need
    not declare anything."""
    return getattr(policy, "is_recurrent", False) is True


def reset_state(done: Tensor, initial: Any, state: Any) -> Any:
    """``state`` with the rows where ``done`` (``[N]`` bool) replaced by ``initial``'s (same structure)."""
    return tree_where(done, initial, state)


class GRUMemory(nn.Module):
    """``h' = GRUCell(x, h)`` over ``[N, I]`` inputs with an explicit ``[N, H]`` state starting at zeros."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        if input_size <= 0 or hidden_size <= 0:
            raise ValueError(f"input_size and hidden_size must be positive, got {input_size}, {hidden_size}")
        self.hidden_size = hidden_size
        self.cell = nn.GRUCell(input_size, hidden_size)

    def initial_state(self, num_envs: int) -> Tensor:
        return torch.zeros(num_envs, self.hidden_size, device=self.cell.weight_hh.device)

    def forward(self, x: Tensor, state: Tensor) -> Tensor:
        return self.cell(x, state)
