"""A policy as a deployable ONNX or TorchScript model (what ``rl-gpu export`` writes).

The exported model maps observations to the policy's deterministic action, with nothing of rl_gpu needed to
run it:

- inputs: ``obs`` ``[N, O]`` float32 and, for discrete policies, ``action_mask`` ``[N, A]`` bool
  (True = legal). The mask is optional: in ONNX it is an input with a default value (an all-True ``[1, A]``
  initializer that broadcasts; onnxruntime lists it under ``get_overridable_initializers()``), in TorchScript
  an optional argument.
- output: ``action``, ``[N]`` int64 (the most probable legal action) or ``[N, D]`` float32 (the Gaussian's
  mean: unclipped, as the training environments received it (they clip to their bounds), or clamped to
  ``[action_low, action_high]`` inside the model when bounds are given; for SAC's and TD3's actors
  (:mod:`rl_gpu.nn.squashed`) the squashed mean ``bias + scale * tanh(mean)``, inside the bounds by
  construction).

Observation normalisation is part of the model: ``(obs - mean) * rsqrt(var + eps)`` clipped to ``±clip``, with
the checkpoint's running statistics as constants, computed with the same float64-to-float32 casts as
:class:`rl_gpu.nn.normalization.RunningMeanStd`, so the exported action equals ``policy.act(obs, mask,
deterministic=True).action`` (clamped to the bounds when they are given).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from rl_gpu.nn.deploy import DeployedActor
from rl_gpu.nn.memory import is_recurrent
from rl_gpu.runtime.files import atomic_write_bytes, check_output

FORMATS = ("onnx", "torchscript")
SUFFIXES = {".onnx": "onnx", ".pt": "torchscript", ".pth": "torchscript", ".ts": "torchscript"}


class ExportError(ValueError):
    """The policy could not be exported: reported as one line, exit code 2."""


class DeterministicPolicy(nn.Module):
    """``obs [N, O]`` (and an optional ``action_mask [N, A]``) -> deterministic action, self-contained.

    Built from the policy's own :meth:`export_module` (a :class:`~rl_gpu.nn.deploy.DeployedActor`: CPU float32
    copies, the normaliser folded in), so any registered policy kind exports; the policy given is neither moved
    nor modified. ``action_low`` / ``action_high`` (``D`` values each, continuous policies only, both or neither)
    clamp the action to the environment's bounds inside the model, so a deployment needs no clipping of its own.
    """

    def __init__(self, policy: nn.Module, action_low: Sequence[float] | Tensor | None = None,
                 action_high: Sequence[float] | Tensor | None = None) -> None:
        super().__init__()
        export = getattr(type(policy), "export_module", None)
        core = export(policy) if callable(export) else None
        if not isinstance(core, DeployedActor):
            raise ExportError(f"cannot export a {type(policy).__name__}: a policy exports through its "
                              "export_module(), which returns an rl_gpu.nn.deploy.DeployedActor")
        self.core = core
        self.discrete = core.discrete
        self.obs_dim, self.num_actions, self.action_dim = core.obs_dim, core.num_actions, core.action_dim
        self.squash, self.normalize = core.squash, core.normalize
        self.clip_actions = action_low is not None or action_high is not None
        low, high = self._bounds(action_low, action_high)
        self.register_buffer("action_low", low)
        self.register_buffer("action_high", high)

    def _bounds(self, low: Sequence[float] | Tensor | None,
                high: Sequence[float] | Tensor | None) -> tuple[Tensor, Tensor]:
        """``(low [D], high [D])`` float32 (empty when not clipping), checked against the policy."""
        if not self.clip_actions:
            return torch.zeros(0), torch.zeros(0)
        if self.discrete:
            raise ExportError("action bounds apply to continuous actions; this policy's actions are discrete")
        if low is None or high is None:
            raise ExportError("action clipping needs both action_low and action_high")
        low_t = torch.as_tensor(low, dtype=torch.float32).detach().cpu().reshape(-1).clone()
        high_t = torch.as_tensor(high, dtype=torch.float32).detach().cpu().reshape(-1).clone()
        if low_t.numel() != self.action_dim or high_t.numel() != self.action_dim:
            raise ExportError(f"action bounds have {low_t.numel()} and {high_t.numel()} values; the policy "
                              f"has {self.action_dim} action dimensions")
        if bool((low_t > high_t).any()) or bool(low_t.isnan().any() | high_t.isnan().any()):
            raise ExportError(f"invalid action bounds: low {low_t.tolist()}, high {high_t.tolist()}")
        return low_t, high_t

    def forward(self, obs: Tensor, action_mask: Tensor | None = None) -> Tensor:
        """The deterministic action for each row of ``obs``."""
        return self._clip(self.core(obs, action_mask))

    def _clip(self, out: Tensor) -> Tensor:
        if self.clip_actions:
            # max/min rather than clamp with tensor bounds: ONNX's Clip takes scalar bounds only.
            out = torch.minimum(torch.maximum(out, self.action_low), self.action_high)
        return out

    def describe(self) -> dict:
        """Inputs, output and sizes, stored with the exported model as metadata."""
        info = {"obs": ["N", self.obs_dim, "float32"], "normalized_obs": self.normalize}
        size = getattr(self, "state_size", 0)
        if size:
            info["state"] = ["N", size, "float32", "the memory: zeros at an episode's start, then the last state_out"]
            info["state_out"] = ["N", size, "float32", "the memory after obs, to feed back as state"]
        if self.discrete:
            info["action_mask"] = ["N", self.num_actions, "bool", "optional, default all legal"]
            info["action"] = ["N", "int64"]
        elif self.clip_actions:
            mean = "squashed mean" if self.squash else "Gaussian mean"
            info["action"] = ["N", self.action_dim, "float32", f"{mean}, clipped to the action bounds"]
            info["action_low"] = self.action_low.tolist()
            info["action_high"] = self.action_high.tolist()
        elif self.squash:
            info["action"] = ["N", self.action_dim, "float32", "squashed mean, inside the action bounds"]
        else:
            info["action"] = ["N", self.action_dim, "float32", "Gaussian mean, unclipped"]
        return info


class RecurrentDeterministicPolicy(DeterministicPolicy):
    """A policy with memory: ``(obs [N, O], state [N, S], action_mask optional) -> (action, state_out [N, S])``
    (:class:`~rl_gpu.nn.deploy.DeployedRecurrentActor`, action bounds as :class:`DeterministicPolicy`'s)."""

    def __init__(self, policy: nn.Module, action_low: Sequence[float] | Tensor | None = None,
                 action_high: Sequence[float] | Tensor | None = None) -> None:
        super().__init__(policy, action_low, action_high)
        self.state_size = int(self.core.state_size)

    def forward(self, obs: Tensor, state: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        action, after = self.core(obs, state, action_mask)
        return self._clip(action), after


def deployable(policy: nn.Module, action_low: Sequence[float] | Tensor | None = None,
               action_high: Sequence[float] | Tensor | None = None) -> DeterministicPolicy:
    """:class:`DeterministicPolicy`, or :class:`RecurrentDeterministicPolicy` for a policy whose export has memory."""
    cls = RecurrentDeterministicPolicy if is_recurrent(policy) else DeterministicPolicy
    return cls(policy, action_low, action_high)


def _inputs(model: DeterministicPolicy) -> dict[str, Tensor]:
    """Example inputs by name, in the model's argument order."""
    # Batch 2: a traced batch of 1 would be specialised to exactly 1.
    example = {"obs": torch.randn(2, model.obs_dim)}
    if isinstance(model, RecurrentDeterministicPolicy):
        example["state"] = torch.zeros(2, model.state_size)
    if model.discrete:
        example["action_mask"] = torch.ones(2, model.num_actions, dtype=torch.bool)
    return example


@contextlib.contextmanager
def _quiet():
    """Silence the exporters' progress prints, warnings and log lines (none of them concern the user)."""
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        onnx_logger.setLevel(level)


def to_onnx_bytes(policy: nn.Module, metadata: dict | None = None, dynamo: bool | None = None, *,
                  action_low: Sequence[float] | Tensor | None = None,
                  action_high: Sequence[float] | Tensor | None = None) -> bytes:
    """The serialised ONNX model of ``policy``'s deterministic action (see the module docstring).

    ``dynamo`` picks torch's exporter: the ``torch.export``-based one (needs ``onnxscript``) or the legacy
    TorchScript-based one; None uses the first when ``onnxscript`` is installed. ``action_low`` /
    ``action_high``: clamp continuous actions to these bounds (:class:`DeterministicPolicy`).
    """
    try:
        import numpy as np
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise ExportError("ONNX export needs onnx (pip install 'rl-gpu[export]')") from None
    model = deployable(policy, action_low, action_high)
    inputs = _inputs(model)
    names, example = list(inputs), tuple(inputs.values())
    outputs = ["action", "state_out"] if isinstance(model, RecurrentDeterministicPolicy) else ["action"]
    if dynamo is None:
        dynamo = importlib.util.find_spec("onnxscript") is not None
    with _quiet():
        if dynamo:
            batch = torch.export.Dim("batch")
            program = torch.onnx.export(
                model, example, None, input_names=names, output_names=outputs, dynamo=True,
                dynamic_shapes={name: {0: batch} for name in names}, verbose=False,
            )
            proto = program.model_proto
        else:
            buffer = io.BytesIO()
            torch.onnx.export(
                model, example, buffer, input_names=names, output_names=outputs, dynamo=False,
                dynamic_axes={name: {0: "batch"} for name in names + outputs}, opset_version=17,
            )
            proto = onnx.load_from_string(buffer.getvalue())
    if model.discrete:
        # An initializer named like a graph input is that input's default value: the mask becomes optional.
        default = np.ones((1, model.num_actions), dtype=np.bool_)
        proto.graph.initializer.append(numpy_helper.from_array(default, name="action_mask"))
    info = {**model.describe(), **(metadata or {})}
    for key, value in info.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = f"rl_gpu.{key}", json.dumps(value)
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


def to_torchscript_bytes(policy: nn.Module, metadata: dict | None = None, *,
                         action_low: Sequence[float] | Tensor | None = None,
                         action_high: Sequence[float] | Tensor | None = None) -> bytes:
    """The serialised TorchScript module of ``policy``'s deterministic action; ``metadata`` (and the
    input/output description) travel as the extra file ``rl_gpu.json``. ``action_low`` / ``action_high``:
    clamp continuous actions to these bounds (:class:`DeterministicPolicy`)."""
    model = deployable(policy, action_low, action_high)
    with _quiet():
        scripted = torch.jit.script(model)
        buffer = io.BytesIO()
        extra = {"rl_gpu.json": json.dumps({**model.describe(), **(metadata or {})})}
        torch.jit.save(scripted, buffer, _extra_files=extra)
    return buffer.getvalue()


def policy_bytes(policy: nn.Module, fmt: str, metadata: dict | None = None, *,
                 action_low: Sequence[float] | Tensor | None = None,
                 action_high: Sequence[float] | Tensor | None = None) -> bytes:
    """``policy``'s deployable model serialised as ``fmt`` (onnx or torchscript), with continuous actions
    clamped to ``[action_low, action_high]`` when given."""
    bounds = {"action_low": action_low, "action_high": action_high}
    if fmt == "onnx":
        return to_onnx_bytes(policy, metadata, **bounds)
    if fmt == "torchscript":
        return to_torchscript_bytes(policy, metadata, **bounds)
    raise ExportError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")


def export_policy(policy: nn.Module, output: Path, fmt: str, metadata: dict | None = None, *,
                  action_low: Sequence[float] | Tensor | None = None,
                  action_high: Sequence[float] | Tensor | None = None,
                  inputs: Sequence[str | Path] = ()) -> Path:
    """Write ``policy``'s deployable model to ``output`` atomically, as ``fmt`` (onnx or torchscript), with
    continuous actions clamped to ``[action_low, action_high]`` when given. ``output`` must be a regular file
    or not exist, and none of ``inputs`` (:func:`rl_gpu.runtime.files.check_output`: never a run's own files)."""
    check_output(output, inputs)
    data = policy_bytes(policy, fmt, metadata, action_low=action_low, action_high=action_high)
    atomic_write_bytes(Path(output), data, inputs)
    return Path(output)
