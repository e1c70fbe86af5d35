"""Named random streams derived from one seed, disjoint across purposes and across processes (ranks)."""

from __future__ import annotations

import hashlib


def derive_seed(seed: int, purpose: str, rank: int = 0) -> int:
    """A 62-bit seed for one named random stream of a run.

    Training environments, validation, final evaluation and the ``evaluate`` command each get their own
    stream, so their games are disjoint in distribution: no evaluation reuses a training seed. ``rank`` (a
    process's index in data-parallel training) gives each process its own streams; rank 0 keeps the streams
    of a single-process run, so one process reproduces earlier runs exactly.
    """
    key = f"{int(seed)}/{purpose}" if rank == 0 else f"{int(seed)}/{purpose}/rank-{int(rank)}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2
