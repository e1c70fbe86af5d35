"""Double-buffered collection in one process: the batch's rows in two halves, the environment stepping one half
in a worker thread while the policy acts on the other.

One step of a rollout is the policy's half (:func:`~rl_gpu.collect.engine.rollout_act`: a forward pass) and the
environment's (:func:`~rl_gpu.collect.engine.rollout_advance`: the transition, auto-reset, the step's record).
Rows are independent, so rows ``[0, h)`` (half A) and ``[h, N)`` (half B) can take them at different moments:

    main thread:    act A_0 | act B_0        | act A_1        | act B_1        | ...
    worker thread:          | advance A_0    | advance B_0    | advance A_1    | ...

While the worker steps one half (MuJoCo's ``rollout`` and torch's kernels release the GIL), the main thread runs
the policy on the other, so a machine whose cores take turns between stepping and inference keeps two busy. Only
one environment step runs at a time, so the environment's own buffers are never shared between threads.

Every random number is drawn for the whole batch before the rollout, as :class:`RolloutEngine` draws it, and
each half takes its rows of it; the same policy version acts on both halves. The rollout, the final state and the
bootstrap values are those of the synchronous engine, bit for bit, wherever the policy's forward pass on a half
gives the rows it gives on the whole batch: the split falls on a multiple of the matrix kernels' row blocks
(:func:`split_row`), so it does for the MLP policies on the CPU (tested).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial

import torch

from rl_gpu.collect.engine import ROLLOUT_FIELDS, RolloutEngine, RolloutNoise, StepCarry, rollout_act, rollout_advance
from rl_gpu.collect.reference import critic_kwargs
from rl_gpu.core.pytree import children, is_leaf, rebuild, tree_map, tree_stack
from rl_gpu.core.types import Actor, FunctionalEnv
from rl_gpu.data.rollout import Rollout
from rl_gpu.envs.base import EnvState
from rl_gpu.runtime.compile import CompileMode, compile_unit, env_simd


def double_buffer_refusal(env: object, *, episodic: bool, recurrent: bool, asynchronous: bool,
                          compile: str) -> str | None:
    """Why a learner's collection of ``env`` cannot be double-buffered (None: it can)."""
    if asynchronous:
        return "--double-buffer and --async-collect each run the environment in a second thread: choose one"
    spec = getattr(env, "spec", None)
    if spec is None or episodic or spec.num_agents > 1 or recurrent or not hasattr(env, "step_rows"):
        return ("--double-buffer collects single-player tasks of a tensor environment with a feed-forward policy, "
                "bound to its environment")
    if compile == "cudagraphs":
        return ("--double-buffer runs the environment in a second thread: --compile cudagraphs replays one graph "
                "for the whole step; use --compile off or inductor")
    if getattr(env, "backend", "mujoco") != "mujoco":
        return ("--double-buffer needs an environment stepped on the CPU's threads (MuJoCo's C engine), not a GPU "
                "engine that steps the whole batch at once")
    if env.num_envs < 2:
        return "--double-buffer steps the batch in two halves: it needs at least 2 environments"
    return None


def split_row(num_envs: int) -> int:
    """Where the batch splits: the multiple of 64 rows nearest the middle (of 16, 8 or 4 for small batches).

    CPU matrix kernels compute rows in blocks, and the rows of a block's tail take another code path: a row of
    the half then gets the bits it gets in the whole batch only if both place it alike in its block, which a
    split at a multiple of the block size guarantees."""
    for block in (64, 16, 8, 4):
        half = round(num_envs / 2 / block) * block
        if 0 < half < num_envs:
            return half
    return num_envs // 2


def _rows(x, rows: slice):
    return None if x is None else tree_map(lambda t: t[rows], x)


def _cat(a, b, dim: int = 0):
    """Two halves' trees joined along the rows (``dim``)."""
    if isinstance(a, torch.Tensor):
        return torch.cat([a, b], dim)
    if is_leaf(a):
        return a
    return rebuild(a, [_cat(x, y, dim) for x, y in zip(children(a), children(b))])


class DoubleBufferedEngine(RolloutEngine):
    """A :class:`RolloutEngine` of a single-player continuing task whose rows step in two halves, overlapping the
    policy on one half with the environment on the other (module docstring). Same draws, same results."""

    def __init__(self, policy: Actor, env: FunctionalEnv, num_steps: int, *, deterministic: bool = False,
                 compile: CompileMode = "off") -> None:
        refusal = double_buffer_refusal(env, episodic=False, recurrent=False, asynchronous=False, compile=compile)
        if refusal is not None or env.num_players > 1:
            raise ValueError(refusal or "double-buffered collection steps a single-player batch")
        super().__init__(policy, env, num_steps, deterministic=deterministic, compile=compile)
        half = split_row(env.num_envs)
        self.halves = (slice(0, half), slice(half, env.num_envs))
        self._act = compile_unit(partial(rollout_act, policy, deterministic=deterministic), compile)
        # A host-stepped environment (MuJoCo's C engine: spec.functional False) steps eagerly; its policy compiles.
        advance_mode = compile if env.spec.functional else "off"
        self._advance = [compile_unit(partial(rollout_advance, policy, self.opponent, env, episodic=False,
                                              rows=rows), advance_mode, simd=env_simd(env)) for rows in self.halves]
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="rl_gpu-double-buffer")

    @torch.no_grad()
    def run(self, noise: RolloutNoise, state: EnvState | None = None,
            out: Rollout | None = None) -> tuple[Rollout, EnvState]:
        env, steps = self.env, self.num_steps
        state = env.state if state is None else state
        start = env.timestep(state)
        live = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
        whole = StepCarry(state, start.obs, start.action_mask, start.current_player, live, start.critic_obs)
        carry = [_rows(whole, rows) for rows in self.halves]
        policy_noise = [None if noise.policy is None else noise.policy[:, rows].unbind(0) for rows in self.halves]
        reset = [[type(noise.reset)(*(f[t, rows] for f in noise.reset)) for t in range(steps)]
                 for rows in self.halves]
        seat = [noise.learner_seat[rows] for rows in self.halves]
        records: list[list] = [[], []]

        def act(h: int, t: int):
            return self._act(carry[h], None if policy_noise[h] is None else policy_noise[h][t])

        def advance(h: int, t: int, acted):
            with torch.no_grad():  # grad mode is per thread: the worker's must be off too
                return self._advance[h](carry[h], acted, None, reset[h][t], seat[h])

        acted = act(0, 0)
        pending = self._worker.submit(advance, 0, 0, acted)
        acted = act(1, 0)  # overlaps half A's environment step
        for t in range(steps):
            carry[0], record_a = pending.result()
            pending = self._worker.submit(advance, 1, t, acted)
            if t + 1 < steps:
                acted = act(0, t + 1)  # overlaps half B's environment step
            carry[1], record_b = pending.result()
            if t + 1 < steps:
                pending = self._worker.submit(advance, 0, t + 1, acted)
                acted = act(1, t + 1)
            self._store(out, records, t, record_a, record_b)
        final = _cat(carry[0], carry[1])
        bootstrap = self._value(final.obs, **critic_kwargs(final.critic_obs))
        if out is None:
            stacked = _cat(tree_stack(records[0]), tree_stack(records[1]), dim=1)
            return Rollout(**{name: getattr(stacked, name) for name in ROLLOUT_FIELDS}, bootstrap_value=bootstrap,
                           learner_seat=noise.learner_seat), final.state
        out.bootstrap_value.copy_(bootstrap)
        out.learner_seat.copy_(noise.learner_seat)
        return out, final.state

    def _store(self, out: Rollout | None, records: list[list], t: int, *halves) -> None:
        if out is None:
            for kept, record in zip(records, halves):
                kept.append(record)
            return
        for rows, record in zip(self.halves, halves):
            for name in ROLLOUT_FIELDS:
                slot, value = getattr(out, name), getattr(record, name)
                if slot is not None and value is not None:
                    slot[t, rows].copy_(value)

    def close(self) -> None:
        self._worker.shutdown(wait=True)
