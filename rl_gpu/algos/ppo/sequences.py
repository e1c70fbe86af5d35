"""PPO's minibatches for policies with memory (:mod:`rl_gpu.nn.memory`): whole environment columns replayed as
sequences, not shuffled single steps.

Shape legend: T = steps, N = environments, n = columns in a minibatch, H = the state.

A recurrent policy's decision at step t depends on every observation since its episode started, so a minibatch is
a set of n columns of the ``[T, N]`` rollout, each replayed over its T steps by the policy's
``evaluate_sequence(obs, action, action_mask, state0, starts)`` from the state it had before step 0 (the
rollout's ``policy_state0``), with the state reset to the initial one where an episode started (``starts[t]``:
the column's episode ended at step t - 1, as the collector reset it). Gradients flow back through all T steps
(truncated backpropagation through time at the rollout's boundary). The columns are shuffled each epoch; the
loss is PPO's own (:func:`~rl_gpu.algos.ppo.loss.ppo_loss`) on the replayed ``[T * n]`` slots, so on the first
minibatch of the first epoch the ratio is 1 (the replay reproduces the collection's log-probabilities).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from rl_gpu.algos.ppo.batch import FlatBatch
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.ppo.loss import LOSS_STATS, ppo_loss
from rl_gpu.data.rollout import Rollout


class SequenceBatch(NamedTuple):
    """A rollout's fields with its advantages, kept ``[T, N, ...]``, and where each column's sequences start."""

    steps: FlatBatch
    """The fields a minibatch gathers, each ``[T, N, ...]`` (not flattened)."""
    state0: Any
    """The policy's state before step 0 (``[N, ...]``)."""
    starts: Tensor
    """``[T, N]`` bool: an episode starts at step t (its state is the initial one)."""
    hold: Tensor | None = None
    """``[T, N]`` bool: not a learner decision (an opponent's turn, padding): the state does not advance there, as
    the collector kept it (turn-based games); None: every step advances it."""


def sequence_batch(batch: Rollout, advantage: Tensor, returns: Tensor, continuous: bool,
                   weighted: bool = True) -> SequenceBatch:
    """The rollout as sequences (views, no copies). ``starts[0]`` is False: ``state0`` already holds the
    state before step 0, reset or not. ``weighted``: the state is held at the steps of weight 0."""
    if batch.policy_state0 is None:
        raise ValueError("the rollout has no policy_state0: collect it with the recurrent policy that learns "
                         "from it")
    done = batch.done
    starts = torch.cat([torch.zeros_like(done[:1]), done[:-1]])
    steps = FlatBatch(batch.obs, batch.action, None if continuous else batch.action_mask, batch.log_prob,
                      batch.value, advantage, returns, batch.weight if weighted else None, batch.critic_obs)
    # A turn-based game's learner advances its state on its own decisions only (the collector holds it through the
    # opponent's turns); holding it at every step of weight 0 (padding after a game, too) replays exactly that.
    hold = batch.weight == 0 if weighted else None
    return SequenceBatch(steps, batch.policy_state0, starts, hold)


class _Replayed:
    """What :func:`ppo_loss` asks of a policy (``evaluate``), answered by one sequence replay."""

    def __init__(self, out: tuple[Tensor, Tensor, Tensor]) -> None:
        self.out = out

    def evaluate(self, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor, Tensor]:
        return self.out


def sequence_loss(policy: Any, config: PPOConfig, seq: SequenceBatch, cols: Tensor,
                  step: Any = None) -> tuple[Tensor, Tensor]:
    """``(loss, stats [len(LOSS_STATS)])`` of the minibatch of columns ``cols`` (``[n]`` int64); ``step``: the
    memory's step for ``evaluate_sequence`` (a compiled one), when given."""
    def columns(x: Tensor | None) -> Tensor | None:
        return None if x is None else x.index_select(1, cols)

    steps = FlatBatch(*(columns(x) for x in seq.steps))
    extra = {} if step is None else {"step": step}
    if seq.hold is not None:
        extra["hold"] = columns(seq.hold)
    if steps.critic_obs is not None:  # an asymmetric critic's group
        extra["critic_obs"] = steps.critic_obs
    replayed = policy.evaluate_sequence(steps.obs, steps.action, steps.action_mask,
                                        seq.state0.index_select(0, cols), columns(seq.starts), **extra)
    mb = {name: None if x is None else x.flatten(0, 1) for name, x in steps._asdict().items() if name != "critic_obs"}
    loss, stats = ppo_loss(_Replayed(tuple(x.flatten(0, 1) for x in replayed)), mb, config)
    return loss, torch.stack([stats[k].detach() for k in LOSS_STATS])
