"""int8 exports (``rl-gpu export --quantize int8``): dynamic quantisation of the exported ONNX model, and
what it costs and gains, measured rather than assumed.

- :func:`quantize_int8`: onnxruntime's ``quantize_dynamic`` (int8 weights; activations quantised per call
  from their observed range), metadata kept, ``rl_gpu.quantized = "int8"`` added.
- :func:`held_out_observations`: observations the policy actually meets, drawn by stepping the checkpoint's
  environment with the float policy (sampled actions, so states vary) on seeds of their own.
- :func:`agreement`: the int8 model's actions against the float model's on those observations (discrete: the
  fraction of equal actions; continuous: max and mean absolute difference).
- :func:`latency`: median CPU latency of one call of a model under onnxruntime on one thread.
"""

from __future__ import annotations

import contextlib
import io
import logging
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from rl_gpu.interop.export import DeterministicPolicy, ExportError

HELD_OUT = 4096
"""Held-out observations the agreement is measured on."""
LATENCY_RUNS = 200
"""Timed calls per batch size; the median is reported."""


def _onnxruntime():
    try:
        import onnxruntime
        from onnxruntime import quantization
    except ImportError:
        raise ExportError("--quantize int8 needs onnxruntime (pip install 'rl-gpu[export]')") from None
    return onnxruntime, quantization


def quantize_int8(model: bytes) -> bytes:
    """The dynamically int8-quantised form of a serialised ONNX model."""
    import onnx

    _, quantization = _onnxruntime()
    root = logging.getLogger()
    level = root.level
    # quantize_dynamic advises pre-processing through the root logger; the graph is already a plain MLP.
    root.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="rl_gpu-quantize-") as tmp:
            source, target = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
            source.write_bytes(model)
            with contextlib.redirect_stdout(io.StringIO()):
                quantization.quantize_dynamic(str(source), str(target),
                                              weight_type=quantization.QuantType.QInt8)
            proto = onnx.load(str(target))
    except (OSError, ValueError, RuntimeError) as e:
        raise ExportError(f"int8 quantisation failed ({str(e).strip().splitlines()[0][:160]})") from None
    finally:
        root.setLevel(level)
    entry = proto.metadata_props.add()
    entry.key, entry.value = "rl_gpu.quantized", '"int8"'
    return proto.SerializeToString()


def session(model: bytes):
    """An onnxruntime CPU session on one thread, quiet."""
    ort, _ = _onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


@torch.no_grad()
def held_out_observations(policy: nn.Module, env_id: str, seed: int, count: int = HELD_OUT,
                          num_envs: int = 64) -> tuple[Tensor, Tensor | None]:
    """``(obs [count, O], action_mask [count, A] or None)`` met by ``policy`` (sampling its actions) in
    ``env_id``'s environments seeded with ``seed``, on the CPU."""
    from rl_gpu.envs.registry import make

    num_envs = max(1, min(num_envs, count))
    try:
        env = make(env_id, num_envs=num_envs, seed=seed, validate_actions=False)
    except (ImportError, ValueError) as e:
        raise ExportError(f"--quantize int8 measures agreement on observations of {env_id}, which cannot be "
                          f"built ({str(e).strip()[:160]})") from None
    try:
        if env.spec.obs_size != policy.obs_dim:
            raise ExportError(f"the policy observes {policy.obs_dim} values, its environment {env_id} gives "
                              f"{env.spec.obs_size}")
        masked = not policy.is_continuous and env.spec.has_action_mask
        generator = torch.Generator().manual_seed(seed)
        step = env.reset()
        observations, masks, total = [], [], 0
        while total < count:
            obs = step.obs.reshape(num_envs, -1).float().cpu()
            mask = step.action_mask.cpu() if masked else None
            observations.append(obs)
            if mask is not None:
                masks.append(mask)
            total += num_envs
            action = policy.act(obs, mask, generator).action
            step = env.step(action.to(env.device))
    finally:
        env.close()
    obs = torch.cat(observations)[:count]
    return obs, (torch.cat(masks)[:count] if masks else None)


@dataclass(frozen=True)
class Agreement:
    """How the int8 model's actions compare with the float model's on held-out observations."""

    observations: int
    discrete: bool
    equal_fraction: float = 1.0
    """discrete: the fraction of observations on which both choose the same action"""
    max_abs_diff: float = 0.0
    """continuous: the largest absolute difference of any action component"""
    mean_abs_diff: float = 0.0
    """continuous: the mean absolute difference over all action components"""

    def describe(self) -> str:
        if self.discrete:
            return (f"int8 agrees with float on {100 * self.equal_fraction:.1f}% of {self.observations} "
                    "held-out observations")
        return (f"int8 actions differ from float by at most {self.max_abs_diff:.3g} (mean "
                f"{self.mean_abs_diff:.3g}) on {self.observations} held-out observations")


def agreement(float_model: DeterministicPolicy, int8_model: bytes, obs: Tensor,
              mask: Tensor | None = None) -> Agreement:
    """Actions of ``int8_model`` (serialised ONNX) against ``float_model`` on ``obs`` (and ``mask``)."""
    with torch.no_grad():
        expected = float_model(obs, mask)
    feeds = {"obs": obs.numpy()}
    if mask is not None:
        feeds["action_mask"] = mask.numpy()
    (got,) = session(int8_model).run(None, feeds)
    got = torch.from_numpy(got)
    if float_model.discrete:
        return Agreement(obs.shape[0], True, equal_fraction=float((got == expected).double().mean()))
    diff = (got.float() - expected).abs()
    return Agreement(obs.shape[0], False, max_abs_diff=float(diff.max()), mean_abs_diff=float(diff.mean()))


def latency(model: bytes, obs_dim: int, batches: tuple[int, ...] = (1, 1024),
            runs: int = LATENCY_RUNS) -> dict[int, float]:
    """Median seconds of one call of ``model`` (serialised ONNX) per batch size, onnxruntime on one CPU
    thread, after a few untimed warm-up calls."""
    sess = session(model)
    generator = torch.Generator().manual_seed(0)
    out = {}
    for batch in batches:
        feeds = {"obs": torch.randn(batch, obs_dim, generator=generator).numpy()}
        for _ in range(5):
            sess.run(None, feeds)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            sess.run(None, feeds)
            times.append(time.perf_counter() - start)
        out[batch] = statistics.median(times)
    return out
