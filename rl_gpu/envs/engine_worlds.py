"""What batches whose worlds live in another library's objects (VMAS, PettingZoo) share: the last step kept to
observe again, and no state a checkpoint could hold."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_gpu.core.types import StepResult
from rl_gpu.envs.actions import check_action_format, check_action_range


class WorldsInEngine:
    """Mixin for a :class:`~rl_gpu.core.types.VecEnv` that keeps the :class:`StepResult` it last returned in
    ``_last`` and whose worlds cannot be saved (``spec.exact_resume`` is False: a resume restarts them, by the
    subclass's ``reset``)."""

    _last: StepResult | None
    num_envs: int
    num_agents: int
    num_actions: int
    action_shape: tuple[int, ...]
    device: torch.device
    validate_actions: bool

    def _check_actions(self, action: Tensor) -> None:
        """With ``validate_actions``: ``action``'s shape (``[N, M, ...]``, no agent axis for M = 1), kind and
        device, finite values (continuous) or values in range (discrete); one line saying what is wrong."""
        if not self.validate_actions:
            return
        n, m = self.num_envs, self.num_agents
        check_action_format(action, n, self.action_shape, self.device, agents=(m,) if m > 1 else ())
        if self.action_shape and not bool(torch.isfinite(action).all()):
            raise ValueError("action contains NaN or inf")
        if not self.action_shape:
            check_action_range(action, n, self.num_actions)

    def observe(self) -> StepResult:
        """The current observations as a zero-reward step (no transition)."""
        last = self._last
        no = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return last._replace(reward=torch.zeros_like(last.reward), terminated=no, truncated=no, final_obs=last.obs,
                             final_critic_obs=last.critic_obs)

    def state_dict(self) -> dict[str, Any]:
        """Nothing: the worlds live in the engine's own objects."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restart every world (the saved state cannot be restored; see :meth:`state_dict`)."""
        self.reset()
