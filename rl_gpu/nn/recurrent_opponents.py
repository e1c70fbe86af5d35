"""A league's opponents with memory: K frozen copies of a composed policy's actor (MLP encoder -> GRU or LSTM
cell -> categorical head, :class:`~rl_gpu.nn.composed.ComposedActorCritic`), played in blocks of rows as
:class:`~rl_gpu.nn.opponents.StackedActors` plays feed-forward ones.

Shape legend: K = members, N = rows, B = blocks, R = N / B rows per block, F = the encoder's output, H = the
memory's size, S = the state's width (H for a GRU, 2H for an LSTM's hidden and cell states side by side), G = the
cell's gates times H (3H for a GRU, 4H for an LSTM).

Each row's state ``[N, S]`` is the actor's half of the composed policy's ``[N, 2, S]`` state (an opponent needs no
critic). The cell is written out with the members' weights gathered per block, in PyTorch's gate order::

    GRU:  r, z, n = sigmoid(xW_r + hU_r), sigmoid(xW_z + hU_z), tanh(xW_n + b_n + r * (hU_n + c_n));
          h' = (1 - z) n + z h
    LSTM: i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of (xW + b_ih + hU + b_hh);  c' = f c + i g;  h' = o tanh(c')

so one batched product per weight serves all members, as for the feed-forward league. The collector carries the
state, advancing it on the opponent's own turns and resetting it where an episode ended (:mod:`rl_gpu.nn.memory`'s
protocol: ``initial_state``, ``act_with_state``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rl_gpu.core.types import PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.cpu_kernels import stacked_mlp
from rl_gpu.nn.opponents import StackedActors

_CELL = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def _affine(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``x @ weight^T + bias`` per block: ``[B, R, I]``, ``[B, O, I]``, ``[B, O]`` -> ``[B, R, O]``."""
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


class StackedRecurrentActors(StackedActors):
    """K members shaped like ``template``'s actor with memory (a composed policy with an MLP encoder and a
    categorical head), playing N rows in B blocks. Buffers: ``weight_i``/``bias_i`` for the encoder's linear layers
    then the head's, ``cell_weight_ih``, ``cell_weight_hh``, ``cell_bias_ih``, ``cell_bias_hh`` ``[K, ...]``, and
    the observation statistics, ``block_slot`` and ``slot`` of :class:`StackedActors`."""

    is_recurrent = True

    @staticmethod
    def _check_template(template: nn.Module) -> None:
        from rl_gpu.nn.composed import ComposedActorCritic

        if not (isinstance(template, ComposedActorCritic) and template.memory_size > 0):
            raise TypeError(f"a league with memory stacks composed policies with memory, not "
                            f"{type(template).__name__}")
        if template.is_continuous or template.channels:
            raise ValueError("a league's members with memory are categorical policies over vector observations (an "
                             "MLP encoder)")

    @staticmethod
    def _layers(policy: nn.Module) -> list[nn.Module]:
        return [*policy.actor_encoder.layers, policy.head.logits]

    @staticmethod
    def _extra(policy: nn.Module) -> dict[str, Tensor]:
        return {f"cell_{name}": getattr(policy.actor_memory, name) for name in _CELL}

    def __init__(self, template: nn.Module, capacity: int, num_rows: int, num_blocks: int | None = None) -> None:
        super().__init__(template, capacity, num_rows, num_blocks)
        self.lstm = template.lstm
        self.memory_size = template.memory_size
        self.encoder_layers = self.layers[:-1]

    def initial_state(self, num_rows: int) -> Tensor:
        """``[N, S]`` zeros: the state of fresh episodes."""
        size = self.memory_size * (2 if self.lstm else 1)
        return torch.zeros(num_rows, size, device=self.slot.device)

    def _cell(self, x: Tensor, state: Tensor, member: Tensor) -> tuple[Tensor, Tensor]:
        """``(output [B, R, H], next state [B, R, S])`` of each block's member's cell (module docstring)."""
        w_ih, w_hh, b_ih, b_hh = (getattr(self, f"cell_{name}")[member] for name in _CELL)
        if self.lstm:
            h, c = state.chunk(2, dim=-1)
            i, f, g, o = (_affine(x, w_ih, b_ih) + _affine(h, w_hh, b_hh)).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            return h, torch.cat([h, c], dim=-1)
        x_r, x_z, x_n = _affine(x, w_ih, b_ih).chunk(3, dim=-1)
        h_r, h_z, h_n = _affine(state, w_hh, b_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * h_n)
        h = (1.0 - z) * n + z * state
        return h, h

    def act_with_state(self, obs: Tensor, state: Tensor, action_mask: Tensor | None = None,
                       generator: torch.Generator | None = None, deterministic: bool = False,
                       noise: Tensor | None = None, critic_obs: Tensor | None = None) -> tuple[PolicyOutput, Tensor]:
        """Each row's action from its member in ``state`` (``[N, S]``), and the state after ``obs``; sampled as
        the composed policy samples (from ``noise`` when given); the value is zero (no critic)."""
        member = self.block_slot
        params = [(getattr(self, f"weight_{i}")[member], getattr(self, f"bias_{i}")[member])
                  for i in range(self.linear_count)]
        features = stacked_mlp(self.encoder_layers, params[:-1], self.blocks(obs))
        out, after = self._cell(features, state.view(self.num_blocks, self.rows_per_block, -1), member)
        logits = _affine(out, *params[-1]).reshape(obs.shape[0], -1)
        action, log_prob = D.categorical_act(logits, action_mask, generator, deterministic, noise)
        return PolicyOutput(action, log_prob, torch.zeros(obs.shape[0], device=obs.device)), after.reshape(
            obs.shape[0], -1)

    def logits(self, obs: Tensor) -> Tensor:
        raise ValueError("a league member with memory acts with act_with_state(obs, state)")

    def act(self, obs: Tensor, *args, **kwargs) -> PolicyOutput:
        raise ValueError("a league member with memory acts with act_with_state(obs, state)")


def stacked_opponents(template: nn.Module, capacity: int, num_rows: int,
                      num_blocks: int | None = None) -> StackedActors:
    """The league's members for ``template``: :class:`StackedRecurrentActors` for a policy with memory, else
    :class:`StackedActors`."""
    cls = StackedRecurrentActors if getattr(template, "is_recurrent", False) is True else StackedActors
    return cls(template, capacity, num_rows, num_blocks)
