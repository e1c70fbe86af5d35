"""The policy lag of an update's steps and the bound that drops the stale ones (``max_policy_lag``).

Lag is counted as Sample Factory counts it: in optimizer steps between the policy that collected a rollout and the
parameters a step of the update learns at. An update of E epochs x M minibatches on data ``policy_lag`` updates old
takes steps of lag ``policy_lag * E * M`` to ``policy_lag * E * M + E * M - 1`` (synchronous: 0 .. E*M-1; learning
while collecting: E*M .. 2*E*M-1).
"""

from __future__ import annotations

import torch
from torch import Tensor

LAG_METRICS = ("policy_lag_min", "policy_lag", "policy_lag_max", "stale_steps_dropped")
"""Logged with learning while collecting or a ``max_policy_lag``: lags in optimizer steps, ``policy_lag`` their
mean, and the steps an update dropped as too stale."""


def fresh_steps(bound: int | None, policy_lag: int, steps_per_update: int) -> int | None:
    """How many of an update's ``steps_per_update`` steps have a lag within ``bound`` (None: no bound), for data
    ``policy_lag`` updates old: the steps are taken in order and each is one step older than the last."""
    if bound is None:
        return None
    first = policy_lag * steps_per_update
    return max(0, min(steps_per_update, bound - first + 1))


def lag_metrics(policy_lag: int, steps_per_update: int, taken: int | None, device: torch.device) -> dict[str, Tensor]:
    """:data:`LAG_METRICS` of an update that took ``taken`` of its steps (None: all) on data ``policy_lag``
    updates old, as 0-dim tensors on ``device`` (nothing read from the device)."""
    first = policy_lag * steps_per_update
    taken = steps_per_update if taken is None else taken
    values = (first, first + (taken - 1) / 2, first + taken - 1, steps_per_update - taken)
    return dict(zip(LAG_METRICS, torch.tensor(values, dtype=torch.float32, device=device).unbind()))


def check_async_bound(bound: int | None, steps_per_update: int) -> None:
    """Refuse a bound that would drop every step of a learning-while-collecting update (data one update old)."""
    if bound is not None and bound < steps_per_update:
        raise ValueError(f"max_policy_lag={bound}: learning while collecting learns from data at least one update "
                         f"({steps_per_update} optimizer steps: update_epochs x num_minibatches) old, so every step "
                         f"would be dropped; use max_policy_lag >= {steps_per_update}")
