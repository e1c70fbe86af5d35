"""Checking what an environment is built with, before anything is allocated: the number of rows and the
parameters (a frozen dataclass per environment, ``params_type``).

A parameter is checked against its declared type (an ``int`` is not a ``bool``, a ``float`` is finite:
:mod:`rl_gpu.core.schema`) and, when the dataclass names it in its ``positive`` class attribute, must be above 0.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.core.schema import check_fields

MAX_NUM_ENVS = 2**31 - 1
"""Most rows of one batch (indices stay 32-bit; memory is checked when the state is allocated)."""


def check_num_envs(num_envs: Any) -> int:
    """``num_envs`` as a Python int: any integer (numpy's too) from 1 to :data:`MAX_NUM_ENVS`, else
    ``ValueError``."""
    if isinstance(num_envs, bool):
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    try:
        n = operator.index(num_envs)
    except TypeError:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}") from None
    if not 1 <= n <= MAX_NUM_ENVS:
        raise ValueError(f"num_envs must be between 1 and {MAX_NUM_ENVS:,}, got {n:,}")
    return n


def build_params(params_type: type, values: dict[str, Any], env_name: str) -> Any:
    """``params_type(**values)``, its own checks' ``TypeError`` or ``ValueError`` (an unknown name, a range the
    wrong way round) as a one-line :class:`~rl_gpu.core.errors.UsageError` naming the environment."""
    try:
        return params_type(**values)
    except UsageError:
        raise
    except (TypeError, ValueError) as e:
        raise UsageError(f"{env_name}: {e}") from None


def check_params(params: Any, env_name: str) -> None:
    """Raise :class:`~rl_gpu.core.errors.UsageError` (a ``ValueError``) naming the first parameter of the
    dataclass ``params`` whose value does not match its type, or is not above 0 where the dataclass's
    ``positive`` names it."""
    def label(name: str) -> str:
        return f"{env_name} parameter {name}"

    check_fields(params, label=label)
    for name in getattr(type(params), "positive", ()):
        value = getattr(params, name)
        if not value > 0:
            raise UsageError(f"{label(name)} must be above 0, got {value!r}")


class EnvContractError(ValueError):
    """An environment's output breaks the :class:`~rl_gpu.envs.base.TensorEnv` contract (a one-line message
    naming the environment class, the output, what was expected and what it got)."""


def check_starts(env: Any, inner: Any, n: int) -> Any:
    """``inner`` (what ``env._sample_initial_state`` drew) when it is a NamedTuple of tensors with ``n`` rows
    each, else :class:`EnvContractError`."""
    name = type(env).__name__
    fields = getattr(type(inner), "_fields", None)
    if not isinstance(inner, tuple) or not fields or not all(isinstance(t, Tensor) for t in inner):
        got = f"a {type(inner).__name__}" + (" with a field that is not a tensor" if fields else "")
        raise EnvContractError(f"{name}._sample_initial_state must return a NamedTuple of tensors (one row "
                               f"per environment), got {got}")
    for field, t in zip(fields, inner):
        if t.dim() == 0 or t.shape[0] != n:
            raise EnvContractError(f"{name}._sample_initial_state: state field {field!r} must have {n} rows "
                                   f"(one per environment), got a {t.dtype} tensor of shape {tuple(t.shape)}")
    return inner


def check_like(what: str, t: Any, ref: Tensor, n: int, exact: bool = True) -> None:
    """``ValueError`` unless ``t`` is a tensor of ``ref``'s shape with ``n`` rows, and (``exact``) its dtype: a
    state being set or loaded against the one the environment holds."""
    want = (n, *ref.shape[1:])
    if not isinstance(t, Tensor) or tuple(t.shape) != want or (exact and t.dtype != ref.dtype):
        got = f"a {t.dtype} tensor of shape {tuple(t.shape)}" if isinstance(t, Tensor) else f"a {type(t).__name__}"
        raise ValueError(f"{what}: expected a {ref.dtype} tensor of shape {want}, got {got}")


def split_id_parameters(family: str, text: str) -> tuple[str, dict[str, Any]]:
    """``"navigation?n_agents=3&shared_rew=false"`` -> ``("navigation", {"n_agents": 3, "shared_rew": False})``:
    the parameters of a prefixed id (``family``: ``"vmas:"``, ``"pettingzoo:"``) written in the id, so a
    checkpoint's id rebuilds the same task. Values are ``true`` / ``false``, integers, decimals, or else strings."""
    name, _, query = text.partition("?")
    kwargs: dict[str, Any] = {}
    for part in query.split("&") if query else ():
        key, eq, raw = part.partition("=")
        if not eq or not key.isidentifier() or key in kwargs:
            raise UsageError(f"{family}{name}: parameters are written name=value, joined by '&', each once "
                             f"(got {part!r})")
        kwargs[key] = _value(raw)
    return name, kwargs


def _value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        if kind is int or math.isfinite(value):
            return value
    return text
