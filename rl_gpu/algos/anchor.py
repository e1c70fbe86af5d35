"""Penalties that hold a policy near its earlier parameters: the L2 and EWC methods against forgetting.

Both are the quadratic ``coef * sum_i w_i (theta_i - theta*_i)^2`` around the parameters ``theta*`` that ended the
previous task. L2 weighs every actor parameter the same (``w_i = 1``); EWC (Kirkpatrick et al. 2017) weighs each by
the diagonal of the policy's Fisher information on the earlier tasks' states, ``F_i = E_s E_{a~pi(.|s)}[(d log
pi(a|s) / d theta_i)^2]``, so that the parameters the earlier tasks depend on move least. Over a sequence the
Fishers add up and the anchor moves to the end of each task (the online form: one penalty, whatever the number of
tasks). SAC's actor is weighed by the Fisher of its Gaussian before the squashing (a fixed bijection of the
action, which leaves the Fisher unchanged), TD3's by that of its exploration noise. Only the actor is held: the
critic serves the current task's advantages, and what an earlier task keeps is how the policy acts (parameters no
log-probability depends on get weight 0).

The penalty's gradient, ``2 coef w (theta - theta*)``, is added to the parameters' gradients before clipping and the
optimiser's step (:class:`~rl_gpu.algos.ppo.update.UpdateUnits`), in place: no extra pass over the data.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

METHODS = ("finetune", "l2", "ewc", "rehearsal", "replay")
"""The methods of a task sequence (:mod:`rl_gpu.training.continual`): no protection, the two penalties, rows of
the earlier tasks kept in every batch (on-policy), and the earlier tasks' transitions kept in the replay buffer
(off-policy)."""


class Anchor:
    """``coef * sum_i w_i (theta_i - theta*_i)^2`` over ``params`` (see the module docstring)."""

    def __init__(self, params: list[Tensor], reference: list[Tensor], weights: list[Tensor], coef: float) -> None:
        if not (len(params) == len(reference) == len(weights)):
            raise ValueError("an anchor needs one reference and one weight per parameter")
        self.params, self.reference, self.weights, self.coef = params, reference, weights, float(coef)

    def add_grad(self) -> None:
        """Add the penalty's gradient to every parameter's ``.grad`` (made when missing)."""
        for p, ref, w in zip(self.params, self.reference, self.weights):
            g = (p.detach() - ref).mul_(w).mul_(2.0 * self.coef)
            if p.grad is None:
                p.grad = g
            else:
                p.grad.add_(g)

    def penalty(self) -> Tensor:
        """The penalty's value (0-dim)."""
        return self.coef * sum(((p.detach() - r).square() * w).sum()
                               for p, r, w in zip(self.params, self.reference, self.weights))

    def state_dict(self) -> dict:
        return {"reference": self.reference, "weights": self.weights, "coef": self.coef}


def trainable(policy: nn.Module) -> list[Tensor]:
    return [p for p in policy.parameters() if p.requires_grad]


def fisher_diagonal(policy: nn.Module, obs: Tensor, action_mask: Tensor | None, generator: torch.Generator,
                    critic_obs: Tensor | None = None) -> list[Tensor]:
    """The diagonal of the policy's Fisher information at the states ``obs`` (``[B, *O]``): the mean over states
    of ``(d log pi(a|s) / d theta)^2`` with ``a`` drawn from the policy, one gradient per state (the square of a
    batch's mean gradient would not be the Fisher). One tensor per trainable parameter (zeros where no
    log-probability depends on it: the critic). An off-policy actor (SAC's, TD3's) draws and scores its own
    exploring sample (its ``fisher_log_prob``)."""
    params = trainable(policy)
    totals = [torch.zeros_like(p) for p in params]
    own = getattr(policy, "fisher_log_prob", None)  # off-policy actors: the density they explore with
    if own is None:
        with torch.no_grad():
            kwargs = {"critic_obs": critic_obs} if critic_obs is not None else {}
            actions = policy.act(obs, action_mask, generator, **kwargs).action
    for i in range(obs.shape[0]):
        mask = action_mask[i:i + 1] if action_mask is not None and action_mask.numel() else None
        extra = {"critic_obs": critic_obs[i:i + 1]} if critic_obs is not None else {}
        if own is not None:
            log_prob = own(obs[i:i + 1], generator).sum()
        else:
            log_prob = policy.evaluate(obs[i:i + 1], actions[i:i + 1], mask, **extra)[0].sum()
        grads = torch.autograd.grad(log_prob, params, allow_unused=True)
        for total, g in zip(totals, grads):
            if g is not None:
                total.add_(g.square())
    return [t / obs.shape[0] for t in totals]


def make_anchor(method: str, policy: nn.Module, coef: float, fisher: list[Tensor]) -> Anchor:
    """The anchor of ``method`` (``l2`` or ``ewc``) at ``policy``'s parameters now; ``fisher``: the Fisher
    diagonal summed over the earlier tasks (for L2 only its support, the actor, is used)."""
    params = trainable(policy)
    reference = [p.detach().clone() for p in params]
    if method == "ewc":
        weights = [f.clone() for f in fisher]
    elif method == "l2":
        weights = [(f > 0).to(f.dtype) for f in fisher]
    else:
        raise ValueError(f"no anchor for method {method!r}; anchors: l2, ewc")
    return Anchor(params, reference, weights, coef)
