"""Environment ids → environment classes (any :class:`~rl_gpu.core.types.VecEnv`: a
:class:`~rl_gpu.envs.base.TensorEnv`, a host-stepped or engine-backed one), and ``make`` to build a batch by id.

Classes are registered as ``"module:ClassName"`` strings and imported on first use, so importing the registry
does not import every environment (and environment modules may import the registry without a cycle).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import torch

from rl_gpu.core.types import VecEnv

_registry: dict[str, type | str] = {}
_imported: dict[str, type] = {}

PREFIXES: dict[str, str] = {"gym:": "rl_gpu.envs.gymnasium_env:GymnasiumEnv"}
"""Id prefixes that name a family of environments rather than one id: ``"gym:<any Gymnasium id>"`` builds
``GymnasiumEnv("<id>", num_envs, device=..., seed=..., max_episode_steps=..., **kwargs)``."""


def _prefixed(env_id: object) -> tuple[str, str] | None:
    """``(entry point, rest of the id)`` when ``env_id`` starts with a registered prefix."""
    if isinstance(env_id, str):
        for prefix, entry in PREFIXES.items():
            if env_id.startswith(prefix) and len(env_id) > len(prefix):
                return entry, env_id[len(prefix):]
    return None


def _load(entry: str):
    module_name, class_name = entry.split(":")
    return getattr(importlib.import_module(module_name), class_name)


PROTOCOL_MEMBERS = ("spec", "reset", "reset_rows", "step", "observe", "state_dict", "load_state_dict", "close")
"""What a registered class must define: the :class:`~rl_gpu.core.types.VecEnv` protocol."""


def _check_env_class(cls: object, what: str) -> None:
    """Refuse, at the boundary, a class that does not implement the environment protocol."""
    missing = [m for m in PROTOCOL_MEMBERS if not isinstance(cls, type) or m not in dir(cls)]
    if missing:
        raise TypeError(f"{what} is not an environment class (a VecEnv such as a TensorEnv subclass): "
                        f"missing {', '.join(missing)}")


def register(env_id: str, cls: type | str, *, override: bool = False) -> None:
    """Register ``cls`` (an environment class built as ``cls(num_envs, device=, seed=, **kwargs)``, or
    ``"package.module:ClassName"`` imported lazily) as ``env_id``. Re-registering an id raises ``ValueError``
    unless ``override`` is True."""
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id must be a non-empty string, got {env_id!r}")
    if isinstance(cls, str):
        if cls.count(":") != 1:
            raise ValueError(f"entry point must look like 'package.module:ClassName', got {cls!r}")
    else:
        _check_env_class(cls, f"cls {cls!r}")
    if env_id in _registry and not override and _registry[env_id] != cls:
        raise ValueError(f"{env_id!r} is already registered to {_registry[env_id]!r}; pass override=True")
    _registry[env_id] = cls
    _imported.pop(env_id, None)


def registered_ids() -> tuple[str, ...]:
    """Every registered id, sorted."""
    return tuple(sorted(_registry))


def is_known(env_id: str) -> bool:
    """True for a registered id or a prefixed one (``"gym:..."``; the rest is checked when it is built)."""
    return _prefixed(env_id) is not None or env_id in _registry


def env_class(env_id: str) -> type:
    """The class registered as ``env_id`` (importing it if registered by name); for a prefixed id such as
    ``"gym:CartPole-v1"``, the class of its family (:data:`PREFIXES`)."""
    prefixed = _prefixed(env_id)
    if prefixed is not None:
        return _load(prefixed[0])
    try:
        cls = _registry[env_id]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(env_id), _registry, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        families = ", ".join(f"{prefix}<any Gymnasium id>" for prefix in PREFIXES)
        raise ValueError(
            f"unknown environment id {env_id!r}.{hint} "
            f"Registered ids: {', '.join(registered_ids())}, {families}"
        ) from None
    if isinstance(cls, type):
        return cls
    if env_id not in _imported:
        imported = _load(cls)
        _check_env_class(imported, f"{cls!r} (registered as {env_id!r})")
        _imported[env_id] = imported
    return _imported[env_id]


def make(
    env_id: str,
    num_envs: int = 1,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    *,
    max_episode_steps: int | None = None,
    **kwargs: Any,
) -> VecEnv:
    """Build ``num_envs`` environments of type ``env_id`` on ``device``.

    ``kwargs`` go to the class (``autoreset``, ``validate_actions``, and environment parameters such as
    ``g`` for Pendulum-v1, as ``gymnasium.make`` takes them). ``max_episode_steps`` replaces the class's time
    limit for this instance. Unknown ids raise ``ValueError`` listing the registered ones. ``"gym:<id>"``
    wraps Gymnasium's ``<id>`` (:class:`rl_gpu.envs.gymnasium_env.GymnasiumEnv`; ``kwargs`` go to it).
    """
    cls = env_class(env_id)
    steps = max_episode_steps
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0):
        raise ValueError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
    prefixed = _prefixed(env_id)
    if prefixed is not None:
        return cls(
            prefixed[1], num_envs, device=device, seed=seed, max_episode_steps=max_episode_steps, **kwargs
        )
    env = cls(num_envs, device=device, seed=seed, **kwargs)
    if max_episode_steps is not None:
        env.max_episode_steps = max_episode_steps
    return env


register("CartPole-v1", "rl_gpu.envs.cartpole:CartPoleEnv")
register("Acrobot-v1", "rl_gpu.envs.acrobot:AcrobotEnv")
register("MountainCar-v0", "rl_gpu.envs.mountain_car:MountainCarEnv")
register("MountainCarContinuous-v0", "rl_gpu.envs.mountain_car:MountainCarContinuousEnv")
register("Pendulum-v1", "rl_gpu.envs.pendulum:PendulumEnv")
register("RussianRoulette-v0", "rl_gpu.envs.roulette:RussianRouletteVectorized")
