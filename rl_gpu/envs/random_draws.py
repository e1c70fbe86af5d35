"""Random draws inside a transition: a counter-based hash of (row key, counter, stream), in torch.

A transition must stay a pure function of the state (the same seed gives the same episode, a restored state
continues exactly, compiled and graph-captured code holds no generator), yet some environments draw mid-episode:
sticky actions, spawning enemies, resampled commands, pushes. Each row then keeps a random ``key`` (drawn with its
episode start) and a step counter in its inner state, and :func:`hash_uniform` turns them into uniform numbers.
(:func:`starts_drawn_at_once`: whether an environment's start sampler may draw several steps' starts in one call.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_gpu.core.pytree import tree_leaves, tree_stack

_M32 = 0xFFFFFFFF


def _mul32(x: Tensor, c: int) -> Tensor:
    """``(x * c) mod 2**32`` for int64 ``x`` in ``[0, 2**32)`` without int64 overflow (16-bit halves)."""
    return ((x & 0xFFFF) * c + (((x >> 16) * c) & 0xFFFF) * 65536) & _M32


def _hash32(x: Tensor) -> Tensor:
    """A 32-bit integer mixer (lowbias32) on int64 tensors holding values in ``[0, 2**32)``."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hash_uniform(key: Tensor, counter: Tensor, stream: int, size: int) -> Tensor:
    """``[N, size]`` float64 in ``[0, 1)``: a pure function of each row's ``key`` and ``counter`` (``[N]``
    integer-valued tensors) and ``stream``, so draws made inside a transition need no generator."""
    k = key.long().unsqueeze(1) & _M32
    c = counter.long().unsqueeze(1) & _M32
    lanes = torch.arange(size, device=key.device).unsqueeze(0) + 64 * stream
    x = _hash32(k ^ _hash32((_mul32(c, 0x9E3779B1) + lanes) & _M32))
    return _hash32(x ^ 0x5BD1E995).double() / 2.0**32


def draw_keys(n: int, generator: torch.Generator, device: torch.device | str) -> Tensor:
    """``[N]`` int64 keys in ``[0, 2**32)`` for fresh episodes, from the reset generator."""
    return torch.randint(0, 2**32, (n,), generator=generator, device=device, dtype=torch.int64)


def starts_drawn_at_once(env, steps: int = 3) -> bool:
    """``env.draw_starts(k N)`` gives, bit for bit, what k calls of ``env.draw_starts(N)`` give one after the
    other (tried once with ``steps`` calls, the generator put back after): then the rollout engine draws a whole
    rollout's starts in one call. True of a CPU sampler that makes one draw a call, whose numbers a CPU generator
    produces one after another (a cart-pole's ``[4, N]`` draw is not: its rows interleave); never assumed on other
    devices, whose generators advance by blocks a call, nor for a sampler that refuses other row counts."""
    if env.device.type != "cpu":
        return False
    n, saved = env.num_envs, env.generator.get_state()
    try:
        apart = tree_leaves(tree_stack([env.draw_starts(n) for _ in range(steps)]))
        env.generator.set_state(saved)
        together = tree_leaves(env.draw_starts(steps * n))
    except Exception:  # a sampler for its own N rows only (a multi-task batch's): a call per step
        return False
    finally:
        env.generator.set_state(saved)
    return len(apart) == len(together) and all(
        a.dtype == b.dtype and a.flatten(0, 1).shape == b.shape and torch.equal(a.flatten(0, 1), b)
        for a, b in zip(apart, together))
