"""Action distributions as pure tensor functions: masked categorical, diagonal Gaussian, and the tanh-squashed
Gaussian of SAC.

Shape legend: N = batch rows, A = discrete actions, D = continuous action dimensions.
Argument validation of ``torch.distributions`` is avoided on purpose: it synchronises with the host.

Sampling takes either a ``generator`` or pre-drawn ``noise``. The compiled and graph-captured hot loop draws the
noise outside the compiled code (:func:`categorical_noise`, :func:`gaussian_noise`) and passes it in: a compiled
graph then holds no random-number generation (Inductor's in-graph RNG was several times slower on CPU, and a
CUDA graph would otherwise have to register every generator). Both routes give identical samples for the same
generator state.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def mask_logits(logits: Tensor, action_mask: Tensor | None) -> Tensor:
    """``[N, A]`` logits with illegal entries set to the dtype's lowest finite value.

    The lowest finite value rather than ``-inf`` keeps ``p * log p`` finite (it is exactly 0 for masked
    entries after ``softmax``), so entropies and gradients never become NaN.
    """
    if action_mask is None:
        return logits
    return logits.masked_fill(~action_mask, torch.finfo(logits.dtype).min)


def categorical_noise(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device | str,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``shape`` (``[..., N, A]``) uniform noise in [0, 1): the randomness of :func:`categorical_sample`."""
    return torch.rand(shape, generator=generator, device=device, dtype=dtype)


def categorical_sample(
    logits: Tensor, action_mask: Tensor | None, generator: torch.Generator | None = None,
    noise: Tensor | None = None,
) -> Tensor:
    """``[N]`` int64 actions drawn from softmax(masked logits) by the Gumbel-max trick.

    ``noise`` (``[N, A]`` uniform in [0, 1), from :func:`categorical_noise`) replaces drawing from ``generator``.
    Illegal actions have probability exactly zero: their logit is the lowest finite float, which no finite
    Gumbel noise can lift above a legal logit.
    """
    logits = mask_logits(logits, action_mask)
    if noise is None:
        noise = categorical_noise(logits.shape, generator, logits.device, logits.dtype)
    u = noise.clamp(min=torch.finfo(logits.dtype).tiny, max=1.0 - torch.finfo(logits.dtype).eps)
    gumbel = -torch.log(-torch.log(u))
    scores = torch.where(action_mask, logits + gumbel, logits) if action_mask is not None else logits + gumbel
    return scores.argmax(dim=-1)


def categorical_log_prob(logits: Tensor, action_mask: Tensor | None, action: Tensor) -> Tensor:
    """``[N]`` log-probability of ``action`` under softmax(masked logits)."""
    return _pick(torch.log_softmax(mask_logits(logits, action_mask), dim=-1), action)


def categorical_entropy(logits: Tensor, action_mask: Tensor | None) -> Tensor:
    """``[N]`` entropy over the legal actions only: ``-sum_{a legal} p_a log p_a``."""
    return _entropy(torch.log_softmax(mask_logits(logits, action_mask), dim=-1), action_mask)


def categorical_log_prob_entropy(
    logits: Tensor, action_mask: Tensor | None, action: Tensor
) -> tuple[Tensor, Tensor]:
    """:func:`categorical_log_prob` and :func:`categorical_entropy` from one masked log-softmax."""
    log_p = torch.log_softmax(mask_logits(logits, action_mask), dim=-1)
    return _pick(log_p, action), _entropy(log_p, action_mask)


def _pick(log_p: Tensor, action: Tensor) -> Tensor:
    return log_p.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def _entropy(log_p: Tensor, action_mask: Tensor | None) -> Tensor:
    p_log_p = log_p.exp() * log_p
    if action_mask is not None:
        p_log_p = torch.where(action_mask, p_log_p, torch.zeros_like(p_log_p))
    return -p_log_p.sum(-1)


def categorical_mode(logits: Tensor, action_mask: Tensor | None) -> Tensor:
    """``[N]`` most probable legal action."""
    return mask_logits(logits, action_mask).argmax(dim=-1)


_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def categorical_act(
    logits: Tensor, action_mask: Tensor | None, generator: torch.Generator | None = None,
    deterministic: bool = False, noise: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``(action [N], log_prob [N])``: one legal action per row, the most probable with ``deterministic``, else
    sampled (from ``noise`` when given, see :func:`categorical_sample`)."""
    if deterministic:
        action = categorical_mode(logits, action_mask)
    else:
        action = categorical_sample(logits, action_mask, generator, noise)
    return action, categorical_log_prob(logits, action_mask, action)


def gaussian_noise(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device | str,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``shape`` (``[..., N, D]``) standard normal noise: the randomness of :func:`gaussian_sample`."""
    return torch.randn(shape, generator=generator, device=device, dtype=dtype)


def gaussian_sample(
    mean: Tensor, log_std: Tensor, generator: torch.Generator | None = None, noise: Tensor | None = None
) -> Tensor:
    """``[N, D]`` sample of N(mean, exp(log_std)^2); ``log_std`` broadcasts to ``mean``. ``noise`` (``[N, D]``
    standard normal, from :func:`gaussian_noise`) replaces drawing from ``generator``."""
    if noise is None:
        noise = gaussian_noise(mean.shape, generator, mean.device, mean.dtype)
    return mean + log_std.exp() * noise


def gaussian_log_prob(mean: Tensor, log_std: Tensor, action: Tensor) -> Tensor:
    """``[N]`` log-density of ``action`` summed over the D independent dimensions."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: Tensor, batch_shape: torch.Size) -> Tensor:
    """``batch_shape`` entropy of a diagonal Gaussian: ``sum_d (log_std_d + 0.5 log(2 pi e))``."""
    per_dim = log_std + 0.5 + _LOG_SQRT_2PI
    return per_dim.sum(-1).expand(batch_shape)


_LOG_2 = math.log(2.0)


def log1m_tanh_sq(u: Tensor) -> Tensor:
    """``log(1 - tanh(u)^2)`` computed from ``u`` as ``2 (log 2 - u - softplus(-2u))``: finite for every finite
    ``u``, where the direct form is ``log(0) = -inf`` once ``tanh(u)`` rounds to 1 (``|u|`` above about 9)."""
    return 2.0 * (_LOG_2 - u - torch.nn.functional.softplus(-2.0 * u))


def squashed_gaussian_sample(mean: Tensor, log_std: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
    """``(y [N, D], log_prob [N])``: ``y = tanh(u)`` with ``u = mean + exp(log_std) * noise`` (``noise`` ``[N, D]``
    standard normal), and the log-density of ``y`` on ``(-1, 1)^D`` by the change of variables
    ``log p(y) = log N(u; mean, std) - sum_d log(1 - tanh(u_d)^2)``.

    The density is that of the normalised action ``y``; an action mapped to the bounds ``bias + scale * y``
    has the density ``log p(y) - sum_d log scale_d`` (a constant, which only shifts an entropy target).
    """
    u = mean + log_std.exp() * noise
    return torch.tanh(u), squashed_gaussian_log_prob(mean, log_std, u)


def squashed_gaussian_log_prob(mean: Tensor, log_std: Tensor, u: Tensor) -> Tensor:
    """``[N]`` log-density of ``y = tanh(u)`` (``u`` ``[N, D]``, the pre-squash sample) under the tanh-squashed
    Gaussian of ``mean`` and ``log_std`` (see :func:`squashed_gaussian_sample`)."""
    return gaussian_log_prob(mean, log_std, u) - log1m_tanh_sq(u).sum(-1)
