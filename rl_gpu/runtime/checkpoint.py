"""Checkpoints: atomic writes, a checksum over every byte, and loading that never executes code from the file.

A version-3 checkpoint is one ASCII header line and then the ``torch.save`` zip of the payload::

    rl_gpu.checkpoint 3 sha256 <64 lowercase hex digits of the SHA-256 of everything after this line>\\n

Every byte is covered: a flipped bit in the header breaks its exact format, one in the payload its checksum,
and either is refused with one line before anything is unpickled. The payload is read with
``torch.load(weights_only=True)``: tensors and plain values only, never arbitrary objects. Files of versions 1
and 2 (a bare ``torch.save`` zip, written before the checksum existed) are still read, without a checksum; a
version-3 payload without its header is refused.

What the payload holds (all written by ``training/runner.py``): ``env_id``, ``algo``, ``policy_config`` and
``algorithm.policy`` (the policy part, all that evaluating and exporting need: :func:`policy_part`),
``trainer`` (the training state that ``--resume`` continues from: :func:`training_part`), ``update``,
``global_step``, ``seed``, ``config`` and ``validation``. :func:`load_checkpoint` checks the types of those
present; the parts are checked where they are used.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
import reprlib
import warnings
from pathlib import Path
from typing import Any

import torch

from rl_gpu.runtime.files import FileWriteError, atomic_write_bytes, atomic_write_json
from rl_gpu.runtime.hardware import host_memory_bytes

__all__ = ["FORMAT", "VERSION", "READABLE_VERSIONS", "CheckpointError", "FileWriteError",
           "atomic_write_bytes", "atomic_write_json", "save_checkpoint", "load_checkpoint", "checkpoint_bytes",
           "policy_part", "training_part"]

FORMAT = "rl_gpu.checkpoint"
VERSION = 3
"""Written by this version. 3: a header line with the payload's SHA-256. 2: the training state holds the
environments' ``state_dict`` and the algorithm owns its opponent stream. A version-1 file still gives its
policy to ``evaluate`` and ``export``."""
READABLE_VERSIONS = (1, 2, 3)
UNCHECKED_VERSIONS = (1, 2)
"""Versions written before the checksum: read without one."""
HEADER = re.compile(rb"rl_gpu\.checkpoint ([0-9]{1,6}) sha256 ([0-9a-f]{64})\n")
MAGIC = FORMAT.encode()
INT_FIELDS = ("update", "global_step", "seed")
DICT_FIELDS = ("policy_config", "algorithm", "trainer", "config")


class CheckpointError(ValueError):
    """A checkpoint could not be used; the message names the file and the problem, on one line (whatever
    value it quotes)."""

    def __init__(self, message: object = "") -> None:
        text = " ".join(str(message).split())
        super().__init__(text if len(text) <= 600 else text[:597] + "...")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:160]


def checkpoint_bytes(payload: dict[str, Any]) -> bytes:
    """The bytes of a version-3 checkpoint of ``payload`` (its ``format`` and ``version`` entries are set)."""
    buffer = io.BytesIO()
    torch.save({**payload, "format": FORMAT, "version": VERSION}, buffer)
    body = buffer.getvalue()
    return b"%s %d sha256 %s\n" % (MAGIC, VERSION, hashlib.sha256(body).hexdigest().encode()) + body


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Atomically save ``payload`` (tensors, state dicts and plain Python values only) as a checkpoint.

    Raises :class:`~rl_gpu.runtime.files.FileWriteError` (one line) when the file cannot be written or the
    path is not a regular file of ours; the previous file is then unchanged."""
    atomic_write_bytes(Path(path), checkpoint_bytes(payload))


def _torch_load(source: Any, path: Path, map_location: str | torch.device) -> Any:
    try:
        with warnings.catch_warnings():
            # A crafted or foreign pickle makes torch warn about its protocol before refusing it; the refusal
            # below is the one message the user needs.
            warnings.simplefilter("ignore")
            return torch.load(source, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        detail = str(e).split("WeightsUnpickler error:", 1)[-1].strip().splitlines()
        detail_line = detail[0][:160] if detail and "WeightsUnpickler" in str(e) else "unpickling refused"
        raise CheckpointError(
            f"{path}: refused, the file holds something other than tensors and plain values ({detail_line}); "
            "it was not executed"
        ) from None
    except MemoryError:
        raise CheckpointError(f"{path}: not a readable checkpoint (it claims more memory than there is)") \
            from None
    except Exception as e:  # noqa: BLE001 - weights-only unpickling ran no code; any failure means a bad file
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupt: {_first_line(e)})") \
            from None


def _read(path: Path) -> bytes:
    try:
        size, memory = os.stat(path).st_size, host_memory_bytes()
        if size > memory // 2:  # read whole, then parsed: a file of half the memory cannot be loaded
            raise CheckpointError(f"{path}: {size:,} bytes, more than half of this machine's {memory:,} bytes of "
                                  "memory (a checkpoint is read whole); refused")
        return path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or _first_line(e)})") from None


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``: tensors and plain values only, never arbitrary objects.

    Raises :class:`CheckpointError` with a one-line reason for a missing, truncated, damaged (checksum),
    foreign or unsafe file, or one whose entries have the wrong types.
    """
    path = Path(path)
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: not a file")
    data = _read(path)
    if data.startswith(MAGIC):
        end = data.find(b"\n", 0, 128)
        match = HEADER.fullmatch(data[: end + 1]) if end >= 0 else None
        if match is None:
            raise CheckpointError(f"{path}: damaged checkpoint (its header line is not '{FORMAT} <version> "
                                  "sha256 <digest>'); refused")
        version, digest, body = int(match.group(1)), match.group(2).decode(), data[end + 1:]
        if version in UNCHECKED_VERSIONS:
            raise CheckpointError(f"{path}: damaged checkpoint (its header names version {version}, which has "
                                  "no header); refused")
        if version not in READABLE_VERSIONS:
            raise CheckpointError(f"{path}: checkpoint format version {version}; this rl_gpu reads versions "
                                  f"{', '.join(map(str, READABLE_VERSIONS))}")
        if hashlib.sha256(body).hexdigest() != digest:
            raise CheckpointError(f"{path}: damaged checkpoint (its SHA-256 does not match the one recorded "
                                  "when it was written: a changed bit, or a partial copy); refused")
        payload = _torch_load(io.BytesIO(body), path, map_location)
        marker = (payload.get("format"), payload.get("version")) if isinstance(payload, dict) else None
        if marker != (FORMAT, version):
            raise CheckpointError(f"{path}: damaged checkpoint (the payload does not match its header)")
    else:
        payload = _torch_load(io.BytesIO(data), path, map_location)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise CheckpointError(f"{path}: not an rl_gpu checkpoint (no '{FORMAT}' marker)")
        version = payload.get("version")
        if version not in UNCHECKED_VERSIONS:
            if version in READABLE_VERSIONS:
                raise CheckpointError(f"{path}: a version-{version} checkpoint without its checksum header "
                                      "(edited or damaged); refused")
            raise CheckpointError(f"{path}: checkpoint format version {version!r}; this rl_gpu reads "
                                  f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    _check_fields(payload, path)
    return payload


def _check_fields(payload: dict, path: Path) -> None:
    """The types of the top-level entries that are present."""
    bad = [k for k in payload if not isinstance(k, str)]
    if bad:
        raise CheckpointError(f"{path}: malformed checkpoint (entry names that are not strings: {bad[:3]!r})")
    for name in INT_FIELDS:
        value = payload.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise CheckpointError(f"{path}: malformed checkpoint ({name} is {_short(value)}, expected a "
                                  "non-negative integer)")
    for name in DICT_FIELDS:
        value = payload.get(name)
        if value is not None and not _string_keyed(value):
            raise CheckpointError(f"{path}: malformed checkpoint ({name} is {_short(value)}, expected a "
                                  "dictionary with string keys)")
    for name in ("env_id", "algo"):
        value = payload.get(name)
        if value is not None and not isinstance(value, str):
            raise CheckpointError(f"{path}: malformed checkpoint ({name} is {_short(value)}, expected a "
                                  "string)")


def _string_keyed(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _short(value: object) -> str:
    """A bounded description of a value for an error message (reprlib caps length and depth)."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return f"{type(value).__name__} {reprlib.repr(value)}"


def policy_part(payload: dict, path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(policy_config, the policy's state dict)`` of a loaded checkpoint, with their types checked; raises
    :class:`CheckpointError` (``... does not hold a usable policy (why)``) otherwise."""
    def refuse(why: str) -> CheckpointError:
        return CheckpointError(f"{path}: checkpoint does not hold a usable policy ({why})")

    config, algorithm = payload.get("policy_config"), payload.get("algorithm")
    if config is None:
        raise refuse("no policy_config")
    if not _string_keyed(algorithm) or "policy" not in algorithm:
        raise refuse("no algorithm.policy weights")
    state = algorithm["policy"]
    if not _string_keyed(state):
        raise refuse(f"algorithm.policy is {_short(state)}, expected a dictionary of tensors")
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise refuse(f"algorithm.policy[{name!r}] is {_short(value)}, not a tensor")
        if value.layout != torch.strided or value.is_quantized or value.is_meta:
            raise refuse(f"algorithm.policy[{name!r}] is a {value.layout} tensor, not a dense one")
    return config, state


def training_part(payload: dict, path: str | Path) -> dict[str, Any]:
    """The ``trainer`` entry (what ``--resume`` continues from) of a loaded checkpoint;
    :class:`CheckpointError` when it has none."""
    trainer = payload.get("trainer")
    if not _string_keyed(trainer):
        raise CheckpointError(f"{path}: not a resumable checkpoint (it holds no training state)")
    return trainer
