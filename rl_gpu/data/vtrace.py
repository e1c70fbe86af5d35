"""V-trace (IMPALA, Espeholt et al. 2018): value targets and policy-gradient advantages for a ``[T, N]`` rollout
collected by a behaviour policy mu and learned by a target policy pi, with termination and truncation apart."""

from __future__ import annotations

import torch
from torch import Tensor


def compute_vtrace(
    log_rho: Tensor,
    reward: Tensor,
    value: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    final_value: Tensor,
    bootstrap_value: Tensor,
    gamma: float,
    vtrace_lambda: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """V-trace targets ``vs`` and policy-gradient advantages.

    Step ``t`` is the transition ``obs[t] --action[t]--> reward[t]``; ``log_rho_t = log pi(a_t|x_t) - log mu(a_t|x_t)``.
    With ``rho_t = min(rho_bar, e^log_rho_t)``, ``c_t = lambda * min(c_bar, e^log_rho_t)`` and
    ``d_t = terminated_t | truncated_t``:

    - ``next_V_t = 0`` if terminated, ``final_value_t`` = V(final_obs_t) if truncated, else ``value[t+1]``
      (``bootstrap_value`` after the last step);
    - ``delta_t = rho_t * (reward_t + gamma * next_V_t - value_t)``;
    - ``vs_t - value_t = delta_t + gamma * c_t * (1 - d_t) * (vs_{t+1} - value_{t+1})``;
    - ``advantage_t = rho_t * (reward_t + gamma * next_vs_t - value_t)``, where ``next_vs_t`` is ``next_V_t`` at an
      episode end and ``vs_{t+1}`` otherwise (``bootstrap_value`` after the last step).

    On-policy (``log_rho = 0``, ``rho_bar, c_bar >= 1``) ``vs`` is the lambda-return, GAE(lambda)'s ``returns``
    (with lambda = 1 the n-step return bootstrapped from the last value), and the advantage is the one-step
    advantage on it. ``rho_bar`` bounds how far the fixed point moves toward pi's value (IMPALA: 1), ``c_bar``
    how far an off-policy step carries the correction back (the trace cutting of Retrace).

    Args:
        log_rho: ``[T, N]`` float, log importance ratios of the actions taken.
        reward: ``[T, N]`` float.
        value: ``[T, N]`` float, V(obs[t]) under the learner's critic.
        terminated: ``[T, N]`` bool.
        truncated: ``[T, N]`` bool.
        final_value: ``[T, N]`` float, V(final_obs[t]); read only where ``truncated``.
        bootstrap_value: ``[N]`` float, V(obs after the last step).
        gamma: discount.
        vtrace_lambda: lambda of the traces (IMPALA's remark 5: 1 is plain V-trace).
        rho_bar: truncation of the importance weights in the targets and advantages.
        c_bar: truncation of the traces.

    Returns:
        ``(advantage, vs)``, both ``[T, N]`` float.
    """
    ratio = log_rho.exp()
    rho = ratio.clamp(max=rho_bar)
    c = vtrace_lambda * ratio.clamp(max=c_bar)
    done = terminated | truncated
    following = torch.cat([value[1:], bootstrap_value[None]])
    end_value = torch.where(truncated, final_value, torch.zeros_like(final_value))
    next_value = torch.where(done, end_value, following)
    delta = rho * (reward + gamma * next_value - value)
    carry = torch.where(done, torch.zeros_like(c), gamma * c)
    corrections = []
    correction = torch.zeros_like(bootstrap_value)
    for t in range(reward.shape[0] - 1, -1, -1):
        correction = delta[t] + carry[t] * correction
        corrections.append(correction)
    vs = torch.stack(corrections[::-1]) + value
    next_vs = torch.where(done, end_value, torch.cat([vs[1:], bootstrap_value[None]]))
    advantage = rho * (reward + gamma * next_vs - value)
    return advantage, vs
