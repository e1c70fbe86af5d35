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

    def _input(self, obs: Tensor) -> Tensor:
        """``obs`` as float32, normalised when the policy was."""
        x = to_float(obs)
        if self.normalize:
            x = ((x - self.obs_mean) * self.obs_scale).clamp(-self.clip, self.clip)
        return x

    def forward(self, obs: Tensor, action_mask: Tensor | None = None) -> Tensor:
        """The deterministic action for each row of ``obs``: ``[N]`` int64 or ``[N, D]`` float32."""
        return self._action(self.actor(self._input(obs)), action_mask)

    def _action(self, out: Tensor, action_mask: Tensor | None) -> Tensor:
        """The action from the actor's output: the legal argmax, or the (squashed) mean."""
        if self.squash:
            out = self.squash_bias + self.squash_scale * torch.tanh(out[:, : self.action_dim])
        if not self.discrete:
            return out
        if action_mask is not None:
            out = out.masked_fill(~action_mask, self.masked_logit)
        return out.argmax(-1)


class _GRUStep(nn.Module):
    """A GRU cell as ``(input, state) -> (output, next state)``."""

    def __init__(self, cell: nn.GRUCell) -> None:
        super().__init__()
        self.cell = cell

    def forward(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        h = self.cell(x, state)
        return h, h


class _LSTMStep(nn.Module):
    """An LSTM cell as ``(input, state) -> (output, next state)``, its ``h`` and ``c`` side by side in the state."""

    def __init__(self, cell: nn.LSTMCell) -> None:
        super().__init__()
        self.cell = cell
        self.hidden_size = int(cell.hidden_size)

    def forward(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        h, c = self.cell(x, (state[:, : self.hidden_size], state[:, self.hidden_size:]))
        return h, torch.cat([h, c], dim=-1)


class DeployedRecurrentActor(DeployedActor):
    """A policy with memory: ``(obs [N, O], state [N, S], action_mask [N, A] optional) -> (action, next state)``.

    ``encoder -> memory cell -> head``; the state is the actor's memory only (a GRU's ``h``, or an LSTM's ``h`` and
    ``c`` side by side: ``S = 2 H``), zeros at the start of every episode, the returned one fed back at the next
    step.
    """

    def __init__(self, encoder: nn.Module, cell: nn.Module, head: nn.Module, obs_dim: int, *, lstm: bool,
                 num_actions: int = 0, action_dim: int = 0, obs_rms: nn.Module | None = None) -> None:
        super().__init__(head, obs_dim, num_actions=num_actions, action_dim=action_dim, obs_rms=obs_rms)
        self.encoder = plain_modules(copy.deepcopy(encoder)).cpu().float().eval()
        cell = copy.deepcopy(cell).cpu().float().eval()
        self.memory = _LSTMStep(cell) if lstm else _GRUStep(cell)
        self.state_size = int(cell.hidden_size) * (2 if lstm else 1)
        for parameter in self.parameters():
            parameter.requires_grad_(False)

    def forward(self, obs: Tensor, state: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        h, after = self.memory(self.encoder(self._input(obs)), state)
        return self._action(self.actor(h), action_mask), after
