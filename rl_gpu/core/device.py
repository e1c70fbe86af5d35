"""Choosing the device a run lives on."""

from __future__ import annotations

import os

import torch

from rl_gpu.core.errors import UsageError

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA if available else CPU; ``cuda`` without a usable GPU is a :class:`UsageError`."""
    if name not in DEVICES:
        raise UsageError(f"--device must be auto, cpu or cuda, got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            "--device cuda was requested but no CUDA device is available "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); use --device cpu or auto"
        )
    return torch.device(name)


def check_device(device: object, what: str = "device") -> torch.device:
    """``device`` (a string or a ``torch.device``) as a ``torch.device`` that tensors can live on here: the CPU, or
    a visible CUDA device. Anything else (a misspelt name, ``meta``, ``cuda`` without a GPU, ``cuda:3`` with one GPU)
    is a ``ValueError`` naming it and what is visible."""
    try:
        resolved = torch.device(device)  # type: ignore[arg-type]
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f"{what} {device!r} is not a device ({str(e).strip()[:100]}); use 'cpu' or 'cuda'") \
            from None
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    seen = f"visible: cpu{''.join(f', cuda:{i}' for i in range(visible))}"
    if resolved.type == "cuda":
        if visible == 0:
            raise ValueError(f"{what} {device!r}: no CUDA device is visible here ({seen}); use 'cpu'")
        if resolved.index is not None and resolved.index >= visible:
            raise ValueError(f"{what} {device!r}: there is no such CUDA device ({seen})")
    elif resolved.type != "cpu":
        raise ValueError(f"{what} {device!r}: rl_gpu runs on the CPU or on CUDA devices ({seen})")
    return resolved


def synchronize(device: torch.device) -> None:
    """Wait for ``device`` to finish its queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def thread_limit() -> int:
    """The most intra-op threads a command may ask for: 4 per CPU."""
    return 4 * (os.cpu_count() or 1)


def check_threads(threads: int) -> None:
    """Refuse a ``--threads`` beyond :func:`thread_limit` (a machine-dependent limit, so checked when a command
    starts rather than when a configuration is read)."""
    if threads > thread_limit():
        raise UsageError(f"--threads must be between 1 and {thread_limit()} (4 x this machine's "
                         f"{os.cpu_count() or 1} CPUs), got {threads:,}")
