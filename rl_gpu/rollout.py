"""Collecting fixed-shape ``[T, N]`` rollouts from tensor environments.

Shape legend: T = steps per rollout, N = environments, O = observation shape, A = discrete actions.

Two modes share one collector:

- *continuing* (single-player tasks such as CartPole): the batch keeps running across rollouts with
  same-step auto-reset; every step is a learner decision; the last observation's value bootstraps.
- *episodic* (``episodic=True``; turn-based games such as roulette): every row starts a fresh game, the learner
  takes a random seat per row and a fixed opponent plays the other; ``T`` covers the longest possible game, so
  every game finishes inside the rollout and the steps after a row's game are padding. ``weight`` is 1 exactly
  for learner decisions in a live game, and rewards are the learner seat's.

:func:`collect` steps any environment through its ``step`` method. :class:`RolloutEngine` is the hot loop's
collector for :class:`~rl_gpu.envs.base.TensorEnv` batches: it draws every random number of a rollout first
(:class:`RolloutNoise`, in the order :func:`collect` would draw them, so both give identical rollouts), then
runs T calls of one pure step function (:func:`rollout_step`: policy, opponent, environment transition and
auto-reset, the record of the step) that can be compiled or captured in a CUDA graph because it holds no
random-number generation, no host synchronisation and no data-dependent shape.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import partial
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from rl_gpu import distributions as D
from rl_gpu.compile import CompileMode, compile_unit
from rl_gpu.envs.base import EnvState, TensorEnv
from rl_gpu.policy import PolicyOutput, UniformRandomPolicy


class Actor(Protocol):
    """Anything that picks actions for a batch of observations (policies and opponents)."""

    def act(
        self, obs: Tensor, action_mask: Tensor, generator: torch.Generator | None = None, deterministic: bool = False,
        noise: Tensor | None = None,
    ) -> PolicyOutput: ...


@dataclass
class Rollout:
    """A ``[T, N]`` batch of transitions, as collected; the input of :func:`rl_gpu.optimization.update_policy`."""

    obs: Tensor
    """``[T, N, *O]`` float32: observation each action was chosen in."""
    action_mask: Tensor
    """``[T, N, A]`` bool: legal actions in ``obs`` (``[T, N, 0]`` for continuous actions)."""
    action: Tensor
    """``[T, N]`` int64 (``[T, N, D]`` float32 for continuous actions): the action taken."""
    log_prob: Tensor
    """``[T, N]``: log-probability of ``action`` under the collecting policy (learner rows)."""
    value: Tensor
    """``[T, N]``: V(obs) under the collecting critic."""
    reward: Tensor
    """``[T, N]``: reward of the transition, from the learner's seat."""
    terminated: Tensor
    """``[T, N]`` bool: the transition ended the game or task (no bootstrap)."""
    truncated: Tensor
    """``[T, N]`` bool: the time limit cut the episode after the transition (bootstrap from ``final_value``)."""
    final_value: Tensor
    """``[T, N]``: V(final_obs) where ``truncated``, else 0."""
    bootstrap_value: Tensor
    """``[N]``: V of the observation after the last step (0 in episodic mode, where every game ended)."""
    weight: Tensor
    """``[T, N]`` float32: 1 for a learner decision in a live episode, 0 for opponent moves and padding."""
    live: Tensor
    """``[T, N]`` bool: the step is a real transition (not padding after the row's game ended)."""
    learner_seat: Tensor
    """``[N]`` int64: the learner's seat in each row (0 for single-player tasks)."""
    episode_return: Tensor
    """``[T, N]`` float32: the learner's return of the episode that ended at this step, 0 elsewhere."""
    episode_length: Tensor
    """``[T, N]`` int64: length of the episode that ended at this step, 0 elsewhere."""

    @property
    def observations(self) -> Tensor:
        """Alias of ``obs`` (the name used by seed 000's quickstart)."""
        return self.obs

    @property
    def weights(self) -> Tensor:
        """Alias of ``weight`` (the name used by seed 000's quickstart)."""
        return self.weight

    @property
    def done(self) -> Tensor:
        """``[T, N]`` bool: ``terminated | truncated``."""
        return self.terminated | self.truncated

    @property
    def num_steps(self) -> int:
        return self.reward.shape[0]

    @property
    def num_envs(self) -> int:
        return self.reward.shape[1]

    def storage_bytes(self) -> int:
        """Bytes held by this rollout's tensors (what one rollout of storage costs)."""
        return sum(t.numel() * t.element_size() for t in (getattr(self, f.name) for f in fields(self)))

    def transitions(self) -> Tensor:
        """0-dim int64: environment transitions actually taken (padding slots are not counted)."""
        return self.live.sum()

    def episode_stats(self) -> dict[str, Tensor]:
        """0-dim tensors over the episodes that ended in this rollout: count, mean return, mean length,
        and the learner's win rate (share of episodes with a positive return)."""
        ended = self.done
        count = ended.sum()
        denom = count.clamp(min=1).float()
        return {
            "episodes": count,
            "episode_return": torch.where(ended, self.episode_return, 0.0).sum() / denom,
            "episode_length": torch.where(ended, self.episode_length, 0).sum().float() / denom,
            "win_rate": (ended & (self.episode_return > 0)).sum().float() / denom,
        }


@torch.no_grad()
def collect(
    policy: Actor,
    env: TensorEnv,
    num_steps: int,
    policy_rng: torch.Generator | None = None,
    *,
    episodic: bool = False,
    opponent: Actor | None = None,
    opponent_rng: torch.Generator | None = None,
    learner_seat: Tensor | None = None,
    deterministic: bool = False,
) -> Rollout:
    """Run ``num_steps`` batched steps of ``env`` and return them as a :class:`Rollout`.

    Args:
        policy: the learner (``act`` and, for bootstrapping, ``value``).
        env: the batch of N environments; in continuing mode it carries on from its current state.
        num_steps: T.
        policy_rng: generator for the learner's sampling (on ``env.device``).
        episodic: reset every row first and treat steps after a row's episode end as padding.
        opponent: plays the other seats of a multi-player game (default: uniform random legal actions).
        opponent_rng: generator for the opponent's sampling and the seat draw.
        learner_seat: ``[N]`` seats for the learner; default: uniform at random per row (seat 0 if P = 1).
        deterministic: the learner takes its most probable action instead of sampling.
    """
    if env.num_players > 1 and not episodic:
        raise ValueError(
            f"{type(env).__name__} has {env.num_players} players: collect complete games with episodic=True"
        )
    n, device = env.num_envs, env.device
    step = env.reset() if episodic else env.observe()
    if learner_seat is None:
        learner_seat = torch.randint(0, env.num_players, (n,), generator=opponent_rng, device=device)
    opponent = opponent if opponent is not None else UniformRandomPolicy()
    live = torch.ones(n, dtype=torch.bool, device=device)
    record: dict[str, list[Tensor]] = {k: [] for k in Rollout.__dataclass_fields__}
    for _ in range(num_steps):
        out = policy.act(step.obs, step.action_mask, policy_rng, deterministic)
        action = out.action
        learner_turn = step.current_player == learner_seat
        if env.num_players > 1:
            other = opponent.act(step.obs, step.action_mask, opponent_rng)
            action = torch.where(learner_turn, action, other.action)
        record["obs"].append(step.obs)
        record["action_mask"].append(step.action_mask)
        record["action"].append(action)
        record["log_prob"].append(out.log_prob)
        record["value"].append(out.value)
        record["weight"].append((live & learner_turn).float())
        record["live"].append(live)

        step = env.step(action)
        reward = _seat_column(step.reward, learner_seat)
        ep_return = _seat_column(step.episode_return, learner_seat)
        terminated, truncated = step.terminated & live, step.truncated & live
        if env.max_episode_steps is not None:
            final_value = torch.where(truncated, policy.value(step.final_obs), 0.0)
        else:
            final_value = torch.zeros_like(reward)
        done = terminated | truncated
        record["reward"].append(torch.where(live, reward, 0.0))
        record["terminated"].append(terminated)
        record["truncated"].append(truncated)
        record["final_value"].append(final_value)
        record["episode_return"].append(torch.where(done, ep_return, 0.0))
        record["episode_length"].append(torch.where(done, step.episode_length, 0))
        if episodic:
            live = live & ~done

    stacked = {k: torch.stack(v) for k, v in record.items() if v}
    bootstrap = torch.zeros(n, device=device) if episodic else policy.value(step.obs)
    return Rollout(**stacked, bootstrap_value=bootstrap, learner_seat=learner_seat)


def episode_horizon(env: TensorEnv) -> int:
    """The number of steps that lets every episode of ``env`` finish from a reset."""
    horizon = getattr(env, "max_game_length", None) or env.max_episode_steps
    if horizon is None:
        raise ValueError(f"{type(env).__name__} has no bounded episode length: give num_steps explicitly")
    return int(horizon)


def collect_episodes(
    policy: Actor,
    env: TensorEnv,
    policy_rng: torch.Generator | None = None,
    opponent_rng: torch.Generator | None = None,
    *,
    opponent: Actor | None = None,
    num_steps: int | None = None,
    deterministic: bool = False,
) -> Rollout:
    """Play one complete game in every row of ``env`` (seed 000's collection) and return the ``[T, N]`` batch.

    The learner's seat is drawn per row with ``opponent_rng``; the opponent (uniform random over legal actions
    by default) plays the other seat; ``T`` defaults to the longest possible game.
    """
    return collect(
        policy,
        env,
        num_steps if num_steps is not None else episode_horizon(env),
        policy_rng,
        episodic=True,
        opponent=opponent,
        opponent_rng=opponent_rng,
        deterministic=deterministic,
    )


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


def _seat_column(x: Tensor, seat: Tensor) -> Tensor:
    """``[N]`` from a per-seat ``[N, P]`` tensor (or ``x`` itself when it is already ``[N]``)."""
    return x if x.dim() == 1 else x.gather(1, seat[:, None]).squeeze(1)


def rollout_step(
    policy: Actor,
    opponent: Actor,
    env: TensorEnv,
    carry: StepCarry,
    noise: Tensor | None,
    opponent_noise: Tensor | None,
    reset_inner: tuple,
    learner_seat: Tensor,
    *,
    deterministic: bool,
    episodic: bool,
) -> tuple[StepCarry, StepRecord]:
    """One batched step of a rollout as a pure function: actions from the pre-drawn ``noise`` (``[N, ...]``),
    the environment's transition with ``reset_inner`` (``[N, ...]``) as the start of rows that finish, and the
    step's record. The same arithmetic, in the same order, as one iteration of :func:`collect`."""
    out = policy.act(carry.obs, carry.action_mask, None, deterministic, noise=noise)
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
    state, step = env.step_state(carry.state, action.float() if env.is_continuous else action.long(), reset_inner)
    reward = _seat_column(step.reward, learner_seat)
    ep_return = _seat_column(step.episode_return, learner_seat)
    if solo:
        terminated, truncated = step.terminated, step.truncated
    else:
        terminated, truncated = step.terminated & live, step.truncated & live
        reward = torch.where(live, reward, 0.0)
    if env.max_episode_steps is not None:
        final_value = torch.where(truncated, policy.value(step.final_obs), 0.0)
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
    )
    next_live = live & ~done if episodic else live
    return StepCarry(state, step.obs, step.action_mask, step.current_player, next_live), record


def _stack_tree(trees: list[tuple]) -> tuple:
    """``[T]`` NamedTuples of ``[N, ...]`` tensors -> one NamedTuple of ``[T, N, ...]`` tensors."""
    return type(trees[0])(*(torch.stack(parts) for parts in zip(*trees)))


def _unbind(x: Tensor | None, steps: int) -> tuple[Tensor, ...] | list[None]:
    return x.unbind(0) if x is not None else [None] * steps


class RolloutEngine:
    """The hot loop's collector: fixed-shape ``[T, N]`` rollouts of a :class:`TensorEnv`, eager or compiled.

    ``collect(policy_rng, opponent_rng)`` is :meth:`draw` (every random number of the rollout, eagerly, outside
    compiled code) followed by :meth:`run` (T calls of :func:`rollout_step`, compiled when ``compile`` is
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
        env: TensorEnv,
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
        self.policy = policy
        self.env = env
        self.num_steps = num_steps
        self.episodic = episodic
        self.opponent = opponent if opponent is not None else UniformRandomPolicy()
        self.deterministic = deterministic
        self.compile = compile
        step = partial(rollout_step, policy, self.opponent, env, deterministic=deterministic, episodic=episodic)
        self._step = compile_unit(step, compile)
        self._value = compile_unit(policy.value, compile) if not episodic else None

    def _noise(self, actor: Actor, generator: torch.Generator | None) -> Tensor:
        env = self.env
        if getattr(actor, "is_continuous", False):
            return D.gaussian_noise((env.num_envs, *env.action_shape), generator, env.device)
        return D.categorical_noise((env.num_envs, env.num_actions), generator, env.device)

    def draw(
        self,
        policy_rng: torch.Generator | None = None,
        opponent_rng: torch.Generator | None = None,
        learner_seat: Tensor | None = None,
    ) -> RolloutNoise:
        """Every random number of the next rollout (eager; one call per step and stream, as :func:`collect`)."""
        env, steps = self.env, range(self.num_steps)
        initial = env._sample_initial_state(env.num_envs, env.generator) if self.episodic else None
        reset = _stack_tree([env._sample_initial_state(env.num_envs, env.generator) for _ in steps])
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
        self, noise: RolloutNoise, state: EnvState | None = None, out: Rollout | None = None
    ) -> tuple[Rollout, EnvState]:
        """The rollout for pre-drawn ``noise`` from ``state`` (default: ``env.state``, or fresh games in
        episodic mode); returns it with the environment state it ends in (the caller stores that).

        With ``out`` (a rollout of the same shapes) each step is copied into its tensors as soon as it is taken,
        and ``out`` is returned. Every per-step tensor then dies within its step, so the allocator reuses the
        same memory every step: keeping T steps of records alive until a final stack made glibc's heap grow by
        the step's transients at every step (3.9 GB peak instead of 1.3 GB for N=65536, T=16)."""
        env = self.env
        if self.episodic:
            state = env._fresh_state(noise.initial)
        elif state is None:
            state = env.state
        start = env._timestep(state)
        live = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
        carry = StepCarry(state, start.obs, start.action_mask, start.current_player, live)
        records = []
        # Per-step views made by one unbind each: indexing [t] inside the loop was a quarter of the operations
        # of an eager step for a small batch.
        policy_noise = _unbind(noise.policy, self.num_steps)
        opponent_noise = _unbind(noise.opponent, self.num_steps)
        reset_fields = [x.unbind(0) for x in noise.reset]
        slots = [getattr(out, name).unbind(0) for name in StepRecord._fields] if out is not None else None
        for t in range(self.num_steps):
            carry, record = self._step(
                carry, policy_noise[t], opponent_noise[t], type(noise.reset)(*(f[t] for f in reset_fields)),
                noise.learner_seat,
            )
            if slots is None:
                records.append(record)
            else:
                for slot, value in zip(slots, record):
                    slot[t].copy_(value)
            del record
        if self.episodic:
            bootstrap = torch.zeros(env.num_envs, device=env.device)
        else:
            bootstrap = self._value(carry.obs)
        if out is None:
            stacked = _stack_tree(records)
            rollout = Rollout(**stacked._asdict(), bootstrap_value=bootstrap, learner_seat=noise.learner_seat)
            return rollout, carry.state
        out.bootstrap_value.copy_(bootstrap)
        out.learner_seat.copy_(noise.learner_seat)
        return out, carry.state

    def empty_rollout(self) -> Rollout:
        """Uninitialised storage for one rollout of this engine (the ``out`` of :meth:`run`)."""
        env, t, n = self.env, self.num_steps, self.env.num_envs

        def empty(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.empty(shape, dtype=dtype, device=env.device)

        action = empty(t, n, *env.action_shape) if env.is_continuous else empty(t, n, dtype=torch.long)
        flags = {k: empty(t, n, dtype=torch.bool) for k in ("live", "terminated", "truncated")}
        floats = {k: empty(t, n) for k in ("log_prob", "value", "weight", "reward", "final_value", "episode_return")}
        return Rollout(obs=empty(t, n, *env.obs_shape), action_mask=empty(t, n, env.num_actions, dtype=torch.bool),
                       action=action, episode_length=empty(t, n, dtype=torch.long), bootstrap_value=empty(n),
                       learner_seat=empty(n, dtype=torch.long), **flags, **floats)

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


def noise_bytes(noise: Any) -> int:
    """Bytes held by the tensors of a :class:`RolloutNoise` (or any nest of tuples of tensors)."""
    if isinstance(noise, Tensor):
        return noise.numel() * noise.element_size()
    if isinstance(noise, tuple):
        return sum(noise_bytes(x) for x in noise)
    return 0


def _pick_slot(pool_field: Tensor, slot: Tensor) -> Tensor:
    """Row i of slot ``slot[i]`` from a ``[K, N, ...]`` field (a chain of selects: Inductor fuses it, a gather
    it did not)."""
    out = pool_field[-1]
    for k in range(pool_field.shape[0] - 2, -1, -1):
        cond = (slot == k).view(slot.shape + (1,) * (pool_field.dim() - 2))
        out = torch.where(cond, pool_field[k], out)
    return out


def step_chunk(env: TensorEnv, state: EnvState, actions: Tensor, pool: tuple) -> tuple[EnvState, Tensor]:
    """``C`` environment steps (``actions`` ``[C, N, ...]``) with auto-reset starts taken from ``pool``.

    ``pool`` holds ``K`` fresh starts per row (fields ``[K, N, ...]``); a row's j-th episode end in the chunk
    takes its slot j. Every slot is an independent draw used at most once, so episode starts are exactly as
    random as with a fresh draw per step, unless a row ends more than K episodes in the chunk: then its last slot
    is reused. Returns the final state and the number of such reuses (0-dim int64; 0 means exact).
    """
    k = pool[0].shape[0]
    count = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
    for i in range(actions.shape[0]):
        slot = count.clamp(max=k - 1)
        reset = type(pool)(*(_pick_slot(x, slot) for x in pool))
        state, result = env.step_state(state, actions[i], reset)
        count = count + (result.terminated | result.truncated).long()
    # Counted once per chunk: a reduction inside every step split Inductor's fused kernel (54 -> 74 us per step).
    return state, (count - k).clamp(min=0).sum()


class EnvStepper:
    """Raw environment throughput: steps ``env`` ``chunk`` steps per call of one compiled (or CUDA-graph
    replayed) :func:`step_chunk`, drawing the fresh starts of a whole chunk in one call (``slots`` per row).

    Auto-reset randomness is the costly part of a cheap environment on CPU: drawing a fresh start for every row
    at every step (what :meth:`TensorEnv.step` does, and what :class:`RolloutEngine` does to match
    :func:`collect` exactly) costs more than CartPole's whole compiled step at N=4096. Here a chunk of 16 steps
    draws 2 starts per row (8x fewer draws) and stays exact in distribution while no row ends more than
    ``slots`` episodes in a chunk; :attr:`reused` counts the starts that were reused (read it after a run).

    Args:
        env: an auto-resetting :class:`TensorEnv`.
        compile: ``off``, ``inductor`` or ``cudagraphs``.
        chunk: C, steps per call.
        slots: K, fresh starts drawn per row per chunk.
    """

    def __init__(self, env: TensorEnv, compile: CompileMode = "inductor", chunk: int = 16, slots: int = 2) -> None:
        from rl_gpu.compile import GraphedFunction

        if not env.autoreset:
            raise ValueError("EnvStepper needs an auto-resetting environment")
        self.env, self.chunk, self.slots = env, chunk, slots
        fn = compile_unit(partial(step_chunk, env), compile)
        self._run = GraphedFunction(fn) if compile == "cudagraphs" else fn
        self.reused = torch.zeros((), dtype=torch.long, device=env.device)

    def draw_pool(self) -> tuple:
        """``slots`` fresh starts per row, fields ``[K, N, ...]`` (one call of the environment's sampler)."""
        env, k = self.env, self.slots
        pool = env._sample_initial_state(k * env.num_envs, env.generator)
        return type(pool)(*(x.view(k, env.num_envs, *x.shape[1:]) for x in pool))

    def step(self, actions: Tensor) -> None:
        """Advance ``chunk`` steps with ``actions`` (``[chunk, N, ...]``); ``env.state`` follows."""
        if actions.shape[0] != self.chunk:
            raise ValueError(f"actions must be [chunk={self.chunk}, N, ...], got {tuple(actions.shape)}")
        action = actions.float() if self.env.is_continuous else actions.long()
        state, reused = self._run(self.env.state, action, self.draw_pool())
        self.env.state = state
        self.reused = self.reused + reused
