"""GRPO's and RLOO's maths as pure functions.

Shape legend: N responses (rows), G responses per prompt (a group: consecutive rows), R response positions.
"""

from __future__ import annotations

import torch
from torch import Tensor


def group_advantages(reward: Tensor, group_size: int, *, leave_one_out: bool = False, scale: bool = True,
                     eps: float = 1e-4) -> Tensor:
    """``[N]`` advantage of each response from ``reward`` ``[N]`` (N a multiple of G = ``group_size``).

    GRPO: ``A_i = r_i - mean(group)``, divided by ``std(group) + eps`` (the unbiased std) with ``scale``;
    without it this is Dr. GRPO's. RLOO (``leave_one_out``): ``A_i = r_i - mean_{j != i} r_j
    = G / (G - 1) * (r_i - mean(group))``. A group whose rewards are all equal has advantage 0 everywhere.
    """
    r = reward.float().view(-1, group_size)
    centred = r - r.mean(dim=1, keepdim=True)
    if leave_one_out:
        return (centred * (group_size / (group_size - 1))).view(-1)
    if scale:
        centred = centred / (r.std(dim=1, keepdim=True) + eps)
    return centred.view(-1)


def kl_k3(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled token's log-probabilities (same shape):
    ``exp(ref - new) - (ref - new) - 1``, unbiased and never negative (Schulman's k3)."""
    delta = ref_log_prob - log_prob
    return torch.exp(delta) - delta - 1


def clipped_token_loss(log_prob: Tensor, old_log_prob: Tensor, advantage: Tensor, clip_coef: float
                       ) -> tuple[Tensor, Tensor]:
    """``(loss [N, R], clipped [N, R] bool)``: PPO's clipped surrogate per token,
    ``-min(rho A, clip(rho, 1 - c, 1 + c) A)`` with ``rho = exp(log_prob - old_log_prob)`` and ``advantage``
    per token ``[N, R]``, or per response ``[N]`` (on all its tokens); ``clipped`` where the clipped term is the
    smaller."""
    ratio = torch.exp(log_prob - old_log_prob)
    a = advantage.unsqueeze(1) if advantage.dim() == 1 else advantage
    plain, clipped = ratio * a, ratio.clamp(1 - clip_coef, 1 + clip_coef) * a
    return -torch.minimum(plain, clipped), clipped < plain


def reduce_tokens(per_token: Tensor, chosen: Tensor, norm: str) -> Tensor:
    """The minibatch's loss from ``per_token`` ``[N, R]`` over the ``chosen`` ``[N, R]`` (bool) tokens.

    ``token``: sum over chosen tokens / their count (every token weighs the same); ``sequence``: each response's
    mean over its chosen tokens, then the mean over responses; ``constant``: sum over chosen tokens / (N R).
    """
    weight = chosen.to(per_token.dtype)
    total = per_token * weight
    if norm == "token":
        return total.sum() / weight.sum().clamp(min=1)
    if norm == "sequence":
        return (total.sum(dim=1) / weight.sum(dim=1).clamp(min=1)).mean()
    if norm == "constant":
        return total.sum() / per_token.numel()
    raise ValueError(f"loss_norm must be token, sequence or constant, got {norm!r}")
