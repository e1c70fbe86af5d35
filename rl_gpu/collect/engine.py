"""The compiled collector: fixed-shape ``[T, N]`` rollouts of a functional environment
(:class:`~rl_gpu.core.types.FunctionalEnv`, e.g. any :class:`~rl_gpu.envs.base.TensorEnv`).

Shape legend: T = steps per rollout, N = environments, O = observation shape, A = discrete actions.

:class:`RolloutEngine` draws every random number of a rollout first (:class:`RolloutNoise`, in the order
:func:`rl_gpu.collect.reference.collect` would draw them, so both give identical rollouts), then runs T steps of
one pure step function (:func:`rollout_step`: policy, opponent, environment transition and auto-reset, the record
of the step) that can be compiled or captured in a CUDA graph because it holds no random-number generation, no
host synchronisation and no data-dependent shape. On the CPU a compiled unit runs two steps a call
(:data:`STEPS_PER_CALL`), and the critic's value of the final observations of truncated rows is taken after the
last step (:data:`FINAL_VALUES_AFTER`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.collect.reference import critic_kwargs
from rl_gpu.collect.seats import seat_column
from rl_gpu.core.pytree import tree_bytes, tree_map, tree_stack
from rl_gpu.core.types import Actor, FunctionalEnv, VecEnv
from rl_gpu.data.rollout import Rollout, empty_rollout
from rl_gpu.envs.base import EnvState
from rl_gpu.envs.random_draws import starts_drawn_at_once
from rl_gpu.nn import distributions as D
from rl_gpu.nn.actor_critic import UniformRandomPolicy
from rl_gpu.nn.memory import is_recurrent, reset_state
from rl_gpu.runtime.compile import CompileMode, compile_unit, env_simd, guards_checked_once


class RolloutNoise(NamedTuple):
    """Every random number of one rollout of T steps, drawn before it runs.

    Each stream is drawn in the order :func:`collect` consumes it, so an engine rollout and :func:`collect` with
    the same generator states are identical.
    """

    policy: Tensor | None
    """``[T, N, A]`` uniform (discrete) or ``[T, N, D]`` standard normal (continuous) sampling noise of the
    learner; None when it acts deterministically."""
    opponent: Tensor | None
    """``[T, N, A]`` uniform sampling noise of the opponent (multi-player games only)."""
    reset: tuple
    """The environment's inner state with fields ``[T, N, ...]``: fresh starts for the rows that finish at
    step t (the draw :meth:`~rl_gpu.envs.base.TensorEnv.step` makes)."""
    initial: tuple | None
    """Episodic rollouts: the inner state ``[N, ...]`` every row starts from (the draw of ``env.reset()``)."""
    learner_seat: Tensor
    """``[N]`` int64: the learner's seat per row."""


class StepCarry(NamedTuple):
    """What one rollout step hands to the next."""

    state: EnvState
    obs: Tensor
    action_mask: Tensor
    current_player: Tensor
    live: Tensor
    critic_obs: Tensor | None = None
    """``[N, C]``: the ``critic`` group's observation (environments with one), else None."""
    policy_state: Tensor | None = None
    """A recurrent learner's state before ``obs`` (:mod:`rl_gpu.nn.memory`), else None."""
    initial_state: Tensor | None = None
    """A recurrent learner's state of fresh episodes: what the rows that finish are reset to."""


class StepRecord(NamedTuple):
    """One step's slice ``[N, ...]`` of the :class:`Rollout` fields of the same names."""

    obs: Tensor
    action_mask: Tensor
    action: Tensor
    log_prob: Tensor
    value: Tensor
    weight: Tensor
    live: Tensor
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    final_value: Tensor
    episode_return: Tensor
    episode_length: Tensor
    critic_obs: Tensor | None = None
    final_obs: Tensor | None = None
    """``[N, O]``: the observations the rows ended in, where the step leaves ``final_value`` to its caller
    (``final_values=False``), else None."""


ROLLOUT_FIELDS = StepRecord._fields[:-1]
"""The :class:`StepRecord` fields a :class:`~rl_gpu.data.rollout.Rollout` has (all but ``final_obs``)."""


def rollout_step(
    policy: Actor,
    opponent: Actor,
    env: FunctionalEnv,
    carry: StepCarry,
    noise: Tensor | None,
    opponent_noise: Tensor | None,
    reset_inner: tuple,
    learner_seat: Tensor,
    *,
    deterministic: bool,
    episodic: bool,
    final_values: bool = True,
) -> tuple[StepCarry, StepRecord]:
    """One batched step of a rollout as a pure function: actions from the pre-drawn ``noise`` (``[N, ...]``),
    the environment's transition with ``reset_inner`` (``[N, ...]``) as the start of rows that finish, and the
    step's record. The same arithmetic, in the same order, as one iteration of :func:`collect`: the policy's
    half (:func:`rollout_act`), then the environment's (:func:`rollout_advance`). A recurrent learner acts from
    ``carry.policy_state`` and hands on the state after this step, reset where the episode ended.
    ``final_values``: as in :func:`rollout_advance` (a learner without memory)."""
    if carry.policy_state is None:
        out = rollout_act(policy, carry, noise, deterministic=deterministic)
        return rollout_advance(policy, opponent, env, carry, out, opponent_noise, reset_inner, learner_seat,
                               episodic=episodic, final_values=final_values)
    out, after = policy.act_with_state(carry.obs, carry.policy_state, carry.action_mask, None, deterministic,
                                       noise=noise, **critic_kwargs(carry.critic_obs))
    return rollout_advance(policy, opponent, env, carry, out, opponent_noise, reset_inner, learner_seat,
                           episodic=episodic, after=after)


def rollout_steps(step, carry: StepCarry, policy_noise: tuple, opponent_noise: tuple, reset_inner: tuple,
                  learner_seat: Tensor) -> tuple[StepCarry, tuple[StepRecord, ...]]:
    """``step`` (a :func:`rollout_step` with its policy, opponent and environment bound) once for each element of
    ``policy_noise``, ``opponent_noise`` and ``reset_inner`` (one step's each), in order: the carry after the last
    step and every step's record (what one compiled unit runs for several steps, :data:`STEPS_PER_CALL`)."""
    records = []
    for noise, other, reset in zip(policy_noise, opponent_noise, reset_inner):
        carry, record = step(carry, noise, other, reset, learner_seat)
        records.append(record)
    return carry, tuple(records)


def rollout_act(policy: Actor, carry: StepCarry, noise: Tensor | None, *, deterministic: bool):
    """The learner's action, log-probability and value for ``carry``'s observations (the policy's half of
    :func:`rollout_step`)."""
    return policy.act(carry.obs, carry.action_mask, None, deterministic, noise=noise,
                      **critic_kwargs(carry.critic_obs))


def rollout_advance(
    policy: Actor,
    opponent: Actor,
    env: FunctionalEnv,
    carry: StepCarry,
    out,
    opponent_noise: Tensor | None,
    reset_inner: tuple,
    learner_seat: Tensor,
    *,
    episodic: bool,
    rows: slice | None = None,
    after: Tensor | None = None,
    final_values: bool = True,
) -> tuple[StepCarry, StepRecord]:
    """The rest of :func:`rollout_step` after the learner acted (``out``): the opponent, the environment's
    transition and the step's record. ``rows``: the batch rows ``carry`` holds, when it holds only some
    (:class:`~rl_gpu.collect.double_buffer.DoubleBufferedEngine`). ``after``: a recurrent learner's state after
    this step's observation (single-player tasks). ``final_values=False`` (a learner without memory, an
    environment without a critic group): the record's ``final_value`` is left at zero and its ``final_obs`` holds
    the observations the rows ended in, for the caller to value where a row was truncated."""
    action = out.action
    live = carry.live
    # One player, continuing: every row is live and the learner's turn at every step, so the masks below are
    # all True and are skipped (the same values, with fewer operations).
    solo = env.num_players == 1 and not episodic
    if solo:
        weight = live.float()
    else:
        learner_turn = carry.current_player == learner_seat
        weight = (live & learner_turn).float()
    if env.num_players > 1:
        other = opponent.act(carry.obs, carry.action_mask, None, noise=opponent_noise)
        action = torch.where(learner_turn, action, other.action)
    action = action.float() if env.is_continuous else action.long()
    if rows is None:
        state, step = env.step_state(carry.state, action, reset_inner)
    else:
        state, step = env.step_rows(carry.state, action, reset_inner, rows)
    reward = seat_column(step.reward, learner_seat)
    ep_return = seat_column(step.episode_return, learner_seat)
    if solo:
        terminated, truncated = step.terminated, step.truncated
    else:
        terminated, truncated = step.terminated & live, step.truncated & live
        reward = torch.where(live, reward, 0.0)
    final_obs = None
    if env.max_episode_steps is not None and not final_values:
        final_value, final_obs = torch.zeros_like(reward), step.final_obs
    elif env.max_episode_steps is not None:
        final_critic = critic_kwargs(step.final_critic_obs)
        final = (policy.value(step.final_obs, **final_critic) if after is None
                 else policy.value_with_state(step.final_obs, after, **final_critic))
        final_value = torch.where(truncated, final, 0.0)
    else:
        final_value = torch.zeros_like(reward)
    done = terminated | truncated
    record = StepRecord(
        obs=carry.obs,
        action_mask=carry.action_mask,
        action=action,
        log_prob=out.log_prob,
        value=out.value,
        weight=weight,
        live=live,
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        final_value=final_value,
        episode_return=torch.where(done, ep_return, 0.0),
        episode_length=torch.where(done, step.episode_length, 0),
        critic_obs=carry.critic_obs,
        final_obs=final_obs,
    )
    next_live = live & ~done if episodic else live
    memory = None if after is None else reset_state(step.terminated | step.truncated, carry.initial_state, after)
    return StepCarry(state, step.obs, step.action_mask, step.current_player, next_live, step.critic_obs, memory,
                     carry.initial_state), record


def action_noise(actor: Actor, env: VecEnv, generator: torch.Generator | None) -> Tensor:
    """One step's sampling noise for ``actor`` on ``env``'s N rows, drawn as its ``act(generator=...)`` would
    draw it: ``[N, D]`` standard normal (continuous actions) or ``[N, A]`` uniform."""
    if actor.is_continuous:
        return D.gaussian_noise((env.num_envs, *env.action_shape), generator, env.device)
    return D.categorical_noise((env.num_envs, env.num_actions), generator, env.device)


def _unbind(x: Tensor | None, steps: int) -> tuple[Tensor, ...] | list[None]:
    return x.unbind(0) if x is not None else [None] * steps


STACK_BYTES = 16 << 20
"""A rollout into storage of at most this many bytes keeps its steps' records and stacks them into the storage
after the last step; a larger one copies each step in as it is taken (see :meth:`RolloutEngine.run`)."""

GUARDS_ONCE = True
"""Compiled rollouts check their units' guards at the first two steps only (:func:`guards_checked_once`; a switch
for benchmarks and tests)."""

STEPS_PER_CALL = 2
"""A compiled rollout on the CPU runs this many steps in each call of its compiled unit (when T is a multiple of
it): the fixed cost of a call (TorchDynamo's frame and the wrappers around the compiled code, tens of
microseconds) is paid once for them. The unit takes about as many times longer to compile (a switch for
benchmarks and tests)."""

FINAL_VALUES_AFTER = True
"""CPU rollouts that keep their records value the final observations after the last step, only at the steps where
a row was truncated (see :meth:`RolloutEngine.run`; a switch for benchmarks and tests)."""


class RolloutEngine:
    """The hot loop's collector: fixed-shape ``[T, N]`` rollouts of a :class:`TensorEnv`, eager or compiled.

    ``collect(policy_rng, opponent_rng)`` is :meth:`draw` (every random number of the rollout, eagerly, outside
    compiled code) followed by :meth:`run` (T steps of :func:`rollout_step`, compiled when ``compile`` is
    ``"inductor"`` or ``"cudagraphs"``). Neither synchronises with the host. The environment's ``state`` is
    carried over between rollouts exactly as :func:`collect` carries it; action validation is never run (it
    reads values back to the host).

    Args:
        policy: the learner (``act(..., noise=)`` and ``value``).
        env: the batch of N environments.
        num_steps: T.
        episodic: as in :func:`collect`.
        opponent: plays the other seats of a multi-player game (default: uniform random legal actions).
        deterministic: the learner takes its most probable action.
        compile: ``"off"`` or ``"inductor"``/``"cudagraphs"`` (the step function is compiled with Inductor;
            CUDA-graph capture of whole iterations is :class:`rl_gpu.optimization.PPO`'s).
    """

    def __init__(
        self,
        policy: Actor,
        env: FunctionalEnv,
        num_steps: int,
        *,
        episodic: bool = False,
        opponent: Actor | None = None,
        deterministic: bool = False,
        compile: CompileMode = "off",
    ) -> None:
        if env.num_players > 1 and not episodic:
            raise ValueError(
                f"{type(env).__name__} has {env.num_players} players: collect complete games with episodic=True"
            )
        if num_steps <= 0:
            raise ValueError(f"num_steps must be positive, got {num_steps}")
        self.recurrent = is_recurrent(policy)
        if self.recurrent and env.num_players > 1:
            raise ValueError("the rollout engine collects a policy with memory on single-player tasks only")
        self.policy = policy
        self.env = env
        self.num_steps = num_steps
        self.episodic = episodic
        self.opponent = opponent if opponent is not None else UniformRandomPolicy()
        self.deterministic = deterministic
        self.compile = compile
        self._step = partial(rollout_step, policy, self.opponent, env, deterministic=deterministic,
                             episodic=episodic)
        self._units: dict[tuple[int, bool], Callable] = {}
        """Compiled (or plain) step units by (steps a call, final values left to :meth:`run`), built when used."""
        value = policy.value_with_state if self.recurrent else policy.value
        self._value = compile_unit(value, compile) if not episodic else None
        # V(final_obs) matters only where a row is truncated, a few steps in a rollout: on the CPU, where reading
        # which steps those are costs nothing, a step that leaves it out saves a critic's forward pass a step.
        self.final_values_after = (env.device.type == "cpu" and not episodic and not self.recurrent
                                   and env.max_episode_steps is not None and env.spec.critic_obs_size == 0)
        self._starts_at_once: bool | None = None  # starts_drawn_at_once(env), tried at the first draw

    def _unit(self, steps: int, final_after: bool) -> Callable:
        """The unit that runs ``steps`` steps a call (:func:`rollout_step` itself for one, else
        :func:`rollout_steps`), leaving the final values to :meth:`run` with ``final_after``."""
        key = (steps, final_after)
        if key not in self._units:
            step = partial(self._step, final_values=not final_after)
            fn = step if steps == 1 else partial(rollout_steps, step)
            self._units[key] = compile_unit(fn, self.compile, simd=env_simd(self.env))
        return self._units[key]

    def steps_per_call(self) -> int:
        """Steps each call of the rollout's unit runs: :data:`STEPS_PER_CALL` for a compiled CPU rollout whose T
        is a multiple of it, else 1."""
        k = STEPS_PER_CALL
        return k if self.compile != "off" and self.env.device.type == "cpu" and self.num_steps % k == 0 else 1

    def _noise(self, actor: Actor, generator: torch.Generator | None) -> Tensor:
        return action_noise(actor, self.env, generator)

    def draw(
        self,
        policy_rng: torch.Generator | None = None,
        opponent_rng: torch.Generator | None = None,
        learner_seat: Tensor | None = None,
    ) -> RolloutNoise:
        """Every random number of the next rollout (eager; in the order :func:`collect` draws them: the starts in one
        call where :func:`starts_drawn_at_once`, else one call per step)."""
        env, steps = self.env, range(self.num_steps)
        initial = env.draw_starts(env.num_envs) if self.episodic else None
        if self._starts_at_once is None:
            self._starts_at_once = starts_drawn_at_once(env)
        if self._starts_at_once:  # one call for the rollout: the numbers of a call per step, in fewer operations
            pool = env.draw_starts(self.num_steps * env.num_envs)
            reset = tree_map(lambda x: x.view(self.num_steps, env.num_envs, *x.shape[1:]), pool)
        else:
            reset = tree_stack([env.draw_starts(env.num_envs) for _ in steps])
        if learner_seat is None:
            learner_seat = torch.randint(0, env.num_players, (env.num_envs,), generator=opponent_rng,
                                         device=env.device)
        policy = None if self.deterministic else torch.stack([self._noise(self.policy, policy_rng) for _ in steps])
        opponent = None
        if env.num_players > 1:
            opponent = torch.stack([self._noise(self.opponent, opponent_rng) for _ in steps])
        return RolloutNoise(policy, opponent, reset, initial, learner_seat)

    @torch.no_grad()
    def run(
        self, noise: RolloutNoise, state: EnvState | None = None, out: Rollout | None = None,
        policy_state: Tensor | None = None,
    ) -> tuple[Rollout, EnvState]:
        """The rollout for pre-drawn ``noise`` from ``state`` (default: ``env.state``, or fresh games in
        episodic mode); returns it with the environment state it ends in (the caller stores that). A recurrent
        learner starts from ``policy_state`` (None, and always in episodic mode: its initial state); the
        rollout's ``policy_state0`` and ``policy_state`` are its state before the first step and after the last.

        With ``out`` (a rollout of the same shapes) the steps are written into its tensors and ``out`` is returned:
        up to ``STACK_BYTES`` of storage, each field stacked into it after the last step (one call a field rather
        than one a field and step); above, each step copied in as soon as it is taken, so that every per-step
        tensor dies within its step and the allocator reuses the same memory every step (at large N, keeping T
        steps of records alive until a final stack made glibc's heap grow by the step's transients at every step,
        several times the storage's own size)."""
        env = self.env
        if self.episodic:
            state = env.initial_state(noise.initial)
        elif state is None:
            state = env.state
        start = env.timestep(state)
        live = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
        initial = self.policy.initial_state(env.num_envs) if self.recurrent else None
        memory = initial if self.episodic or policy_state is None else policy_state
        carry = StepCarry(state, start.obs, start.action_mask, start.current_player, live, start.critic_obs,
                          memory, initial)
        records = []
        # Per-step views made by one unbind each: indexing [t] inside the loop was a quarter of the operations
        # of an eager step for a small batch.
        policy_noise = _unbind(noise.policy, self.num_steps)
        opponent_noise = _unbind(noise.opponent, self.num_steps)
        reset_fields = [x.unbind(0) for x in noise.reset]
        slots = None
        storage = [None if out is None else getattr(out, name) for name in ROLLOUT_FIELDS]
        if out is not None and sum(x.numel() * x.element_size() for x in storage if x is not None) > STACK_BYTES:
            slots = [None if x is None else x.unbind(0) for x in storage]
        final_after = slots is None and self.final_values_after and FINAL_VALUES_AFTER
        k = self.steps_per_call()
        unit = self._unit(k, final_after)

        def reset(t: int) -> tuple:
            return type(noise.reset)(*(f[t] for f in reset_fields))

        with contextlib.ExitStack() as stack:
            for t in range(0, self.num_steps, k):
                if t == 2 * k and self.compile != "off" and GUARDS_ONCE:
                    # Call 0 starts from the rollout's starting state, call 1 from the unit's own outputs (which
                    # may be laid out otherwise, and then compile a second entry); every later call has call 1's
                    # inputs but for the step index, so the guards are checked at the first two calls only.
                    stack.enter_context(guards_checked_once())
                if k == 1:
                    carry, record = unit(carry, policy_noise[t], opponent_noise[t], reset(t), noise.learner_seat)
                    taken = (record,)
                else:
                    carry, taken = unit(carry, tuple(policy_noise[t:t + k]), tuple(opponent_noise[t:t + k]),
                                        tuple(reset(t + i) for i in range(k)), noise.learner_seat)
                for i, record in enumerate(taken):
                    if slots is None:
                        records.append(record)
                    else:
                        for slot, value in zip(slots, record):
                            if slot is not None:
                                slot[t + i].copy_(value)
                del record, taken
        if final_after:
            self._value_final_obs(records)
        if self.episodic:
            bootstrap = torch.zeros(env.num_envs, device=env.device)
        elif self.recurrent:
            bootstrap = self._value(carry.obs, carry.policy_state, **critic_kwargs(carry.critic_obs))
        else:
            bootstrap = self._value(carry.obs, **critic_kwargs(carry.critic_obs))
        if out is not None and slots is None:  # a small rollout: each field stacked into its storage at once
            for name, x in zip(ROLLOUT_FIELDS, storage):
                if x is not None:
                    torch.stack([getattr(record, name) for record in records], out=x)
            records.clear()
        if out is None:
            stacked = tree_stack(records)
            rollout = Rollout(**{name: getattr(stacked, name) for name in ROLLOUT_FIELDS}, bootstrap_value=bootstrap,
                              learner_seat=noise.learner_seat, policy_state0=memory, policy_state=carry.policy_state)
            return rollout, carry.state
        out.bootstrap_value.copy_(bootstrap)
        out.learner_seat.copy_(noise.learner_seat)
        out.policy_state0, out.policy_state = memory, carry.policy_state
        return out, carry.state

    def _value_final_obs(self, records: list[StepRecord]) -> None:
        """Set ``final_value`` = V(final_obs) on the truncated rows of the steps that have any (zero elsewhere, as
        :func:`rollout_advance` sets it), each step's N rows in one call as the step itself would value them; drop
        the records' ``final_obs``. Reads which steps those are: on the CPU, without a device to wait for."""
        truncated = torch.stack([record.truncated for record in records])
        for t in truncated.any(1).nonzero().flatten().tolist():
            final = torch.where(records[t].truncated, self._value(records[t].final_obs), 0.0)
            records[t] = records[t]._replace(final_value=final)
        records[:] = [record._replace(final_obs=None) for record in records]

    def empty_rollout(self) -> Rollout:
        """Uninitialised storage for one rollout of this engine (the ``out`` of :meth:`run`)."""
        return empty_rollout(self.env.spec, self.num_steps, self.env.num_envs, self.env.device)

    def collect(
        self,
        policy_rng: torch.Generator | None = None,
        opponent_rng: torch.Generator | None = None,
        learner_seat: Tensor | None = None,
    ) -> Rollout:
        """Draw, run, and leave the environment in the state the rollout ended in."""
        rollout, state = self.run(self.draw(policy_rng, opponent_rng, learner_seat))
        self.env.state = state
        return rollout


def noise_bytes(noise: RolloutNoise) -> int:
    """Bytes held by the tensors of a :class:`RolloutNoise`."""
    return tree_bytes(noise)
