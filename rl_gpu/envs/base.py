"""The tensor-environment contract: N independent environments stepped as one batch on one device.

Shape legend: N = ``num_envs``, A = ``num_actions``, P = ``num_players``, O = ``obs_shape``.

A subclass writes only its game or physics as pure tensor functions over a ``NamedTuple`` of ``[N, ...]``
tensors (its *inner* state):

- ``_sample_initial_state(num_envs, generator)`` draws fresh episode starts (this is the only randomness),
- ``_transition(inner, action)`` returns ``(next_inner, reward, terminated)``,
- ``_observe(inner)`` returns the observation of the player about to act,
- ``_legal_actions(inner)`` (optional) and ``_current_player(inner)`` (turn-based games),
- ``_observe_critic(inner)`` (optional, with :attr:`TensorEnv.critic_obs_shape`): privileged observations of a
  ``critic`` group, which only a centralised critic sees (``StepResult.critic_obs``),
- ``_carry(finished, fresh)`` (optional): the fresh start a row takes given how its episode ended (a curriculum's
  next level); default: the fresh start as drawn.

Several agents acting at once in one world (:attr:`TensorEnv.num_agents` M > 1): ``_observe`` returns
``[N, M, *O]``, actions arrive as ``[N, M]`` (``[N, M, D]``), ``_legal_actions`` returns ``[N, M, A]`` and the
reward ``[N, M]``; ``terminated`` stays ``[N]`` (a world ends for all its agents), and ``_acting(inner)``
(optional; default: every agent) says which agents act.

The base class owns everything that must be identical across environments: same-step auto-reset with the
pre-reset observation kept in ``final_obs``, the time limit (``truncated``), frozen finished rows when
auto-reset is off, episode statistics kept on the device, action validation, and reading/injecting state.
Nothing in :meth:`TensorEnv.step_state` synchronises with the host: no ``.item()``, no ``nonzero()``, no
boolean-index writes; rows are reset with ``torch.where``.

Per-row parameters (masses, frictions, goal positions: domain randomisation) belong in the inner state, drawn by
``_sample_initial_state`` with the rest of an episode's start: a reset row then gets new parameters through the
same ``torch.where`` as its new position, and state injection and checkpoints carry them.

A :class:`TensorEnv` implements :class:`~rl_gpu.core.types.FunctionalEnv` (and so
:class:`~rl_gpu.core.types.VecEnv`): ``draw_starts``, ``initial_state``, ``timestep`` and ``step_state`` are the
pure pieces compiled collection is built from.
"""

from __future__ import annotations

import abc
from typing import Any, Generic, NamedTuple

import torch
from torch import Tensor

from rl_gpu.core.pytree import tree_where
from rl_gpu.core.types import EnvSpec, Mirror, StepResult
from rl_gpu.core.device import check_device
from rl_gpu.envs.actions import check_action_format, check_action_range, check_action_values
from rl_gpu.envs.params import build_params, check_like, check_num_envs, check_params, check_starts
from rl_gpu.envs.rows import Inner, select_rows, stack_float32

__all__ = ["EnvState", "TensorEnv", "check_action_format", "select_rows", "stack_float32"]

class EnvState(NamedTuple, Generic[Inner]):
    """The full state of a batch: the subclass's inner state plus what the base class tracks."""

    inner: Inner
    """The subclass's ``NamedTuple`` of ``[N, ...]`` tensors."""
    episode_step: Tensor
    """``[N]`` int64: steps taken in the current episode."""
    episode_return: Tensor
    """``[N]`` (``[N, P]``) float32: reward summed over the current episode."""
    done: Tensor
    """``[N]`` bool: the row has finished and is frozen (only ever True when auto-reset is off)."""


class TensorEnv(abc.ABC, Generic[Inner]):
    """A batch of ``num_envs`` independent environments whose state lives in tensors on ``device``.

    Args:
        num_envs: N, the number of environments (rows).
        device: where every tensor of the batch lives.
        seed: seeds the environment's own ``torch.Generator`` (reset randomness only).
        autoreset: if True (default), a row that finishes is reset in the same ``step`` call and
            ``final_obs`` keeps the observation it finished in. If False, finished rows stay frozen
            (their actions are ignored, rewards are zero, flags stay False) until :meth:`reset_rows`.
        validate_actions: check every action's range and legality in :meth:`step`. Each check reads a
            value back to the host, so the trainer turns it off in its hot loop; shape, dtype and device
            are always checked (free).
        **params: fields of :attr:`params_type` to override.
    """

    obs_shape: tuple[int, ...]
    """Shape of one observation."""
    num_actions: int = 0
    """A, the number of discrete actions (0 for continuous-action environments)."""
    action_shape: tuple[int, ...] = ()
    """Shape of one action: ``()`` for discrete actions, ``(D,)`` for continuous ones."""
    action_low: tuple[float, ...] = ()
    """Continuous actions only: per-dimension lower bound (length D)."""
    action_high: tuple[float, ...] = ()
    """Continuous actions only: per-dimension upper bound (length D)."""
    num_players: int = 1
    """P: 1 for single-agent tasks; 2 for two-player turn-based games."""
    num_agents: int = 1
    """M: agents acting at once in one world (1: no agent axis; see the module docstring for M > 1)."""
    max_episode_steps: int | None = None
    """Time limit in steps (``truncated`` when reached), or None for none."""
    max_game_length: int | None = None
    """Turn-based games: the most steps a game can last (every game ends by itself within it)."""
    obs_low: tuple[float, ...] | None = None
    """Flat per-element lower bound of observations, when there is one."""
    obs_high: tuple[float, ...] | None = None
    """Flat per-element upper bound of observations, when there is one."""
    obs_dtype: torch.dtype = torch.float32
    """dtype of observations (``torch.uint8`` pixels, ``torch.bool`` bit planes stay so in storage)."""
    critic_obs_shape: tuple[int, ...] | None = None
    """Shape of one observation of the ``critic`` group (privileged state for an asymmetric actor-critic), when
    the environment has one: it then writes :meth:`_observe_critic`. None: no such group."""
    mirror: Mirror | None = None
    """The task's left-right symmetry (:class:`~rl_gpu.core.types.Mirror`), when it has one."""
    row_params: bool = False
    """Its methods read ``self.params`` only in tensor arithmetic, so a numeric field may be a ``[N]`` float64 tensor
    (a value per row): a batch of parameter variants then steps every row in one call (:mod:`rl_gpu.envs.multitask`;
    declared only where tested equal to stepping each variant apart; a subclass declares it again, it is not
    inherited)."""
    compile_simd: bool = True
    """Whether a compiled step of this environment keeps Inductor's SIMD CPU kernels throughout; False for integer
    and boolean grid games, whose loops run faster unvectorised: a unit stepping one keeps SIMD for its float loops
    only, a policy's layers (:mod:`rl_gpu.runtime.inductor_loops`)."""
    params_type: type | None = None
    """A frozen dataclass of physical or game parameters; constructor keyword arguments override its fields
    and the result is ``self.params``. None: the environment takes no parameters."""

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        *,
        autoreset: bool = True,
        validate_actions: bool = True,
        **params,
    ) -> None:
        num_envs = check_num_envs(num_envs)
        if self.params_type is not None:
            self.params = build_params(self.params_type, params, type(self).__name__)
            self._check_params()
        elif params:
            raise TypeError(f"{type(self).__name__} takes no parameters, got {', '.join(sorted(params))}")
        self.num_envs = num_envs
        self.device = check_device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.autoreset = autoreset
        self.validate_actions = validate_actions
        self.generator = torch.Generator(device=self.device)
        self.seed(seed)
        try:
            self.state: EnvState[Inner] = self.initial_state(check_starts(self, self.draw_starts(num_envs), num_envs))
        except (MemoryError, RuntimeError) as e:  # torch's allocation failures are RuntimeErrors
            if not isinstance(e, MemoryError) and "memory" not in str(e).lower():
                raise
            raise ValueError(f"num_envs {num_envs:,}: {type(self).__name__}'s state for that many rows does not fit "
                             f"in the memory of {self.device}") from None

    def _check_params(self) -> None:
        """Refuse parameters of the wrong type or out of range (:func:`rl_gpu.envs.params.check_params`)."""
        check_params(self.params, type(self).__name__)

    @property
    def spec(self) -> EnvSpec:
        """The batch as the layers above see it (:class:`~rl_gpu.core.types.EnvSpec`)."""
        horizon = self.max_game_length or self.max_episode_steps
        groups, dtypes = {}, {}
        if self.critic_obs_shape is not None:
            groups = {"policy": tuple(self.obs_shape), "critic": tuple(self.critic_obs_shape)}
        if self.obs_dtype != torch.float32:
            dtypes = {"policy": str(self.obs_dtype).removeprefix("torch.")}
        return EnvSpec(
            obs_shape=tuple(self.obs_shape), num_actions=self.num_actions, action_shape=tuple(self.action_shape),
            action_low=tuple(self.action_low), action_high=tuple(self.action_high),
            obs_low=self.obs_low, obs_high=self.obs_high, obs_groups=groups, obs_dtypes=dtypes,
            num_players=self.num_players, num_agents=self.num_agents, max_episode_steps=self.max_episode_steps,
            episode_horizon=horizon,
            has_action_mask=type(self)._legal_actions is not TensorEnv._legal_actions,
            functional=True, exact_resume=True, mirror=self.mirror,
        )

    def draw_starts(self, num_envs: int) -> Inner:
        """``num_envs`` fresh episode starts drawn with the batch's own generator (the only randomness)."""
        return self._sample_initial_state(num_envs, self.generator)

    def seed(self, seed: int | None) -> None:
        """Re-seed the reset randomness (None draws a seed from torch's global generator).

        torch's CPU generator keeps only the low 32 bits of a seed, so on the CPU seeds that differ by a
        multiple of 2**32 give the same stream; CUDA generators use all 64 bits.
        """
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.generator.manual_seed(int(seed))

    @property
    def is_continuous(self) -> bool:
        """True when actions are ``[N, D]`` float vectors rather than ``[N]`` integer indices."""
        return len(self.action_shape) > 0

    @property
    def reward_shape(self) -> tuple[int, ...]:
        """``(N,)`` for one player, ``(N, P)`` for several, ``(N, M)`` for M agents acting at once."""
        if self.num_agents > 1:
            return (self.num_envs, self.num_agents)
        return (self.num_envs,) if self.num_players == 1 else (self.num_envs, self.num_players)

    @property
    def _agents(self) -> tuple[int, ...]:
        """The agent axis of per-agent tensors: ``(M,)``, or ``()`` for one agent."""
        return (self.num_agents,) if self.num_agents > 1 else ()

    @abc.abstractmethod
    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> Inner:
        """Draw ``num_envs`` fresh episode starts on ``self.device``."""

    @abc.abstractmethod
    def _transition(self, inner: Inner, action: Tensor) -> tuple[Inner, Tensor, Tensor]:
        """Pure transition of every row: ``(next_inner, reward [N] or [N, P] float32, terminated [N] bool)``.

        Called with legal actions only. It must not branch on tensor values on the host.
        """

    @abc.abstractmethod
    def _observe(self, inner: Inner) -> Tensor:
        """``[N, *O]`` observation (of :attr:`obs_dtype`, float32 by default) for the player to act in ``inner``."""

    def _observe_critic(self, inner: Inner) -> Tensor:
        """``[N, *critic_obs_shape]`` float32 privileged observation of the ``critic`` group (only called when
        :attr:`critic_obs_shape` is set)."""
        raise NotImplementedError(f"{type(self).__name__} declares critic_obs_shape but not _observe_critic")

    def _critic(self, inner: Inner) -> Tensor | None:
        return self._observe_critic(inner) if self.critic_obs_shape is not None else None

    def _legal_actions(self, inner: Inner) -> Tensor:
        """``[N, A]`` (``[N, M, A]``) bool, True = legal. Default: every action is legal (``[N, 0]`` when
        continuous)."""
        n = inner[0].shape[0]
        return torch.ones(n, *self._agents, self.num_actions, dtype=torch.bool, device=self.device)

    def _acting(self, inner: Inner) -> Tensor | None:
        """``[N, M]`` bool: the agents that act (M > 1 only). Default: every agent."""
        if self.num_agents == 1:
            return None
        return torch.ones(inner[0].shape[0], self.num_agents, dtype=torch.bool, device=self.device)

    def _carry(self, finished: Inner, fresh: Inner) -> Inner:
        """The fresh starts (``[N, ...]``, one per row) that rows whose episode ends at this step take, given how
        their episodes ended (``finished``): a curriculum moves a row to its next level here. Pure, for every row
        (only the finished rows' results are used). Default: ``fresh`` as drawn."""
        return fresh

    def _current_player(self, inner: Inner) -> Tensor:
        """``[N]`` int64 seat to act. Default: 0 (single player)."""
        n = inner[0].shape[0]
        return torch.zeros(n, dtype=torch.long, device=self.device)

    def chance_outcomes(self) -> tuple[Inner, Tensor] | None:
        """Every possible episode start with its probability, ``(inner with C rows, probs [C] float64)``, for a
        game whose randomness is all in its start and small enough to list (exact game-tree methods,
        :mod:`rl_gpu.envs.game_tree`). None (the default): the environment lists none."""
        return None

    def initial_state(self, inner: Inner) -> EnvState[Inner]:
        """The full state of a batch starting from ``inner``: episode counters at zero, no row frozen."""
        n = inner[0].shape[0]
        return EnvState(
            inner=inner,
            episode_step=torch.zeros(n, dtype=torch.long, device=self.device),
            episode_return=torch.zeros((n,) + self.reward_shape[1:], device=self.device),
            done=torch.zeros(n, dtype=torch.bool, device=self.device),
        )

    def timestep(self, state: EnvState[Inner]) -> StepResult:
        """A zero-reward step describing ``state`` as it is (what :meth:`reset` returns)."""
        obs = self._observe(state.inner)
        critic = self._critic(state.inner)
        n = obs.shape[0]
        no = torch.zeros(n, dtype=torch.bool, device=self.device)
        return StepResult(
            obs=obs,
            reward=torch.zeros((n,) + self.reward_shape[1:], device=self.device),
            terminated=no,
            truncated=no,
            final_obs=obs,
            action_mask=self._legal_actions(state.inner),
            current_player=self._current_player(state.inner),
            episode_return=state.episode_return,
            episode_length=state.episode_step,
            critic_obs=critic,
            final_critic_obs=critic,
            acting=self._acting(state.inner),
        )

    def step_state(
        self, state: EnvState[Inner], action: Tensor, reset_inner: Inner
    ) -> tuple[EnvState[Inner], StepResult]:
        """The pure batched step: ``state`` and ``action`` in, next state and result out.

        ``reset_inner`` holds a fresh start for every row (drawn by :meth:`draw_starts` outside
        this function, so that a compiled step contains no random-number generation); only rows that
        finish take it. Finished rows of a non-auto-reset batch (``state.done``) do not move.
        """
        next_inner, reward, terminated = self._transition(state.inner, action)
        limit = self.max_episode_steps
        if self.autoreset:
            # No row is ever frozen (set_state refuses done rows here): nothing to mask.
            episode_step = state.episode_step + 1
            if limit is None:
                truncated, done = torch.zeros_like(terminated), terminated
            else:
                # Done: terminated or at the limit; truncated: done without terminating.
                done = terminated | (episode_step >= limit)
                truncated = done ^ terminated
        else:
            active = ~state.done
            next_inner = select_rows(active, next_inner, state.inner)
            reward_active = active if reward.dim() == 1 else active.unsqueeze(-1)
            reward = torch.where(reward_active, reward, torch.zeros_like(reward))
            terminated = terminated & active
            episode_step = state.episode_step + active.long()
            if limit is None:
                truncated = torch.zeros_like(terminated)
            else:
                truncated = (episode_step >= limit) & active & ~terminated
            done = terminated | truncated
        episode_return = state.episode_return + reward
        final_obs = self._observe(next_inner)
        final_critic = self._critic(next_inner)
        if self.autoreset:
            done_r = done if reward.dim() == 1 else done.unsqueeze(-1)
            inner = select_rows(done, self._carry(next_inner, reset_inner), next_inner)
            obs = self._observe(inner)
            critic = self._critic(inner)
            new_state = EnvState(
                inner=inner,
                episode_step=episode_step.masked_fill(done, 0),
                episode_return=episode_return.masked_fill(done_r, 0.0),
                done=state.done,
            )
        else:
            inner, obs, critic = next_inner, final_obs, final_critic
            new_state = EnvState(inner, episode_step, episode_return, state.done | done)
        result = StepResult(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            action_mask=self._legal_actions(inner),
            current_player=self._current_player(inner),
            episode_return=episode_return,
            episode_length=episode_step,
            critic_obs=critic,
            final_critic_obs=final_critic,
            acting=self._acting(inner),
        )
        return new_state, result

    def step_rows(self, state: EnvState[Inner], action: Tensor, reset_inner: Inner,
                  rows: slice) -> tuple[EnvState[Inner], StepResult]:
        """:meth:`step_state` for the batch rows ``rows`` alone (``state``, ``action`` and ``reset_inner`` hold
        just those rows): a double-buffered collector steps the batch in halves. Every row's transition depends on
        that row only, so the halves give the whole batch's results; an environment that also keeps statistics per
        row (outside the state) overrides this to update only those rows'."""
        return self.step_state(state, action, reset_inner)

    def check_action(self, action: Tensor) -> None:
        """Raise ``ValueError`` if ``action`` has the wrong shape, dtype or device, or (with
        ``validate_actions``) a value out of range or illegal in its row.

        Continuous actions must be ``[N, D]`` floating point; out-of-bounds values are allowed (the
        environment clips them, as Gymnasium's do) but NaN/inf are refused when validating.
        """
        check_action_format(action, self.num_envs, self.action_shape, self.device, self._agents)
        if self.is_continuous:
            if self.validate_actions and not bool(torch.isfinite(action.float()).all()):
                raise ValueError("action contains NaN or inf (or a value beyond float32's range)")
            return
        if self.validate_actions:
            if type(self)._legal_actions is TensorEnv._legal_actions:
                check_action_range(action, self.num_envs, self.num_actions)  # every action in range is legal
            else:
                inner = self.state.inner
                check_action_values(action, self.num_envs, self.num_actions, self._legal_actions(inner),
                                    self._acting(inner), self.state.done)

    def reset(self, seed: int | None = None) -> StepResult:
        """Start a new episode in every row (re-seeding first if ``seed`` is given)."""
        if seed is not None:
            self.seed(seed)
        self.state = self.initial_state(self.draw_starts(self.num_envs))
        return self.timestep(self.state)

    def reset_rows(self, rows: Tensor) -> StepResult:
        """Start a new episode in the rows where ``rows`` (``[N]`` bool) is True; others are untouched."""
        rows = rows.to(self.device)
        fresh = self.initial_state(self.draw_starts(self.num_envs))
        self.state = EnvState(
            tree_where(rows, fresh.inner, self.state.inner),
            *tree_where(rows, fresh[1:], self.state[1:]),
        )
        return self.timestep(self.state)

    def step(self, action: Tensor) -> StepResult:
        """Advance every row by one action (``[N]`` integer tensor on ``device``)."""
        self.check_action(action)
        reset_inner = self.draw_starts(self.num_envs)
        if action.dtype != (torch.float32 if self.is_continuous else torch.int64):
            action = action.float() if self.is_continuous else action.long()
        self.state, result = self.step_state(self.state, action, reset_inner)
        return result

    def observe(self) -> StepResult:
        """The current state as a zero-reward :class:`StepResult` (no transition)."""
        return self.timestep(self.state)

    def get_state(self) -> EnvState[Inner]:
        """A copy of the full state (inner state, episode counters, frozen flags)."""
        return EnvState(
            type(self.state.inner)(*(t.clone() for t in self.state.inner)),
            self.state.episode_step.clone(),
            self.state.episode_return.clone(),
            self.state.done.clone(),
        )

    def state_dict(self) -> dict[str, Any]:
        """The generator and the full state as tensors and plain values (weights-only checkpoint material)."""
        state = self.state
        return {"generator": self.generator.get_state(), "inner": list(state.inner),
                "episode_step": state.episode_step, "episode_return": state.episode_return, "done": state.done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned, exactly (tensors are moved to ``device``)."""
        inner_type = type(self.state.inner)
        self.set_state(EnvState(
            inner_type(*(t.to(self.device) for t in state["inner"])), state["episode_step"].to(self.device),
            state["episode_return"].to(self.device), state["done"].to(self.device),
        ))
        self.generator.set_state(state["generator"].cpu())

    def close(self) -> None:
        """Nothing to release: the batch is tensors."""

    def set_state(self, state: EnvState[Inner]) -> None:
        """Replace the full state (every tensor must have leading dimension N and live on ``device``)."""
        self._check_state(state, self.num_envs)
        if self.autoreset and bool(state.done.any()):
            raise ValueError("state has finished (done) rows, which only environments with autoreset=False keep")
        self.state = state

    def set_rows(self, rows: Tensor, inner: Inner) -> None:
        """Inject ``inner`` (a state of ``len(rows)`` environments) into the given row indices.

        Episode counters of those rows restart at zero. A debugging/test API: it indexes, so it is not
        meant for a hot loop.
        """
        rows = torch.as_tensor(rows, device=self.device)
        if rows.dtype == torch.bool:
            raise TypeError("set_rows takes row indices, not a bool mask (reset_rows takes a mask)")
        rows = rows.long().flatten()
        self._check_inner(inner, rows.numel(), exact=False)  # values injected: cast to the state's dtypes
        fields = []
        for current, new in zip(self.state.inner, inner):
            updated = current.clone()
            updated[rows] = new.to(device=self.device, dtype=current.dtype)
            fields.append(updated)
        episode_step = self.state.episode_step.clone()
        episode_step[rows] = 0
        episode_return = self.state.episode_return.clone()
        episode_return[rows] = 0
        done = self.state.done.clone()
        done[rows] = False
        self.state = EnvState(type(self.state.inner)(*fields), episode_step, episode_return, done)

    def _check_inner(self, inner: tuple, n: int, exact: bool = True) -> None:
        template = self.state.inner
        if type(inner) is not type(template):
            raise TypeError(f"expected a {type(template).__name__}, got {type(inner).__name__}")
        for name, t, ref in zip(template._fields, inner, template):
            check_like(f"state field {name!r}", t, ref, n, exact)

    def _check_state(self, state: EnvState, n: int) -> None:
        if not isinstance(state, EnvState):
            raise TypeError(f"expected an EnvState, got {type(state).__name__}")
        self._check_inner(state.inner, n)
        for name in ("episode_step", "episode_return", "done"):
            check_like(name, getattr(state, name), getattr(self.state, name), n)
        for t in (*state.inner, state.episode_step, state.episode_return, state.done):
            if t.device != self.device:
                raise ValueError(f"state tensor on {t.device}, the environments are on {self.device}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={str(self.device)!r})"
