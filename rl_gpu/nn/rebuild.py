"""Rebuilding a checkpoint's policy, checked against its architecture before anything is allocated:
:func:`load_policy` (the network and the checkpoint's payload) and :func:`rebuild_policy`.

The network is rebuilt from ``policy_config`` on the ``meta`` device first (no memory, no initialisation), so
the stored weights are checked against the architecture before anything is allocated: every tensor the
architecture needs, with its exact shape and dtype, and nothing else. A checkpoint of another environment or
architecture, or with NaN or infinite weights, is refused with one line naming the file and the mismatch.
Here, below the algorithms, so that an algorithm can read a policy it learns from (distillation's teacher);
:mod:`rl_gpu.interop.policy_io` builds ``rl_gpu.load`` on it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from rl_gpu.nn.cpu_kernels import use_cpu_kernels
from rl_gpu.nn.kinds import policy_kind, policy_kind_names
from rl_gpu.runtime.checkpoint import CheckpointError, load_checkpoint, policy_part


def _unusable(path: Path, why: str) -> CheckpointError:
    return CheckpointError(f"{path}: checkpoint does not hold a usable policy ({why})")


def _finite_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


MAX_JSON_CHARS = 65536


def _plain_json(value: Any) -> bool:
    """An object whose values are strings, finite numbers, booleans, None, lists and objects of them, at most
    :data:`MAX_JSON_CHARS` characters as JSON."""
    def plain(v: Any, depth: int) -> bool:
        if depth > 8:
            return False
        if v is None or isinstance(v, (str, bool)) or _finite_number(v):
            return True
        if isinstance(v, (list, tuple)):
            return all(plain(x, depth + 1) for x in v)
        if isinstance(v, dict):
            return all(isinstance(k, str) and plain(x, depth + 1) for k, x in v.items())
        return False

    if not isinstance(value, dict) or not plain(value, 0):
        return False
    return len(json.dumps(value)) <= MAX_JSON_CHARS


def _checked_config(config: dict, path: Path, num_tensors: int) -> dict:
    """``policy_config`` with its kind, keys and value types checked (sizes: against the weights)."""
    kind = config.get("kind")
    if not isinstance(kind, str) or kind not in policy_kind_names():
        raise _unusable(path, f"unknown policy kind {str(kind)[:40]!r}; known: "
                        f"{', '.join(map(repr, policy_kind_names()))} (a kind of your own loads where it is "
                        "registered: rl_gpu.nn.kinds.register_policy_kind)")
    spec = policy_kind(kind)
    allowed = dict(spec.keys)
    unknown = sorted(set(config) - set(allowed) - {"kind"})
    if unknown:
        raise _unusable(path, f"policy_config has unknown entries {unknown[:5]}")
    missing = [k for k in spec.required if k not in config]
    if missing:
        raise _unusable(path, f"policy_config lacks {', '.join(missing)}")
    for key, value in config.items():
        expected = allowed.get(key)
        if expected is int and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise _unusable(path, f"policy_config {key} is {value!r}, expected a positive integer")
        if expected is bool and not isinstance(value, bool):
            raise _unusable(path, f"policy_config {key} is {value!r}, expected true or false")
        if expected is float and not _finite_number(value):
            raise _unusable(path, f"policy_config {key} is {value!r}, expected a finite number")
        if expected == "bounds" and (not isinstance(value, (list, tuple)) or len(value) > 4096
                                     or not all(_finite_number(v) for v in value)):
            raise _unusable(path, f"policy_config {key} is {str(value)[:80]}, expected a list of finite numbers")
        if expected == "json" and not _plain_json(value):
            raise _unusable(path, f"policy_config {key} is {str(value)[:80]}, expected an object of plain JSON "
                            f"values (at most {MAX_JSON_CHARS:,} characters)")
    for key in [k for k, kind in allowed.items() if kind is list and k in config]:
        sizes = config[key]
        # Each hidden layer holds at least a weight: more layers than the stored tensors could fill is a
        # mismatch, found before building anything.
        if (not isinstance(sizes, (list, tuple)) or len(sizes) > num_tensors
                or any(isinstance(h, bool) or not isinstance(h, int) or h <= 0 for h in sizes)):
            raise _unusable(path, f"policy_config {key} is {str(sizes)[:80]}, expected a list of positive "
                            "integers matching the stored weights")
    return dict(config)


def rebuild_policy(config: Any, state: dict[str, Tensor], path: str | Path,
                   require_finite: bool = True) -> nn.Module:
    """The policy described by ``config`` holding ``state``'s tensors (on their device), checked: the same
    tensor names, shapes and dtypes as the architecture, and (``require_finite``) finite weights."""
    path = Path(path)
    config = _checked_config(config, path, len(state))
    try:
        with torch.device("meta"):
            skeleton = policy_kind(config["kind"]).build(config)
    except (TypeError, ValueError) as e:
        raise _unusable(path, f"policy_config {str(e).strip()[:160]}") from None
    except RuntimeError as e:  # sizes no tensor can have (torch's own overflow checks, even on "meta")
        raise _unusable(path, f"policy_config asks for tensors no machine can hold: "
                        f"{str(e).strip()[:160]}") from None
    expected = skeleton.state_dict()
    missing, unexpected = sorted(expected.keys() - state.keys()), sorted(state.keys() - expected.keys())
    if missing or unexpected:
        parts = ([f"missing {', '.join(missing[:4])}"] if missing else []) + (
            [f"unexpected {', '.join(map(repr, unexpected[:4]))}"] if unexpected else [])
        raise _unusable(path, f"the weights do not match policy_config: {'; '.join(parts)}")
    for name, want in expected.items():
        got = state[name]
        if tuple(got.shape) != tuple(want.shape):
            raise _unusable(path, f"{name} has shape {list(got.shape)}, the architecture in policy_config "
                            f"needs {list(want.shape)}: weights of another environment or architecture")
        if got.dtype != want.dtype:
            raise _unusable(path, f"{name} is {got.dtype}, the architecture needs {want.dtype}")
    if require_finite:
        bad = [n for n, t in state.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
        if bad:
            raise CheckpointError(f"{path}: the policy's weights hold NaN or infinite values "
                                  f"({', '.join(bad[:4])}); refusing to use them")
        negative = [n for n in ("obs_rms.var", "obs_rms.count") if n in state and bool((state[n] < 0).any())]
        if negative:
            raise CheckpointError(f"{path}: the policy's observation statistics are negative "
                                  f"({', '.join(negative)}); refusing to use them")
    # assign=True: the module takes the stored tensors themselves (copies, so the payload stays untouched).
    skeleton.load_state_dict({k: v.clone() for k, v in state.items()}, assign=True)
    leftover = [n for n, t in [*skeleton.named_parameters(), *skeleton.named_buffers()] if t.is_meta]
    if leftover and getattr(skeleton, "rebuilt_off_meta", False):
        # Buffers computed at construction and not stored (a Hugging Face model's rotary frequencies): built for
        # real now that the stored weights matched the architecture, so it takes no more memory than they do.
        skeleton = policy_kind(config["kind"]).build(config)
        skeleton.load_state_dict(state)
        leftover = []
    if leftover:
        raise _unusable(path, f"no stored value for {', '.join(leftover[:4])}")
    return skeleton


def load_policy(path: str | Path, device: torch.device | str = "cpu",
                require_finite: bool = True) -> tuple[nn.Module, dict]:
    """Rebuild the policy stored in a checkpoint; returns ``(policy in eval mode on device, payload)``.

    Raises :class:`~rl_gpu.runtime.checkpoint.CheckpointError` with a one-line reason when the file holds no
    usable policy: unreadable or damaged, weights that do not match ``policy_config``, or (``require_finite``)
    NaN or infinite weights."""
    path = Path(path)
    payload = load_checkpoint(path, "cpu")
    config, state = policy_part(payload, path)
    policy = rebuild_policy(config, state, path, require_finite)
    return use_cpu_kernels(policy.to(device).eval()), payload
