"""fp16's loss scaler with its state on the device (:mod:`rl_gpu.algos.precision`)."""

from __future__ import annotations

import torch
from torch import Tensor


class LossScaler:
    """fp16 loss scaling with its state as 0-dim device tensors (:mod:`rl_gpu.algos.precision`)."""

    def __init__(self, device: torch.device, init_scale: float = 2.0**16, growth_interval: int = 2000) -> None:
        self.scale = torch.tensor(float(init_scale), device=device)
        self.good_steps = torch.zeros((), dtype=torch.int64, device=device)
        self.growth_interval = growth_interval

    def scale_loss(self, loss: Tensor) -> Tensor:
        return loss * self.scale

    @torch.no_grad()
    def unscale(self, grads: list[Tensor]) -> Tensor:
        """Divide ``grads`` by the scale in place; returns 0-dim bool: every gradient is finite. Non-finite
        gradients are zeroed (so a step that cannot be undone, an optimiser's first, moves nothing)."""
        if not grads:
            return torch.ones((), dtype=torch.bool, device=self.scale.device)
        torch._foreach_mul_(grads, 1.0 / self.scale)
        finite = torch.stack([g.isfinite().all() for g in grads]).all()
        for g in grads:
            g.copy_(torch.where(finite, g, torch.zeros_like(g)))
        return finite

    @torch.no_grad()
    def update(self, finite: Tensor) -> None:
        """Halve the scale after a step with non-finite gradients; double it after ``growth_interval`` finite
        steps in a row."""
        good = torch.where(finite, self.good_steps + 1, torch.zeros_like(self.good_steps))
        grow = good >= self.growth_interval
        self.scale.copy_(torch.where(finite, torch.where(grow, self.scale * 2.0, self.scale), self.scale * 0.5))
        self.good_steps.copy_(torch.where(grow, torch.zeros_like(good), good))

    def state_dict(self) -> dict[str, Tensor]:
        return {"scale": self.scale.clone(), "good_steps": self.good_steps.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.scale.copy_(state["scale"])
        self.good_steps.copy_(state["good_steps"])
