"""The host allocator's settings for a training process on the CPU.

Left to itself, glibc's ``malloc`` hands a block of more than 128 KiB (a threshold that adapts up to 32 MiB) to
the kernel when it is freed, and shrinks its heap whenever the free memory at its top passes twice that
threshold. A PPO update allocates and frees its activations, megabytes each, for every minibatch: their pages
then come back from the kernel zeroed, one page fault per 4 KiB on first touch, tens of thousands per iteration,
and how many depends on the allocation history, so the same code runs at different speeds in different
processes. Keeping freed memory on the heap removes both (benchmarks/HISTORY.md section 14). XLA and the GPU
caching allocator keep their buffers for the same reason.

Python's own cyclic garbage collector is the other half: see :func:`collector_spares_startup`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os
from collections.abc import Callable, Iterator

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
"""Blocks below this come from the heap (glibc's ceiling for the setting on 64-bit machines)."""
TRIM_THRESHOLD = 1 << 30
"""Free memory at the heap's top is given back to the kernel only beyond this."""
OPT_OUT = "RL_GPU_KEEP_FREED_MEMORY"
"""Environment variable: ``0`` leaves ``malloc``'s settings alone."""


def _user_tuned_malloc() -> bool:
    env = os.environ
    return (env.get(OPT_OUT, "1") == "0" or "malloc" in env.get("GLIBC_TUNABLES", "")
            or any(name.startswith("MALLOC_") for name in env))


@functools.cache
def keep_freed_host_memory() -> bool:
    """Ask glibc's ``malloc`` to serve blocks below :data:`MMAP_THRESHOLD` from its heap and keep freed memory
    there up to :data:`TRIM_THRESHOLD` (``mallopt``); returns whether it did. Nothing changes without glibc,
    when the user set ``malloc``'s own tunables (``GLIBC_TUNABLES``, ``MALLOC_*``), or with
    ``RL_GPU_KEEP_FREED_MEMORY=0``. Process-wide and lasting; called once per process by the training,
    evaluation and benchmark entry points."""
    if _user_tuned_malloc():
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl and macOS have mallopt with other meanings)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


@contextlib.contextmanager
def collector_spares_startup() -> Iterator[Callable[[], None]]:
    """Within, calling the function it yields moves every object Python's cyclic garbage collector then tracks
    into its permanent generation (``gc.freeze``), once; on leaving, they are handed back (``gc.unfreeze``), so
    whatever a run left in reference cycles is collected after it as before.

    Why: a training process holds half a million tracked objects once torch, TorchDynamo and Inductor have
    loaded and compiled, and a full collection walks all of them (0.25-0.4 s here), every few seconds, because
    each iteration's short-lived objects that happen to survive a younger collection count towards the next
    full one. Frozen after the first update, they are no longer walked; new objects are collected as always.
    Nothing is done where the collector is off or something else already froze objects (a caller that forks
    workers): their freezing stays theirs.
    """
    frozen = False

    def freeze() -> None:
        nonlocal frozen
        if not frozen and gc.isenabled() and gc.get_freeze_count() == 0:
            gc.freeze()
            frozen = True

    try:
        yield freeze
    finally:
        if frozen:
            gc.unfreeze()
