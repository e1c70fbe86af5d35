"""Actor-critic networks: a masked categorical head for discrete actions, a Gaussian head for continuous ones.

Shape legend: N = batch rows, O = observation size, A = discrete actions, D = continuous action dimensions.
Both classes share one interface, which is all that rollouts and updates use:

- ``act(obs, action_mask, generator, deterministic, noise) -> PolicyOutput(action, log_prob, value)``; ``noise``
  (pre-drawn with :func:`rl_gpu.nn.distributions.categorical_noise` or ``gaussian_noise``) replaces ``generator``
  so that compiled code holds no random-number generation
- ``evaluate(obs, action, action_mask) -> (log_prob, entropy, value)``
- ``value(obs) -> [N]``

Asymmetric actor-critic: built with ``critic_obs_dim`` C > 0 (an environment with a ``critic`` observation group,
see :func:`policy_for_env`), the critic reads ``concat(obs, critic_obs)`` (``[N, O + C]``) while the actor reads
``obs`` alone; ``act``, ``evaluate`` and ``value`` then take ``critic_obs=`` (``[N, C]``). With
``normalize_obs`` the privileged part has its own running statistics (``critic_obs_rms``). ``act`` without
``critic_obs`` still acts (the actor needs none; exports and players use it so) and reports a zero value.

World critic (``world_agents`` M > 1, MAPPO's ``--world-critic``): rows come in groups of M, agent-minor (row ``r``
is agent ``r % M`` of its world, as agent rollouts flatten), every row of a world carrying the same ``critic_obs``;
the critic reads that group alone, once per world, and its M outputs are the world's agents' values. The same
values as M per-agent critics could give, for ``1 / M`` of their arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rl_gpu.core.types import EnvSpec, PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.cpu_kernels import takes_bool_frames
from rl_gpu.nn.deploy import DeployedActor
from rl_gpu.nn.layers import mlp
from rl_gpu.nn.normalization import RunningMeanStd, to_float


class _ActorCriticBase(nn.Module):
    """What both heads share: optional observation normalisation and the critic."""

    def _init_base(
        self, obs_dim: int, hidden_sizes: Sequence[int], normalize_obs: bool, out_name: str, out_size: int,
        critic_obs_dim: int = 0, world_agents: int = 0,
    ) -> None:
        """Validate the sizes, then build the normaliser, the critic and the actor (``out_size`` outputs)."""
        if obs_dim <= 0 or out_size <= 0 or any(h <= 0 for h in hidden_sizes):
            raise ValueError(
                f"obs_dim, {out_name} and hidden sizes must be positive, got {obs_dim}, {out_size}, "
                f"{tuple(hidden_sizes)}"
            )
        if critic_obs_dim < 0:
            raise ValueError(f"critic_obs_dim must be >= 0, got {critic_obs_dim}")
        if world_agents and (world_agents < 2 or not critic_obs_dim):
            raise ValueError(f"a world critic reads a critic group (critic_obs_dim > 0) of a world of several agents "
                             f"(world_agents >= 2), got critic_obs_dim={critic_obs_dim}, world_agents={world_agents}")
        self.world_agents = world_agents
        self.obs_dim = obs_dim
        self.critic_obs_dim = critic_obs_dim
        self.hidden_sizes = tuple(hidden_sizes)
        self.normalize_obs = normalize_obs
        self.obs_rms = RunningMeanStd(obs_dim) if normalize_obs else None
        self.critic_obs_rms = RunningMeanStd(critic_obs_dim) if normalize_obs and critic_obs_dim else None
        self.critic = (mlp(critic_obs_dim, hidden_sizes, world_agents, out_gain=1.0) if world_agents
                       else mlp(obs_dim + critic_obs_dim, hidden_sizes, 1, out_gain=1.0))
        self.actor = mlp(obs_dim, hidden_sizes, out_size, out_gain=0.01)

    def preprocess(self, obs: Tensor) -> Tensor:
        """The network input: ``obs`` normalised by the running statistics, when enabled; boolean frames stay
        boolean for networks that take them (:meth:`takes_bool_frames`)."""
        if obs.dtype == torch.bool and self.takes_bool_frames():
            return obs
        obs = to_float(obs)
        return self.obs_rms(obs) if self.obs_rms is not None else obs

    def takes_bool_frames(self) -> bool:
        """Boolean observations enter the actor and critic as they are (their first layers then sum the weights
        of the set cells, :mod:`rl_gpu.nn.frame_kernels`): both networks take them
        (:func:`~rl_gpu.nn.cpu_kernels.takes_bool_frames`), with no normaliser and no privileged critic group."""
        return (self.obs_rms is None and not self.critic_obs_dim and takes_bool_frames(self.actor)
                and takes_bool_frames(self.critic))

    def _critic_value(self, x: Tensor, critic_obs: Tensor | None) -> Tensor:
        """``[...]`` values from the preprocessed policy observation ``x``: the critic on ``x`` itself, on
        ``concat(x, normalised critic_obs)`` for a policy with a ``critic`` group, or (a world critic) on each
        world's group once, its M outputs spread back over the world's rows."""
        if not self.critic_obs_dim:
            return self.critic(x).squeeze(-1)
        if critic_obs is None:
            raise ValueError(f"this policy's critic reads {self.critic_obs_dim} privileged observations "
                             "(the environment's critic group): pass critic_obs")
        critic_obs = to_float(critic_obs)
        if self.critic_obs_rms is not None:
            critic_obs = self.critic_obs_rms(critic_obs)
        if not self.world_agents:
            return self.critic(torch.cat([x, critic_obs], dim=-1)).squeeze(-1)
        m, rows = self.world_agents, critic_obs.shape[:-1]
        if not rows.numel() or rows.numel() % m:
            raise ValueError(f"a world critic takes rows in groups of the world's {m} agents (row r is agent r % {m} "
                             f"of its world), got {rows.numel()} rows")
        return self.critic(critic_obs.reshape(-1, m, critic_obs.shape[-1])[:, 0]).reshape(rows)

    def _heads(self, obs: Tensor, critic_obs: Tensor | None) -> tuple[Tensor, Tensor]:
        """``forward``, except that a policy with a ``critic`` group given no ``critic_obs`` reports zero values
        (what ``act`` does for players and exports, which need only the actor)."""
        if self.critic_obs_dim and critic_obs is None:
            x = self.preprocess(obs)
            return self.actor(x), torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
        return self(obs, critic_obs)

    def update_normalizer(
        self, obs: Tensor, weight: Tensor | None = None, critic_obs: Tensor | None = None
    ) -> None:
        """Merge a rollout's observations (``[..., O]``, rows weighted by ``weight``; ``critic_obs``
        ``[..., C]`` too for a policy with a ``critic`` group) into the running statistics (no-op when
        disabled).

        Called after the update that used the rollout, so each rollout is collected and learned from under
        one fixed normalisation (the PPO ratio starts at exactly 1).
        """
        if self.obs_rms is not None:
            self.obs_rms.update(to_float(obs), weight)
        if self.critic_obs_rms is not None and critic_obs is not None:
            self.critic_obs_rms.update(to_float(critic_obs), weight)

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        """``[N]`` critic estimate for ``[N, O]`` observations (and ``[N, C]`` privileged ones, for a policy with
        a ``critic`` group)."""
        return self._critic_value(self.preprocess(obs), critic_obs)

    def forward(self, obs: Tensor, critic_obs: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(actor output [N, A] logits (unmasked) or [N, D] Gaussian mean, value [N])``."""
        x = self.preprocess(obs)
        return self.actor(x), self._critic_value(x, critic_obs)

    def export_module(self) -> DeployedActor:
        """The deterministic action (the legal argmax, or the Gaussian's mean) as plain PyTorch, the normaliser
        folded in."""
        sizes = {"action_dim": self.action_dim} if self.is_continuous else {"num_actions": self.num_actions}
        return DeployedActor(self.actor, self.obs_dim, obs_rms=self.obs_rms, **sizes)

    def _config_extra(self) -> dict:
        """Config entries of an asymmetric or world critic (none otherwise: such checkpoints are unchanged)."""
        extra = {"critic_obs_dim": self.critic_obs_dim} if self.critic_obs_dim else {}
        return {**extra, "world_agents": self.world_agents} if self.world_agents else extra


class ActorCritic(_ActorCriticBase):
    """Separate actor and critic MLPs; the actor's categorical head never puts mass on illegal actions.

    Args:
        obs_dim: O, the size of a flat observation.
        num_actions: A, the number of discrete actions.
        hidden_sizes: widths of the hidden tanh layers of each network.
    """

    is_continuous = False

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden_sizes: Sequence[int] = (64, 64),
        normalize_obs: bool = False,
        critic_obs_dim: int = 0,
        world_agents: int = 0,
    ) -> None:
        super().__init__()
        self._init_base(obs_dim, hidden_sizes, normalize_obs, "num_actions", num_actions, critic_obs_dim, world_agents)
        self.num_actions = num_actions

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor | None = None,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        noise: Tensor | None = None,
        critic_obs: Tensor | None = None,
    ) -> PolicyOutput:
        """Choose one legal action per row: sampled (from ``noise``, ``[N, A]`` uniform, when given), or the most
        probable legal one if ``deterministic``."""
        return self.act_from(*self._heads(obs, critic_obs), action_mask, generator, deterministic, noise)

    def act_from(
        self, logits: Tensor, value: Tensor, action_mask: Tensor | None = None,
        generator: torch.Generator | None = None, deterministic: bool = False, noise: Tensor | None = None,
    ) -> PolicyOutput:
        """:meth:`act` after the networks, from their outputs (``[..., A]`` logits, ``[...]`` values): what a
        population that runs its members' networks itself samples with."""
        return PolicyOutput(*D.categorical_act(logits, action_mask, generator, deterministic, noise), value)

    def evaluate(
        self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None, critic_obs: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob [N], entropy [N], value [N])`` of given actions, under the same mask as sampling."""
        logits, value = self(obs, critic_obs)
        log_prob, entropy = D.categorical_log_prob_entropy(logits, action_mask, action)
        return log_prob, entropy, value

    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the network from a checkpoint."""
        return {"kind": "categorical", "obs_dim": self.obs_dim, "num_actions": self.num_actions,
                "hidden_sizes": list(self.hidden_sizes), "normalize_obs": self.normalize_obs,
                **self._config_extra()}


class GaussianActorCritic(_ActorCriticBase):
    """Actor-critic for continuous actions: a diagonal Gaussian with a learned, state-independent log-std.

    The log-probability is that of the action actually sampled (before clipping to the action bounds);
    environments clip out-of-bounds actions themselves, as Gymnasium's do.

    Args:
        obs_dim: O, the size of a flat observation.
        action_dim: D, the number of action dimensions.
        hidden_sizes: widths of the hidden tanh layers of each network.
        init_log_std: initial log standard deviation of every action dimension.
    """

    is_continuous = True

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int] = (64, 64),
        init_log_std: float = 0.0,
        normalize_obs: bool = False,
        critic_obs_dim: int = 0,
        world_agents: int = 0,
    ) -> None:
        super().__init__()
        self._init_base(obs_dim, hidden_sizes, normalize_obs, "action_dim", action_dim, critic_obs_dim, world_agents)
        self.action_dim = action_dim
        self.init_log_std = init_log_std
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor | None = None,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        noise: Tensor | None = None,
        critic_obs: Tensor | None = None,
    ) -> PolicyOutput:
        """Sample an action (from ``noise``, ``[N, D]`` standard normal, when given), or take the mean if
        ``deterministic``; ``action_mask`` is ignored."""
        return self.act_from(*self._heads(obs, critic_obs), action_mask, generator, deterministic, noise)

    def act_from(
        self, mean: Tensor, value: Tensor, action_mask: Tensor | None = None,
        generator: torch.Generator | None = None, deterministic: bool = False, noise: Tensor | None = None,
        log_std: Tensor | None = None,
    ) -> PolicyOutput:
        """:meth:`act` after the networks, from their outputs (``[..., D]`` mean, ``[...]`` values), with
        ``log_std`` (broadcast to ``mean``) in place of this policy's own when given: what a population that
        runs its members' networks itself samples with."""
        log_std = self.log_std if log_std is None else log_std
        action = mean if deterministic else D.gaussian_sample(mean, log_std, generator, noise)
        return PolicyOutput(action, D.gaussian_log_prob(mean, log_std, action), value)

    def evaluate(
        self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None, critic_obs: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob [N], entropy [N], value [N])`` of given actions."""
        mean, value = self(obs, critic_obs)
        return (
            D.gaussian_log_prob(mean, self.log_std, action),
            D.gaussian_entropy(self.log_std, value.shape),
            value,
        )

    def config(self) -> dict:
        """Constructor arguments, enough to rebuild the network from a checkpoint."""
        return {"kind": "gaussian", "obs_dim": self.obs_dim, "action_dim": self.action_dim,
                "hidden_sizes": list(self.hidden_sizes), "init_log_std": self.init_log_std,
                "normalize_obs": self.normalize_obs, **self._config_extra()}


def build_policy(config: dict) -> nn.Module:
    """Rebuild a policy from its :meth:`config` dictionary (as stored in checkpoints), through the registry of
    policy kinds (:mod:`rl_gpu.nn.kinds`)."""
    from rl_gpu.nn.kinds import build_policy as build

    return build(config)


def policy_for_env(
    spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64), normalize_obs: bool = False, init_log_std: float = 0.0,
    kind: str = "auto", memory_size: int = 0, lstm: bool = False, world_agents: int = 0,
) -> nn.Module:
    """A fresh actor-critic sized for an environment's :class:`~rl_gpu.core.types.EnvSpec` (flat
    observations); with a ``critic`` observation group, the critic reads ``concat(policy obs, critic obs)``.
    ``kind``: a registered policy kind (:mod:`rl_gpu.nn.kinds`) to build instead; ``auto``: categorical for
    discrete actions, Gaussian for continuous ones, and the ``composed`` kind (:mod:`rl_gpu.nn.composed`: a CNN
    for frames) for observations that are not vectors. ``memory_size`` > 0: the composed policy with a GRU (an
    LSTM with ``lstm``) of that size (``kind`` auto or composed). ``world_agents`` M: a world critic over the
    ``critic`` group (module docstring; ``kind`` auto over vector observations, no memory)."""
    if world_agents and (memory_size or kind != "auto" or len(spec.obs_shape) != 1):
        raise ValueError("a world critic is built on the plain MLP actor-critics (--policy auto, vector observations, "
                         f"no --memory), got --policy {kind}, observations {tuple(spec.obs_shape)}"
                         + (" with --memory" if memory_size else ""))
    if memory_size:
        if kind not in ("auto", "composed"):
            raise ValueError(f"a policy with memory is the composed kind, not {kind!r}")
        from rl_gpu.nn.composed import composed_for_env

        return composed_for_env(spec, hidden_sizes, normalize_obs, init_log_std, memory_size=memory_size, lstm=lstm)
    if kind == "auto" and len(spec.obs_shape) != 1 and "critic" not in spec.obs_groups:
        kind = "composed"  # observations that are not vectors need an encoder (frames: a CNN)
    if kind != "auto":
        from rl_gpu.nn.kinds import policy_kind

        return policy_kind(kind).for_environment(spec, hidden_sizes, normalize_obs, init_log_std)
    critic = spec.critic_obs_size
    if spec.is_continuous:
        return GaussianActorCritic(spec.obs_size, spec.action_size, hidden_sizes, init_log_std, normalize_obs,
                                   critic_obs_dim=critic, world_agents=world_agents)
    return ActorCritic(spec.obs_size, spec.num_actions, hidden_sizes, normalize_obs, critic_obs_dim=critic,
                       world_agents=world_agents)


def mlp_for_env(spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64), normalize_obs: bool = False,
                init_log_std: float = 0.0) -> nn.Module:
    """``--policy categorical`` or ``gaussian``: an actor MLP and a critic MLP over the observation. Observations
    that are not vectors (frames) are flattened: the composed policy with no convolution, whose two tanh MLPs read
    the flattened frame (no CNN, which ``--policy auto`` would give them)."""
    if len(spec.obs_shape) == 1:
        return policy_for_env(spec, hidden_sizes, normalize_obs, init_log_std)
    from rl_gpu.nn.composed import composed_for_env

    return composed_for_env(spec, hidden_sizes, normalize_obs, init_log_std, cnn=False)


class UniformRandomPolicy:
    """Uniform over the legal actions; the default opponent of turn-based games. Has no parameters and no
    value."""

    is_continuous = False

    def act(
        self,
        obs: Tensor,
        action_mask: Tensor,
        generator: torch.Generator | None = None,
        deterministic: bool = False,
        noise: Tensor | None = None,
        critic_obs: Tensor | None = None,
    ) -> PolicyOutput:
        logits = torch.zeros(action_mask.shape, device=obs.device)
        action = D.categorical_sample(logits, action_mask, generator, noise)
        zeros = torch.zeros(obs.shape[0], device=obs.device)
        return PolicyOutput(action, D.categorical_log_prob(logits, action_mask, action), zeros)

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        """``[N]`` zeros: a random player has no critic."""
        return torch.zeros(obs.shape[0], device=obs.device)
