"""Environment ids → :class:`~rl_gpu.envs.base.TensorEnv` classes, and ``make`` to build a batch by id.

Classes are registered as ``"module:ClassName"`` strings and imported on first use, so importing the registry
does not import every environment (and environment modules may import the registry without a cycle).
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

import torch

from rl_gpu.envs.base import TensorEnv

_registry: dict[str, type[TensorEnv] | str] = {}
_imported: dict[str, type[TensorEnv]] = {}


def register(env_id: str, cls: type[TensorEnv] | str, *, override: bool = False) -> None:
    """Register ``cls`` (a ``TensorEnv`` subclass, or ``"package.module:ClassName"`` imported lazily) as
    ``env_id``. Re-registering an id raises ``ValueError`` unless ``override`` is True."""
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id must be a non-empty string, got {env_id!r}")
    if isinstance(cls, str):
        if cls.count(":") != 1:
            raise ValueError(f"entry point must look like 'package.module:ClassName', got {cls!r}")
    elif not (isinstance(cls, type) and issubclass(cls, TensorEnv)):
        raise TypeError(f"cls must be a TensorEnv subclass or an entry-point string, got {cls!r}")
    if env_id in _registry and not override and _registry[env_id] != cls:
        raise ValueError(f"{env_id!r} is already registered to {_registry[env_id]!r}; pass override=True")
    _registry[env_id] = cls
    _imported.pop(env_id, None)


def registered_ids() -> tuple[str, ...]:
    """Every registered id, sorted."""
    return tuple(sorted(_registry))


def env_class(env_id: str) -> type[TensorEnv]:
    """The class registered as ``env_id`` (importing it if registered by name)."""
    try:
        cls = _registry[env_id]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(env_id), _registry, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(
            f"unknown environment id {env_id!r}.{hint} Registered ids: {', '.join(registered_ids())}"
        ) from None
    if isinstance(cls, type):
        return cls
    if env_id not in _imported:
        module_name, class_name = cls.split(":")
        imported = getattr(importlib.import_module(module_name), class_name)
        if not (isinstance(imported, type) and issubclass(imported, TensorEnv)):
            raise TypeError(f"{cls!r} (registered as {env_id!r}) is not a TensorEnv subclass")
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
) -> TensorEnv:
    """Build ``num_envs`` environments of type ``env_id`` on ``device``.

    ``kwargs`` go to the class (``autoreset``, ``validate_actions``, and environment parameters such as
    ``g`` for Pendulum-v1, as ``gymnasium.make`` takes them). ``max_episode_steps`` replaces the class's time
    limit for this instance. Unknown ids raise ``ValueError`` listing the registered ones.
    """
    cls = env_class(env_id)
    steps = max_episode_steps
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0):
        raise ValueError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
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
