"""Checkpoints and run files: atomic writes, and loading that never executes code from the file."""

from __future__ import annotations

import io
import json
import os
import pickle
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

FORMAT = "rl_gpu.checkpoint"
VERSION = 2
"""Written by this version. 2: the training state holds the environments' ``state_dict`` and the algorithm owns
its opponent stream; a version-1 file still gives its policy to ``evaluate`` and ``export``."""
READABLE_VERSIONS = (1, 2)


class CheckpointError(ValueError):
    """A checkpoint could not be used; the message names the file and the problem."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old file or the new one, never a mix.

    The bytes go to a temporary file in the same directory, are flushed and fsynced, and the file is renamed
    over ``path`` (atomic on POSIX); the directory is fsynced so the rename itself survives a power loss.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_json(path: Path, obj: Any) -> None:
    """:func:`atomic_write_bytes` of pretty-printed JSON."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Atomically save ``payload`` (tensors, state dicts and plain Python values only) as a checkpoint."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "version": VERSION, **payload}, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``: tensors and plain values only, never arbitrary objects.

    Raises :class:`CheckpointError` with a one-line reason for a missing, truncated, foreign or unsafe file.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint file")
    if not path.is_file():
        raise CheckpointError(f"{path}: not a file")
    try:
        with warnings.catch_warnings():
            # A crafted or foreign pickle makes torch warn about its protocol before refusing it; the refusal
            # below is the one message the user needs.
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        detail = str(e).split("WeightsUnpickler error:", 1)[-1].strip().splitlines()
        detail_line = detail[0][:160] if detail and "WeightsUnpickler" in str(e) else "unpickling refused"
        raise CheckpointError(
            f"{path}: refused, the file holds something other than tensors and plain values ({detail_line}); "
            "it was not executed"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupt: {first[:160]})")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an rl_gpu checkpoint (no '{FORMAT}' marker)")
    if payload.get("version") not in READABLE_VERSIONS:
        raise CheckpointError(f"{path}: checkpoint format version {payload.get('version')!r}; this rl_gpu reads "
                              f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    return payload
