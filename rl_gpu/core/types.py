"""What the layers say to each other: the result of an environment step, the description of a task
(:class:`EnvSpec`), the environment protocols, and what a policy's decision looks like.

Shape legend: N = ``num_envs``, A = ``num_actions``, P = ``num_players``, O = observation shape,
D = continuous action dimensions, M = ``num_agents`` (agents acting at once in one row; an environment with
M > 1 has an agent axis after N in ``obs``, ``action``, ``action_mask``, ``reward`` and ``episode_return``,
while ``terminated``, ``truncated`` and ``episode_length`` stay per world).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor


class StepResult(NamedTuple):
    """What one ``reset`` or ``step`` returns. Every field has leading dimension N.

    The flags describe the transition just taken; ``obs``, ``action_mask`` and ``current_player`` describe
    the state the next action is chosen in (after auto-reset). Fields may share memory with the environment's
    state (no copies on the hot path): treat them as read-only and ``clone()`` before modifying one in place.
    """

    obs: Tensor
    """``[N, *O]`` float32: observation of the player to act next, after auto-reset."""
    reward: Tensor
    """``[N]`` float32 (``[N, P]`` for P > 1 players, one column per seat): reward of this transition.
    Zero on reset and for frozen rows."""
    terminated: Tensor
    """``[N]`` bool: the transition reached a terminal state of the game (no bootstrap after it)."""
    truncated: Tensor
    """``[N]`` bool: the episode was cut by the time limit without terminating (bootstrap from
    ``final_obs``). Never True together with ``terminated``."""
    final_obs: Tensor
    """``[N, *O]``: the observation reached by the transition, before any reset. Equals ``obs`` in rows
    that did not finish."""
    action_mask: Tensor
    """``[N, A]`` bool: True = legal in ``obs``. At least one True per row."""
    current_player: Tensor
    """``[N]`` int64: the seat that acts next (always 0 for single-player environments)."""
    episode_return: Tensor
    """``[N]`` (``[N, P]``) float32: return of the episode that just ended; meaningful where done."""
    episode_length: Tensor
    """``[N]`` int64: length in steps of the episode that just ended; meaningful where done."""
    critic_obs: Tensor | None = None
    """``[N, C]`` float32 privileged observation of the ``critic`` group (after auto-reset, like ``obs``), only
    for environments whose ``spec.obs_groups`` has ``critic``; None otherwise."""
    final_critic_obs: Tensor | None = None
    """``[N, C]``: the ``critic`` group's observation reached by the transition, before any reset (what
    ``final_obs`` is to ``obs``); None without a ``critic`` group."""
    acting: Tensor | None = None
    """``[N, M]`` bool: the agents that act in the state ``obs`` describes, for environments with M > 1 agents
    acting at once (``obs`` ``[N, M, *O]``, ``action_mask`` ``[N, M, A]``, ``reward`` ``[N, M]``); None for
    M = 1."""

    @property
    def done(self) -> Tensor:
        """``[N]`` bool: ``terminated | truncated``."""
        return self.terminated | self.truncated


class Mirror(NamedTuple):
    """A task's left-right symmetry as permutations with signs of the last axis: the mirror image of ``x`` is
    ``x[..., index] * sign`` for the observation, the action and (when the task has one) the ``critic`` group.
    Each is an involution: mirroring twice gives ``x`` back. Rewards and dynamics are mirror-symmetric."""

    obs_index: tuple[int, ...]
    obs_sign: tuple[float, ...]
    action_index: tuple[int, ...]
    action_sign: tuple[float, ...]
    critic_index: tuple[int, ...] = ()
    critic_sign: tuple[float, ...] = ()


@dataclass(frozen=True)
class EnvSpec:
    """What a batch of environments is, as everything above the environment layer sees it: networks are sized
    from it, collectors choose their mode from it, interop builds spaces from it. No capability is read by
    ``hasattr``: it is declared here."""

    obs_shape: tuple[int, ...]
    """Shape of one observation of the ``policy`` group."""
    num_actions: int = 0
    """A, discrete actions (0 for continuous-action environments)."""
    action_shape: tuple[int, ...] = ()
    """``()`` for discrete actions, ``(D,)`` for continuous ones."""
    action_low: tuple[float, ...] = ()
    """Continuous actions: per-dimension lower bound (empty: unbounded)."""
    action_high: tuple[float, ...] = ()
    """Continuous actions: per-dimension upper bound (empty: unbounded)."""
    obs_low: tuple[float, ...] | None = None
    """Flat per-element lower bound of observations, when the environment has one."""
    obs_high: tuple[float, ...] | None = None
    """Flat per-element upper bound of observations, when the environment has one."""
    obs_groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Observation groups by name (``policy`` always; e.g. ``critic`` for privileged observations that only a
    centralised critic sees: the value function then reads ``concat(policy obs, critic obs)``, and every
    :class:`StepResult` carries ``critic_obs``). Empty means ``{"policy": obs_shape}``."""
    num_players: int = 1
    """P: 1 for single-agent tasks; 2 for two-player turn-based games (one seat acts per step)."""
    num_agents: int = 1
    """M, agents acting at once in one row (a world): with M > 1, observations, actions, legal masks and rewards
    carry an agent axis ``[N, M, ...]`` and ``StepResult.acting`` says which agents act; episodes end per world.
    ``obs_shape`` and the action shapes are one agent's."""
    max_episode_steps: int | None = None
    """Time limit in steps (``truncated`` when reached), or None."""
    episode_horizon: int | None = None
    """Steps that let every episode finish from a reset (the longest game, or the time limit); None when
    episodes are unbounded."""
    has_action_mask: bool = False
    """Some actions can be illegal: ``action_mask`` is meaningful and actions must respect it."""
    functional: bool = False
    """The environment offers the pure step of :class:`FunctionalEnv`, so collection can be compiled and
    captured in a CUDA graph; False for host-stepped engines."""
    exact_resume: bool = False
    """``state_dict`` / ``load_state_dict`` restore the environments exactly (else a resume restarts them)."""
    reward_terms: tuple[str, ...] = ()
    """Names of the terms the reward sums (robot tasks); when given, the environment's
    ``reward_term_stats()`` returns each term's mean sum per episode finished since its last call."""
    obs_dtypes: dict[str, str] = field(default_factory=dict)
    """The dtype of each observation group, by torch name (``float32`` where unnamed): ``uint8`` pixels or
    ``bool`` bit planes stay so in rollouts and replay (a quarter or less of float32's memory) and networks
    convert them to float32 at their input."""
    mirror: Mirror | None = None
    """The task's left-right symmetry, when it declares one (PPO's ``--symmetry`` learns from mirrored
    rollouts)."""
    num_tasks: int = 0
    """K > 0: a batch of K tasks whose observation ends with the one-hot of each row's task
    (:mod:`rl_gpu.envs.multitask`), which a multi-head policy reads to choose its head; 0 otherwise."""

    def __post_init__(self) -> None:
        if not self.obs_groups:
            object.__setattr__(self, "obs_groups", {"policy": tuple(self.obs_shape)})
        unknown = set(self.obs_dtypes) - set(self.obs_groups)
        if unknown:
            raise ValueError(f"obs_dtypes names groups the spec does not have: {sorted(unknown)}")
        for group, name in self.obs_dtypes.items():
            if not isinstance(getattr(torch, str(name), None), torch.dtype):
                raise ValueError(f"obs_dtypes[{group!r}] is {name!r}, not a torch dtype name (float32, uint8, bool)")

    def obs_dtype(self, group: str = "policy") -> torch.dtype:
        """The dtype of observation group ``group`` (float32 unless the environment says otherwise)."""
        return getattr(torch, self.obs_dtypes.get(group, "float32"))

    @property
    def is_continuous(self) -> bool:
        return len(self.action_shape) > 0

    @property
    def obs_size(self) -> int:
        """Elements of one flat observation."""
        return int(math.prod(self.obs_shape))

    @property
    def critic_obs_size(self) -> int:
        """Elements of one flat ``critic`` group observation (0 when the environment has no such group)."""
        shape = self.obs_groups.get("critic")
        return int(math.prod(shape)) if shape is not None else 0

    @property
    def action_size(self) -> int:
        """D for continuous actions, A for discrete ones."""
        return int(math.prod(self.action_shape)) if self.is_continuous else self.num_actions

    def policy_only(self) -> EnvSpec:
        """This spec with its ``policy`` observation group alone: what a network that reads no privileged
        observations (IPPO's critics, a distilled student) is sized from."""
        return replace(self, obs_groups={"policy": tuple(self.obs_shape)},
                       obs_dtypes={k: v for k, v in self.obs_dtypes.items() if k == "policy"})


class VecEnv(Protocol):
    """The environment protocol: N environments stepped together, tensors in and out on ``device``.

    Implemented by :class:`rl_gpu.envs.base.TensorEnv` (pure tensor maths), by
    :class:`rl_gpu.envs.gymnasium_env.GymnasiumEnv` (stepped by Gymnasium on the host), and by any engine that
    holds its own state (a physics engine on CPU threads or on the GPU).
    """

    num_envs: int
    device: torch.device

    @property
    def spec(self) -> EnvSpec: ...

    def reset(self, seed: int | None = None) -> StepResult: ...

    def reset_rows(self, rows: Tensor) -> StepResult:
        """Start new episodes in the rows where ``rows`` (``[N]`` bool) is True."""

    def step(self, action: Tensor) -> StepResult: ...

    def observe(self) -> StepResult:
        """The current state as a zero-reward step, without a transition."""

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values that :meth:`load_state_dict` restores (``spec.exact_resume`` says whether
        exactly)."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class FunctionalEnv(VecEnv, Protocol):
    """A :class:`VecEnv` whose step is a pure function of tensors (``spec.functional``): what compiled and
    CUDA-graph collection needs. Randomness is drawn outside the step (:meth:`draw_starts`)."""

    state: Any
    generator: torch.Generator

    def draw_starts(self, num_envs: int) -> Any:
        """Fresh episode starts for ``num_envs`` rows (the only randomness), as the env's inner state."""

    def initial_state(self, inner: Any) -> Any:
        """The full state of a batch starting from ``inner`` (episode counters at zero)."""

    def timestep(self, state: Any) -> StepResult:
        """A zero-reward step describing ``state`` as it is."""

    def step_state(self, state: Any, action: Tensor, reset_inner: Any) -> tuple[Any, StepResult]:
        """The pure batched step; ``reset_inner`` holds a fresh start for every row."""


class PolicyOutput(NamedTuple):
    """What a policy decided for one batch of observations."""

    action: Tensor
    """``[N]`` int64 (discrete) or ``[N, D]`` float32 (continuous, as sampled, before any clipping)."""
    log_prob: Tensor
    """``[N]`` log-probability of ``action`` under the policy that chose it."""
    value: Tensor
    """``[N]`` critic estimate V(obs) (zeros for a policy without a critic, and for a policy whose critic needs
    privileged observations that were not given)."""


class Actor(Protocol):
    """Anything that picks actions for a batch of observations (policies and opponents)."""

    is_continuous: bool

    def act(
        self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
        deterministic: bool = False, noise: Tensor | None = None,
    ) -> PolicyOutput:
        """A policy sized for a ``critic`` observation group also takes ``critic_obs=`` (``[N, C]``) here and
        in :meth:`value`; collectors pass it only when the environment has the group."""

    def value(self, obs: Tensor) -> Tensor: ...
