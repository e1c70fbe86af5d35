"""Separate networks per agent: M actor-critics of one shape, stacked and evaluated in one batched call.

Shape legend: M = agents, B = rows, R = B / M rows per agent, O = one agent's observation, C = the ``critic``
group, A = discrete actions, D = continuous action dimensions.

Rows come in groups of M, agent-minor: row ``r`` is agent ``r % M`` of its world, which is how a rollout of N
worlds (``[N, M]``) and a MAPPO minibatch of whole world-steps flatten. Agent m's actor and critic are the m-th
slices of stacked layers (``[M, I, O]`` weights, one batched matrix product per layer for every agent), so they
are the same networks as M separate :class:`~rl_gpu.nn.actor_critic.ActorCritic` (or Gaussian) policies,
initialised as those are (orthogonal, gain ``sqrt 2``; actor output 0.01, critic output 1), each with its own
observation statistics and, for continuous actions, its own log-std. :meth:`PerAgentActorCritic.agent` gives
agent m's networks as such a plain policy: what export writes, one file per agent.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rl_gpu.core.types import EnvSpec, PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.actor_critic import ActorCritic, GaussianActorCritic
from rl_gpu.nn.ensemble import EnsembleLinear
from rl_gpu.nn.normalization import RunningMeanStd, to_float


class StackedMLP(nn.Module):
    """M tanh MLPs ``I -> hidden... -> out`` as stacked layers: ``[M, R, I]`` -> ``[M, R, out]``."""

    def __init__(self, members: int, in_size: int, hidden_sizes: Sequence[int], out_size: int,
                 out_gain: float) -> None:
        super().__init__()
        widths = [in_size, *hidden_sizes, out_size]
        self.layers = nn.ModuleList(EnsembleLinear(members, a, b) for a, b in itertools.pairwise(widths))
        with torch.no_grad():
            for i, layer in enumerate(self.layers):
                gain = out_gain if i == len(self.layers) - 1 else math.sqrt(2.0)
                for m in range(members):
                    # nn.Linear's [out, in] orthogonal matrix, stored transposed ([in, out]) for the batched product.
                    weight = torch.empty(layer.weight.shape[2], layer.weight.shape[1])
                    nn.init.orthogonal_(weight, gain)
                    layer.weight[m] = weight.T
                layer.bias.zero_()

    def forward(self, x: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.tanh(x)
        return x

    def member(self, m: int) -> list[tuple[Tensor, Tensor]]:
        """Agent m's layers as ``nn.Linear`` parameters: ``(weight [out, in], bias [out])`` each."""
        return [(layer.weight[m].T, layer.bias[m, 0]) for layer in self.layers]


def _normalize(x: Tensor, stats: nn.ModuleList | None) -> Tensor:
    """``x`` ``[M, R, I]``, each agent's rows through its own :class:`RunningMeanStd` (the same maths as its
    ``forward``, for all agents at once)."""
    if stats is None:
        return x
    mean = torch.stack([s.mean for s in stats]).to(x.dtype)[:, None]
    scale = torch.rsqrt(torch.stack([s.var for s in stats]) + stats[0].epsilon).to(x.dtype)[:, None]
    count = torch.stack([s.count for s in stats])[:, None, None]
    normalized = ((x - mean) * scale).clamp(-stats[0].clip, stats[0].clip)
    return torch.where(count > 0, normalized, x)


class PerAgentActorCritic(nn.Module):
    """One actor-critic per agent (MAPPO/IPPO without parameter sharing), evaluated together.

    Args:
        obs_dim: O.
        num_agents: M.
        num_actions: A (discrete actions), or 0.
        action_dim: D (continuous actions), or 0.
        hidden_sizes: widths of the hidden tanh layers of every network.
        normalize_obs: each agent keeps running statistics of its own observations.
        init_log_std: initial log-std of every agent's every action dimension (continuous actions).
        critic_obs_dim: C > 0: each critic reads ``concat(obs, critic_obs)``.
    """

    def __init__(self, obs_dim: int, num_agents: int, num_actions: int = 0, action_dim: int = 0,
                 hidden_sizes: Sequence[int] = (64, 64), normalize_obs: bool = False, init_log_std: float = 0.0,
                 critic_obs_dim: int = 0) -> None:
        super().__init__()
        if (num_actions > 0) == (action_dim > 0):
            raise ValueError(f"give num_actions (discrete) or action_dim (continuous), got {num_actions} and "
                             f"{action_dim}")
        if num_agents < 1 or obs_dim <= 0 or critic_obs_dim < 0 or any(h <= 0 for h in hidden_sizes):
            raise ValueError(f"num_agents, obs_dim and hidden sizes must be positive and critic_obs_dim >= 0, got "
                             f"{num_agents}, {obs_dim}, {tuple(hidden_sizes)}, {critic_obs_dim}")
        self.obs_dim, self.num_agents, self.critic_obs_dim = obs_dim, num_agents, critic_obs_dim
        self.num_actions, self.action_dim = num_actions, action_dim
        self.is_continuous = action_dim > 0
        self.hidden_sizes, self.normalize_obs, self.init_log_std = tuple(hidden_sizes), normalize_obs, init_log_std
        self.actor = StackedMLP(num_agents, obs_dim, hidden_sizes, num_actions or action_dim, 0.01)
        self.critic = StackedMLP(num_agents, obs_dim + critic_obs_dim, hidden_sizes, 1, 1.0)

        def stats(size: int) -> nn.ModuleList | None:
            return nn.ModuleList(RunningMeanStd(size) for _ in range(num_agents)) if normalize_obs and size else None

        self.obs_rms, self.critic_obs_rms = stats(obs_dim), stats(critic_obs_dim)
        if self.is_continuous:
            self.log_std = nn.Parameter(torch.full((num_agents, action_dim), float(init_log_std)))

    @classmethod
    def for_spec(cls, spec: EnvSpec, hidden_sizes: Sequence[int], normalize_obs: bool,
                 init_log_std: float) -> PerAgentActorCritic:
        """One network per agent of ``spec`` (``spec.num_agents`` M; the critic reads its ``critic`` group)."""
        sizes = {"action_dim": spec.action_size} if spec.is_continuous else {"num_actions": spec.num_actions}
        return cls(spec.obs_size, spec.num_agents, hidden_sizes=hidden_sizes, normalize_obs=normalize_obs,
                   init_log_std=init_log_std, critic_obs_dim=spec.critic_obs_size, **sizes)

    def _split(self, x: Tensor) -> Tensor:
        """``[B, ...]`` -> ``[M, R, ...]``."""
        m = self.num_agents
        if x.shape[0] % m:
            raise ValueError(f"a policy with one network per agent takes rows in groups of its {m} agents (row r is "
                             f"agent r % {m} of its world), got {x.shape[0]} rows")
        return x.reshape(x.shape[0] // m, m, *x.shape[1:]).transpose(0, 1)

    @staticmethod
    def _merge(y: Tensor) -> Tensor:
        """``[M, R, ...]`` -> ``[B, ...]``."""
        return y.transpose(0, 1).reshape(y.shape[0] * y.shape[1], *y.shape[2:])

    def _critic_input(self, x: Tensor, critic_obs: Tensor | None) -> Tensor:
        if not self.critic_obs_dim:
            return x
        if critic_obs is None:
            raise ValueError(f"this policy's critics read {self.critic_obs_dim} privileged observations (the "
                             "environment's critic group): pass critic_obs")
        return torch.cat([x, _normalize(self._split(to_float(critic_obs)), self.critic_obs_rms)], dim=-1)

    def forward(self, obs: Tensor, critic_obs: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(actor output [B, A] logits or [B, D] means, value [B])``."""
        x = _normalize(self._split(to_float(obs)), self.obs_rms)
        value = self.critic(self._critic_input(x, critic_obs)).squeeze(-1)
        return self._merge(self.actor(x)), self._merge(value)

    def _heads(self, obs: Tensor, critic_obs: Tensor | None) -> tuple[Tensor, Tensor]:
        """``forward``; without ``critic_obs`` for critics that need it, zero values (players and exports)."""
        if self.critic_obs_dim and critic_obs is None:
            out = self._merge(self.actor(_normalize(self._split(to_float(obs)), self.obs_rms)))
            return out, torch.zeros(out.shape[0], dtype=out.dtype, device=out.device)
        return self(obs, critic_obs)

    def _log_std(self, rows: int) -> Tensor:
        """``[B, D]``: each row's agent's log-std."""
        return self.log_std.repeat(rows // self.num_agents, 1)

    def act(self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
            deterministic: bool = False, noise: Tensor | None = None,
            critic_obs: Tensor | None = None) -> PolicyOutput:
        """Each row's agent's action (sampled, or its most probable / mean one if ``deterministic``)."""
        out, value = self._heads(obs, critic_obs)
        if not self.is_continuous:
            return PolicyOutput(*D.categorical_act(out, action_mask, generator, deterministic, noise), value)
        log_std = self._log_std(out.shape[0])
        action = out if deterministic else D.gaussian_sample(out, log_std, generator, noise)
        return PolicyOutput(action, D.gaussian_log_prob(out, log_std, action), value)

    def evaluate(self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None,
                 critic_obs: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob [B], entropy [B], value [B])`` of given actions."""
        out, value = self(obs, critic_obs)
        if not self.is_continuous:
            return (*D.categorical_log_prob_entropy(out, action_mask, action), value)
        log_std = self._log_std(out.shape[0])
        return D.gaussian_log_prob(out, log_std, action), D.gaussian_entropy(log_std, value.shape), value

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        """``[B]`` each row's agent's critic estimate."""
        return self(obs, critic_obs)[1]

    def update_normalizer(self, obs: Tensor, weight: Tensor | None = None, critic_obs: Tensor | None = None) -> None:
        """Merge each agent's rows (``[..., O]``, rows agent-minor) into its own statistics."""
        m = self.num_agents
        w = None if weight is None else weight.reshape(-1, m)
        for stats, x in ((self.obs_rms, obs), (self.critic_obs_rms, critic_obs)):
            if stats is None or x is None:
                continue
            x = to_float(x).reshape(-1, m, x.shape[-1])
            for k, s in enumerate(stats):
                s.update(x[:, k], None if w is None else w[:, k])

    def agent(self, m: int) -> nn.Module:
        """Agent m's networks as a plain :class:`ActorCritic` / :class:`GaussianActorCritic` (copies)."""
        if not 0 <= m < self.num_agents:
            raise ValueError(f"agent must be in [0, {self.num_agents}), got {m}")
        sizes = dict(hidden_sizes=self.hidden_sizes, normalize_obs=self.normalize_obs,
                     critic_obs_dim=self.critic_obs_dim)
        if self.is_continuous:
            plain = GaussianActorCritic(self.obs_dim, self.action_dim, init_log_std=self.init_log_std, **sizes)
        else:
            plain = ActorCritic(self.obs_dim, self.num_actions, **sizes)
        plain = plain.to(self.actor.layers[0].weight.device)
        with torch.no_grad():
            for stacked, net in ((self.actor, plain.actor), (self.critic, plain.critic)):
                linears = [layer for layer in net if isinstance(layer, nn.Linear)]
                for (weight, bias), linear in zip(stacked.member(m), linears, strict=True):
                    linear.weight.copy_(weight)
                    linear.bias.copy_(bias)
            for stats, own in ((self.obs_rms, plain.obs_rms), (self.critic_obs_rms, plain.critic_obs_rms)):
                if stats is not None:
                    own.load_state_dict(stats[m].state_dict())
            if self.is_continuous:
                plain.log_std.copy_(self.log_std[m])
        return plain

    def export_module(self):
        """Refused: an export is one agent's actor (:meth:`agent`), one file per agent."""
        raise ValueError(f"this policy has one network per agent ({self.num_agents}); export each agent's actor: "
                         "policy.agent(m).export_module() (rl-gpu export writes one file per agent)")

    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the networks from a checkpoint."""
        sizes = ({"action_dim": self.action_dim, "init_log_std": self.init_log_std} if self.is_continuous
                 else {"num_actions": self.num_actions})
        extra = {"critic_obs_dim": self.critic_obs_dim} if self.critic_obs_dim else {}
        return {"kind": "per_agent", "obs_dim": self.obs_dim, "num_agents": self.num_agents, **sizes,
                "hidden_sizes": list(self.hidden_sizes), "normalize_obs": self.normalize_obs, **extra}
