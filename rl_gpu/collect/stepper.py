"""Raw environment throughput: chunks of compiled environment steps with pooled fresh starts (what
``rl-gpu bench``'s env-only measurement times).

Shape legend: C = steps per chunk, K = fresh starts per row per chunk, N = environments.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from rl_gpu.core.types import FunctionalEnv
from rl_gpu.envs.base import EnvState
from rl_gpu.runtime.compile import CompileMode, GraphedFunction, compile_unit, env_simd


def _pick_slot(pool_field: Tensor, slot: Tensor) -> Tensor:
    """Row i of slot ``slot[i]`` from a ``[K, N, ...]`` field (a chain of selects: Inductor fuses it, a gather
    it did not)."""
    out = pool_field[-1]
    for k in range(pool_field.shape[0] - 2, -1, -1):
        cond = (slot == k).view(slot.shape + (1,) * (pool_field.dim() - 2))
        out = torch.where(cond, pool_field[k], out)
    return out


def step_chunk(env: FunctionalEnv, state: EnvState, actions: Tensor, pool: tuple) -> tuple[EnvState, Tensor]:
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
    # Counted once per chunk: a reduction inside every step split Inductor's fused kernel in two.
    return state, (count - k).clamp(min=0).sum()


class EnvStepper:
    """Raw environment throughput: steps ``env`` ``chunk`` steps per call of one compiled (or CUDA-graph
    replayed) :func:`step_chunk`, drawing the fresh starts of a whole chunk in one call (``slots`` per row).

    Auto-reset randomness is the costly part of a cheap environment on CPU: drawing a fresh start for every row
    at every step (what :meth:`TensorEnv.step` does, and what the rollout engine does to match the reference
    collector exactly) can cost more than a cheap environment's whole compiled step. Here a chunk of C steps
    draws K starts per row (K/C of the draws) and stays exact in distribution while no row ends more than
    ``slots`` episodes in a chunk; :attr:`reused` counts the starts that were reused (read it after a run).

    Args:
        env: an auto-resetting :class:`TensorEnv`.
        compile: ``off``, ``inductor`` or ``cudagraphs``.
        chunk: C, steps per call.
        slots: K, fresh starts drawn per row per chunk.
    """

    def __init__(self, env: FunctionalEnv, compile: CompileMode = "inductor", chunk: int = 16, slots: int = 2) -> None:
        if not env.autoreset:
            raise ValueError("EnvStepper needs an auto-resetting environment")
        self.env, self.chunk, self.slots = env, chunk, slots
        fn = compile_unit(partial(step_chunk, env), compile, simd=env_simd(env))
        self._run = GraphedFunction(fn) if compile == "cudagraphs" else fn
        self.reused = torch.zeros((), dtype=torch.long, device=env.device)

    def draw_pool(self) -> tuple:
        """``slots`` fresh starts per row, fields ``[K, N, ...]`` (one call of the environment's sampler)."""
        env, k = self.env, self.slots
        pool = env.draw_starts(k * env.num_envs)
        return type(pool)(*(x.view(k, env.num_envs, *x.shape[1:]) for x in pool))

    def step(self, actions: Tensor) -> None:
        """Advance ``chunk`` steps with ``actions`` (``[chunk, N, ...]``); ``env.state`` follows."""
        if actions.shape[0] != self.chunk:
            raise ValueError(f"actions must be [chunk={self.chunk}, N, ...], got {tuple(actions.shape)}")
        action = actions.float() if self.env.is_continuous else actions.long()
        state, reused = self._run(self.env.state, action, self.draw_pool())
        self.env.state = state
        self.reused = self.reused + reused
