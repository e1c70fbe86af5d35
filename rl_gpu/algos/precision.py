"""Mixed precision for an update: the networks' matrix products in bf16 or fp16 under ``torch.autocast``, with
master weights, the optimiser, normalisers, advantages and losses in fp32; for fp16, a loss scaler whose state
stays on the device.

- ``fp32``: no autocast.
- ``bf16``: autocast to bfloat16 (fp32's range: no loss scaling).
- ``fp16``: autocast to float16 and :class:`~rl_gpu.algos.loss_scaler.LossScaler`: the loss is multiplied by a scale before the backward
  pass; the gradients are divided by it; a step whose gradients are not finite is skipped (undone on the device)
  and the scale halved; after ``growth_interval`` finite steps in a row the scale doubles. Unlike
  ``torch.amp.GradScaler``, nothing is read back to decide a skip, so the update keeps no host synchronisation.
- ``auto``: bf16 for a policy with convolutions on a CUDA device that supports it, else fp32. On an H200 bf16 made
  the MinAtar CNN's update 3.5x faster and a 256x256 MLP's 0.97x (its products too small to gain). On a CPU
  the gain depends on its instructions: without bf16 arithmetic, bf16 products run many times slower than fp32;
  with AVX512-BF16 they run faster (``benchmarks/precision.py`` measures both ways); ``auto`` keeps fp32 there.
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
    return "bf16" if convolutional and device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a resolved precision (None: fp32, no autocast)."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
