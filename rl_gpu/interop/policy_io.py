"""Loading a trained policy from a checkpoint, ready to act."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from rl_gpu.nn.actor_critic import build_policy
from rl_gpu.runtime.checkpoint import CheckpointError, load_checkpoint


def load_policy(path: str | Path, device: torch.device | str = "cpu") -> tuple[nn.Module, dict]:
    """Rebuild the policy stored in a checkpoint; returns ``(policy in eval mode, payload)``. Raises
    :class:`~rl_gpu.runtime.checkpoint.CheckpointError` with a one-line reason when it holds no usable policy."""
    path = Path(path)
    payload = load_checkpoint(path, device)
    try:
        policy = build_policy(payload["policy_config"]).to(device)
        policy.load_state_dict(payload["algorithm"]["policy"])
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: checkpoint does not hold a usable policy ({first[:160]})") from None
    return policy.eval(), payload
