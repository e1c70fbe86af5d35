"""Mixed precision for an update: the networks' matrix products in bf16 or fp16 under ``torch.autocast``, with
master weights, the optimiser, normalisers, advantages and losses in fp32; for fp16, a loss scaler whose state
stays on the device.

- ``fp32``: no autocast.
- ``bf16``: autocast to bfloat16 (fp32's range: no loss scaling).
- ``fp16``: autocast to float16 and :class:`~rl_gpu.algos.loss_scaler.LossScaler`: the loss is multiplied by a scale before the backward
  pass; the gradients are divided by it; a step whose gradients are not finite is skipped (undone on the device)
  and the scale halved; after ``growth_interval`` finite steps in a row the scale doubles. Unlike
  ``torch.amp.GradScaler``, nothing is read back to decide a skip, so the update keeps no host synchronisation.
- ``auto``: bf16 for a policy with convolutions on a CUDA device that supports it or on a CPU with bf16
  arithmetic (:func:`cpu_has_bf16`), else fp32: a CNN's products are large enough to gain, a small MLP's are not;
  a CPU without bf16 instructions emulates them, many times slower than fp32 (``benchmarks/precision.py``
  measures each path; the figures are in benchmarks/README.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: the algorithm registry reads PRECISIONS without it
    import torch

PRECISIONS = ("fp32", "bf16", "fp16", "auto")
"""The ``--precision`` choices."""


def resolve_precision(precision: str, device: torch.device, policy: torch.nn.Module | None = None) -> str:
    """``fp32``, ``bf16`` or ``fp16``: ``auto`` decided for ``device`` and ``policy`` (module docstring)."""
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision != "auto":
        return precision
    import torch

    convolutional = policy is not None and any(isinstance(m, torch.nn.Conv2d) for m in policy.modules())
    native = torch.cuda.is_bf16_supported() if device.type == "cuda" else device.type == "cpu" and cpu_has_bf16()
    return "bf16" if convolutional and native else "fp32"


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes in bf16 natively (the ``avx512_bf16`` or ``amx_bf16`` flag; False where the flags
    cannot be read): without it, bf16 products are emulated, many times slower than fp32."""
    try:
        with open(cpuinfo) as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a resolved precision (None: fp32, no autocast)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
