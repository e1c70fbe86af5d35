"""The host allocator's settings for a training process on the CPU.

Left to itself, glibc's ``malloc`` hands a block of more than 128 KiB (a threshold that adapts up to 32 MiB) to
the kernel when it is freed, and shrinks its heap whenever the free memory at its top passes twice that
threshold. A PPO update allocates and frees its activations, megabytes each, for every minibatch: their pages
then come back from the kernel zeroed, one page fault per 4 KiB on first touch, tens of thousands per iteration,
and how many depends on the allocation history, so the same code runs at different speeds in different
processes. Keeping freed memory on the heap removes both (benchmarks/HISTORY.md section 14). XLA and the GPU
caching allocator keep their buffers for the same reason.
"""

from __future__ import annotations

import ctypes
import functools
import os

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
