"""What a policy hands to deployment: :class:`DeployedActor`, its deterministic action as plain PyTorch.

Every policy kind (:mod:`rl_gpu.nn.kinds`) implements ``export_module() -> DeployedActor``; ONNX, TorchScript and
int8 exports (:mod:`rl_gpu.interop.export`) take that module as it is, so a policy kind of your own exports with
no change to rl_gpu.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from rl_gpu.nn.cpu_kernels import plain_modules
from rl_gpu.nn.normalization import to_float

LOWEST_FLOAT32 = float(torch.finfo(torch.float32).min)
"""Masked logits get the lowest finite float32, as :func:`rl_gpu.nn.distributions.mask_logits` does."""


class DeployedActor(nn.Module):
    """``obs [N, O]`` (and an optional ``action_mask [N, A]``) -> the deterministic action, self-contained.

    Args:
        actor: maps (normalised) observations to ``[N, A]`` logits, or to ``[N, D]`` (or more) outputs whose first
            ``D`` are the action's mean; copied to the CPU in float32 with exact ``tanh`` layers.
        obs_dim: O.
        num_actions: A for discrete actions (argmax of the legal logits), else 0.
        action_dim: D for continuous actions, else 0.
        obs_rms: running observation statistics to fold in (``(obs - mean) / sqrt(var + eps)``, clipped), or
            None.
        squash: ``(scale [D], bias [D])``: the action is ``bias + scale * tanh(mean)`` (off-policy actors).
    """

    def __init__(self, actor: nn.Module, obs_dim: int, *, num_actions: int = 0, action_dim: int = 0,
                 obs_rms: nn.Module | None = None, squash: tuple[Tensor, Tensor] | None = None) -> None:
        super().__init__()
        if (num_actions > 0) == (action_dim > 0):
            raise ValueError(f"give num_actions (discrete) or action_dim (continuous), got {num_actions} and "
                             f"{action_dim}")
        self.actor = plain_modules(copy.deepcopy(actor)).cpu().float().eval()
        self.obs_dim = int(obs_dim)
        self.discrete = num_actions > 0
        self.num_actions, self.action_dim = int(num_actions), int(action_dim)
        self.masked_logit = LOWEST_FLOAT32
        self.squash = squash is not None
        scale, bias = squash if squash is not None else (torch.zeros(0), torch.zeros(0))
        self.register_buffer("squash_scale", scale.detach().cpu().float().clone())
        self.register_buffer("squash_bias", bias.detach().cpu().float().clone())
        self.normalize = obs_rms is not None and float(obs_rms.count) > 0
        if self.normalize:
            mean = obs_rms.mean.detach().cpu()
            scale = torch.rsqrt(obs_rms.var.detach().cpu() + obs_rms.epsilon)
            self.clip = float(obs_rms.clip)
        else:
            mean, scale = torch.zeros(self.obs_dim), torch.ones(self.obs_dim)
            self.clip = 0.0
        self.register_buffer("obs_mean", mean.float().clone())
        self.register_buffer("obs_scale", scale.float().clone())
        for parameter in self.parameters():
            parameter.requires_grad_(False)

    def forward(self, obs: Tensor, action_mask: Tensor | None = None) -> Tensor:
        """The deterministic action for each row of ``obs``: ``[N]`` int64 or ``[N, D]`` float32."""
        x = to_float(obs)
        if self.normalize:
            x = ((x - self.obs_mean) * self.obs_scale).clamp(-self.clip, self.clip)
        out = self.actor(x)
        if self.squash:
            out = self.squash_bias + self.squash_scale * torch.tanh(out[:, : self.action_dim])
        if not self.discrete:
            return out
        if action_mask is not None:
            out = out.masked_fill(~action_mask, self.masked_logit)
        return out.argmax(-1)
