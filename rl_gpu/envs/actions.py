"""Checking a batch's actions: their format (free: no value is read) and, when validating, their values against
the legal masks (each check reads the device once).

Shape legend: N rows, M agents acting at once (absent for one agent), A discrete actions, D dimensions.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_action_format(
    action: Tensor, num_envs: int, action_shape: tuple[int, ...], device: torch.device,
    agents: tuple[int, ...] = (),
) -> None:
    """Raise if ``action`` is not a tensor of the batch's shape, kind and device (no value is read, so no host
    synchronisation): ``[N]`` integers for discrete actions (``action_shape == ()``), ``[N, *action_shape]``
    floats for continuous ones; ``agents`` (``(M,)``) inserts the agent axis after N."""
    if not isinstance(action, Tensor):
        raise TypeError(f"action must be a torch.Tensor, got {type(action).__name__}")
    expected = (num_envs, *agents, *action_shape)
    if tuple(action.shape) != expected:
        raise ValueError(f"action must have shape {expected}, got {tuple(action.shape)}")
    if action_shape and not action.is_floating_point():
        raise ValueError(f"continuous action must be a float tensor, got {action.dtype}")
    if not action_shape and action.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"action must be an integer tensor (int64 preferred), got {action.dtype}")
    if action.device != device:
        raise ValueError(f"action is on {action.device}, the environments are on {device}")


def check_action_range(action: Tensor, num_envs: int, num_actions: int) -> None:
    """Raise ``ValueError`` naming the first row with an action outside ``0..A-1`` (one host read)."""
    low, high = torch.aminmax(action)
    if bool((low < 0) | (high >= num_actions)):
        bad = (action < 0) | (action >= num_actions)
        row = int(bad.reshape(num_envs, -1).any(-1).long().argmax())
        value = action[row].tolist()
        raise ValueError(f"action out of range in env {row}: {value} (allowed 0..{num_actions - 1})")


def check_action_values(action: Tensor, num_envs: int, num_actions: int, legal_mask: Tensor,
                        acting: Tensor | None, done: Tensor) -> None:
    """Raise ``ValueError`` for an action out of range or illegal in its row (``legal_mask`` ``[N, A]`` or
    ``[N, M, A]``; with M agents, only those ``acting`` ``[N, M]`` must play a legal action; rows ``done``
    ``[N]`` are frozen and not checked)."""
    check_action_range(action, num_envs, num_actions)
    illegal = ~legal_mask.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    if acting is not None:
        illegal = (illegal & acting).any(-1)  # an agent that does not act may send anything
    illegal = illegal & ~done
    if bool(illegal.any()):
        row = int(illegal.long().argmax())
        if acting is not None:
            allowed = [m.nonzero().flatten().tolist() for m in legal_mask[row]]
            raise ValueError(f"illegal action {action[row].tolist()} in env {row}; legal there, agent by agent: "
                             f"{allowed}")
        raise ValueError(f"illegal action {int(action[row])} in env {row}; legal there: "
                         f"{legal_mask[row].nonzero().flatten().tolist()}")
