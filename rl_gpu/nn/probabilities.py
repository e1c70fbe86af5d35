"""A policy's action probabilities for a batch of observations: the tabular view of a network that exact
game solvers (best responses, exploitability) read.

Shape legend: K = observations, O = observation size, A = discrete actions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from rl_gpu.nn import distributions as D
from rl_gpu.nn.actor_critic import ActorCritic, UniformRandomPolicy


def action_probabilities(policy: Any, *, deterministic: bool = False) -> Callable[[Tensor, Tensor], Tensor]:
    """``probs(obs [K, O], action_mask [K, A] bool) -> [K, A] float64`` (on the CPU) of a discrete-action
    policy.

    Sampled play (default): the policy's masked softmax; a policy without one of this library's categorical
    heads needs ``evaluate(obs, action, action_mask) -> (log_prob, ...)``. ``deterministic``: all the mass on
    the action ``act(..., deterministic=True)`` picks, as deterministic evaluation plays. Inputs are moved to
    the policy's device; illegal actions get exactly 0.

    Raises:
        TypeError: the policy has continuous actions, or no way to read its probabilities.
    """
    if getattr(policy, "is_continuous", False):
        raise TypeError(f"{type(policy).__name__} has continuous actions: there is no table of action "
                        "probabilities to read")
    if not deterministic and not isinstance(policy, (ActorCritic, UniformRandomPolicy)) \
            and not callable(getattr(policy, "evaluate", None)):
        raise TypeError(f"cannot read action probabilities from {type(policy).__name__}: it is not an "
                        "ActorCritic and has no evaluate(obs, action, action_mask)")
    device = next(policy.parameters()).device if isinstance(policy, nn.Module) else torch.device("cpu")

    @torch.no_grad()
    def probs(obs: Tensor, action_mask: Tensor) -> Tensor:
        obs, mask = obs.to(device), action_mask.to(device)
        if deterministic:
            action = policy.act(obs, mask, deterministic=True).action
            out = torch.nn.functional.one_hot(action, mask.shape[1]).double()
        elif isinstance(policy, UniformRandomPolicy):
            out = mask.double() / mask.sum(1, keepdim=True)
        elif isinstance(policy, ActorCritic):
            logits = policy.actor(policy.preprocess(obs))
            out = torch.softmax(D.mask_logits(logits.double(), mask), dim=1)
        else:
            columns = [policy.evaluate(obs, torch.full_like(mask[:, 0], a, dtype=torch.long), mask)[0]
                       for a in range(mask.shape[1])]
            out = torch.stack(columns, dim=1).double().exp()
        return torch.where(mask, out, torch.zeros_like(out)).cpu()

    return probs
