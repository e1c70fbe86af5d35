"""A league's opponents as one batched player: K frozen copies of a categorical actor, their parameters stacked
``[K, ...]``, the rows split into B equal blocks, each block played by one member, all blocks in one batched
matrix multiply per layer with the weights gathered per block.

Shape legend: K = members, N = rows, B = blocks, R = N / B rows per block, O = observation size, H = hidden
width, A = actions.

Why blocks: a forward pass over ``[B, R, H] @ [B, H, H]`` (weights gathered by each block's member) costs what
one network's forward over N rows costs, whatever K is, and holds ``B x H x H`` gathered floats per layer, not
the ``N x H x H`` of a per-row gather; evaluating every member on every row would cost K forwards. Shapes are
static, so the step stays compilable and graph-capturable (no Python loop over members, no data-dependent
shape). The rows of an episodic rollout are independent fresh games (each with its own seat draw), so giving a
block of rows to one member is the same in distribution as drawing a member per row. A member whose last layer
is all zeros has zero logits: the uniform-random player over the legal moves, sampled exactly as
:class:`~rl_gpu.nn.actor_critic.UniformRandomPolicy` samples.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rl_gpu.core.types import PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.actor_critic import ActorCritic
from rl_gpu.nn.cpu_kernels import stacked_mlp

MAX_BLOCKS = 256
"""Most blocks of rows: the finest split of a batch among the members."""


def block_count(num_rows: int) -> int:
    """B: the largest divisor of ``num_rows`` up to :data:`MAX_BLOCKS` (N itself, one row per block, when that
    divisor would be below 16: a batch of a prime size is split row by row)."""
    count = max(d for d in range(1, min(num_rows, MAX_BLOCKS) + 1) if num_rows % d == 0)
    return count if count >= min(16, num_rows) else num_rows


class StackedActors(nn.Module):
    """K members shaped like ``template``'s actor (an :class:`ActorCritic`), playing N rows in B blocks.

    Buffers: ``weight_i`` ``[K, out, in]`` and ``bias_i`` ``[K, out]`` per linear layer of the actor; with
    observation normalisation, ``obs_mean``/``obs_var`` ``[K, O]`` (float64, as the template keeps them) and
    ``obs_count`` ``[K]``; ``block_slot`` ``[B]`` int64, the member playing each block, and ``slot`` ``[N]``,
    the same per row (both set with :meth:`assign`). Members start as uniform-random players (all zeros).

    Args:
        template: the learner; only its shapes and non-linear layers are used.
        capacity: K.
        num_rows: N.
        num_blocks: B, a divisor of N (default :func:`block_count`).
    """

    is_continuous = False

    def __init__(self, template: ActorCritic, capacity: int, num_rows: int, num_blocks: int | None = None) -> None:
        super().__init__()
        self._check_template(template)
        if capacity <= 0 or num_rows <= 0:
            raise ValueError(f"capacity and num_rows must be positive, got {capacity} and {num_rows}")
        num_blocks = block_count(num_rows) if num_blocks is None else num_blocks
        if num_blocks <= 0 or num_rows % num_blocks:
            raise ValueError(f"num_blocks must be a positive divisor of num_rows {num_rows}, got {num_blocks}")
        self.num_blocks = num_blocks
        self.rows_per_block = num_rows // num_blocks
        device = next(template.parameters()).device
        self.capacity = capacity
        self.layers = self._layers(template)
        """The template's layers: its linear ones are shapes only (the stacked buffers replace their parameters,
        :func:`~rl_gpu.nn.layers.stacked_mlp`); the others (activations) apply elementwise."""
        linears = self._linears(template)
        self.linear_count = len(linears)
        for i, layer in enumerate(linears):
            self.register_buffer(f"weight_{i}", torch.zeros(capacity, *layer.weight.shape, device=device))
            self.register_buffer(f"bias_{i}", torch.zeros(capacity, *layer.bias.shape, device=device))
        for name, tensor in self._extra(template).items():
            self.register_buffer(name, torch.zeros(capacity, *tensor.shape, device=device))
        self.normalize_obs = template.obs_rms is not None
        if self.normalize_obs:
            rms = template.obs_rms
            self.clip, self.epsilon = rms.clip, rms.epsilon
            self.register_buffer("obs_mean", torch.zeros(capacity, *rms.mean.shape, dtype=rms.mean.dtype,
                                                         device=device))
            self.register_buffer("obs_var", torch.ones(capacity, *rms.var.shape, dtype=rms.var.dtype,
                                                       device=device))
            self.register_buffer("obs_count", torch.zeros(capacity, dtype=rms.count.dtype, device=device))
        self.register_buffer("block_slot", torch.zeros(num_blocks, dtype=torch.long, device=device))
        self.register_buffer("slot", torch.zeros(num_rows, dtype=torch.long, device=device))

    # --- what a member is made of (a subclass stacks another actor: rl_gpu.nn.recurrent_opponents) ---------

    @staticmethod
    def _check_template(template: nn.Module) -> None:
        if not isinstance(template, ActorCritic):
            raise TypeError(f"a league stacks categorical actor-critics (ActorCritic), not {type(template).__name__}")

    @staticmethod
    def _layers(policy: nn.Module) -> list[nn.Module]:
        """The actor's layers in order, as :func:`~rl_gpu.nn.layers.stacked_mlp` runs them."""
        return list(policy.actor)

    def _linears(self, policy: nn.Module) -> list[nn.Linear]:
        """The actor's linear layers, stacked as ``weight_i`` / ``bias_i``."""
        return [layer for layer in self._layers(policy) if type(layer) is nn.Linear]

    @staticmethod
    def _extra(policy: nn.Module) -> dict[str, Tensor]:
        """Other parameters a member holds (buffer name -> the policy's tensor); none here."""
        return {}

    @torch.no_grad()
    def load_member(self, k: int, policy: ActorCritic) -> None:
        """Copy ``policy``'s actor (and observation statistics) into member ``k``, in place (a captured graph
        keeps reading the same memory)."""
        linears = self._linears(policy)
        if len(linears) != self.linear_count:
            raise ValueError(f"policy has {len(linears)} linear layers in its actor, the league's members "
                             f"{self.linear_count}")
        for i, layer in enumerate(linears):
            getattr(self, f"weight_{i}")[k].copy_(layer.weight)
            getattr(self, f"bias_{i}")[k].copy_(layer.bias)
        for name, tensor in self._extra(policy).items():
            getattr(self, name)[k].copy_(tensor)
        if self.normalize_obs:
            self.obs_mean[k].copy_(policy.obs_rms.mean)
            self.obs_var[k].copy_(policy.obs_rms.var)
            self.obs_count[k].copy_(policy.obs_rms.count)

    @torch.no_grad()
    def make_uniform(self, k: int) -> None:
        """Member ``k`` becomes the uniform-random player (zero logits)."""
        for i in range(self.linear_count):
            getattr(self, f"weight_{i}")[k].zero_()
            getattr(self, f"bias_{i}")[k].zero_()

    @torch.no_grad()
    def copy_member(self, source: int, target: int) -> None:
        """Member ``target`` becomes a copy of member ``source``."""
        for name, buffer in self.named_buffers():
            if name not in ("slot", "block_slot"):
                buffer[target].copy_(buffer[source])

    @torch.no_grad()
    def assign(self, block_slot: Tensor) -> None:
        """Set the member playing each block (``[B]`` int64, values in ``[0, K)``), in place; rows
        ``[b R, (b + 1) R)`` form block ``b``."""
        self.block_slot.copy_(block_slot)
        self.slot.copy_(block_slot.repeat_interleave(self.rows_per_block))

    def blocks(self, obs: Tensor) -> Tensor:
        """``[B, R, O]``: ``obs`` ``[N, O]`` by block, normalised by each block's member where it normalises."""
        member = self.block_slot
        x = obs.view(self.num_blocks, self.rows_per_block, obs.shape[-1])
        if self.normalize_obs:
            # RunningMeanStd's forward, block by block (the identity before a member's first update).
            mean, var = self.obs_mean[member].to(obs.dtype), self.obs_var[member]
            scale = torch.rsqrt(var + self.epsilon).to(obs.dtype)[:, None, :]
            normalized = ((x - mean[:, None, :]) * scale).clamp(-self.clip, self.clip)
            x = torch.where((self.obs_count[member] > 0)[:, None, None], normalized, x)
        return x

    def logits(self, obs: Tensor) -> Tensor:
        """``[N, A]``: each row's (unmasked) logits from the member of its block, for ``obs`` ``[N, O]``."""
        member = self.block_slot
        x = self.blocks(obs)
        params = [(getattr(self, f"weight_{i}")[member], getattr(self, f"bias_{i}")[member])
                  for i in range(self.linear_count)]
        return stacked_mlp(self.layers, params, x).reshape(obs.shape[0], -1)

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor | None = None,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        noise: Tensor | None = None,
        critic_obs: Tensor | None = None,
    ) -> PolicyOutput:
        """Each row's action from its member: sampled (from ``noise``, ``[N, A]`` uniform, when given, as
        :meth:`ActorCritic.act` samples) or the most probable legal one; the value is zero (no critic)."""
        action, log_prob = D.categorical_act(self.logits(obs), action_mask, generator, deterministic, noise)
        return PolicyOutput(action, log_prob, torch.zeros(obs.shape[0], device=obs.device))

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        """``[N]`` zeros: the opponents have no critic."""
        return torch.zeros(obs.shape[0], device=obs.device)
