"""``rl-gpu export``: a checkpoint's policy as a deployable ONNX or TorchScript model."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import tyro

from rl_gpu.cli.parsing import fail, parse
from rl_gpu.interop.export import SUFFIXES, DeterministicPolicy, ExportError, export_policy
from rl_gpu.interop.policy_io import load_policy
from rl_gpu.runtime.checkpoint import CheckpointError

PROG = "rl-gpu export"


@dataclass(frozen=True)
class ExportConfig:
    """Export a checkpoint's policy as a deployable model: observations -> deterministic action."""

    checkpoint: tyro.conf.Positional[Path]
    """checkpoint file written by `rl-gpu train` (best.pt or last.pt)"""
    output: Path
    """file to write"""
    format: Literal["onnx", "torchscript"] | None = None
    """model format (default: from the output's suffix, .onnx or .pt/.pth/.ts)"""

    def resolved_format(self) -> str:
        if self.format is not None:
            return self.format
        fmt = SUFFIXES.get(self.output.suffix.lower())
        if fmt is None:
            raise ValueError(
                f"cannot tell the format from {self.output.name!r}: pass --format onnx or torchscript"
            )
        return fmt


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags and export; exit 2 with a one-line error for a bad checkpoint or missing packages."""
    config = parse(ExportConfig, PROG, argv, description=ExportConfig.__doc__)
    try:
        fmt = config.resolved_format()
        policy, payload = load_policy(config.checkpoint, torch.device("cpu"))
        metadata = {"env_id": payload.get("env_id"), "update": payload.get("update"),
                    "global_step": payload.get("global_step"), "checkpoint": str(config.checkpoint)}
        export_policy(policy, config.output, fmt, metadata)
    except (CheckpointError, ExportError, ValueError, OSError) as e:
        fail(PROG, str(e))
    model = DeterministicPolicy(policy)
    inputs = f"obs [N, {model.obs_dim}] float32"
    if model.discrete:
        inputs += f", action_mask [N, {model.num_actions}] bool (optional)"
        output = "action [N] int64"
    else:
        output = f"action [N, {model.action_dim}] float32"
    print(f"wrote {config.output} ({fmt}): {inputs} -> {output}"
          f"{'; observation normalisation included' if model.normalize else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
