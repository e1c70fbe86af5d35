"""Environments: the tensor contract (:class:`TensorEnv`), the built-in suite, Gymnasium's through ``gym:``,
and the lazy registry.

Importing this package imports the contract and the registry only; each environment's module is imported the
first time its class is asked for (``rl_gpu.envs.CartPoleEnv``, ``make("CartPole-v1")``), so neither Gymnasium
nor a physics engine is imported by ``import rl_gpu``.
"""

from __future__ import annotations

import importlib
from typing import Any

from rl_gpu.core.pytree import tree_where
from rl_gpu.core.types import EnvSpec, StepResult
from rl_gpu.envs.base import EnvState, TensorEnv
from rl_gpu.envs.registry import env_class, make, register, registered_ids

_LAZY = {
    "AcrobotEnv": "rl_gpu.envs.acrobot",
    "CartPoleEnv": "rl_gpu.envs.cartpole",
    "MountainCarContinuousEnv": "rl_gpu.envs.mountain_car",
    "MountainCarEnv": "rl_gpu.envs.mountain_car",
    "PendulumEnv": "rl_gpu.envs.pendulum",
    "RouletteState": "rl_gpu.envs.roulette",
    "RussianRouletteVectorized": "rl_gpu.envs.roulette",
    "LeducHoldem": "rl_gpu.envs.leduc",
    "LeducState": "rl_gpu.envs.leduc",
    "GymnasiumEnv": "rl_gpu.envs.gymnasium_env",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rl_gpu.envs' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "EnvSpec",
    "EnvState",
    "StepResult",
    "TensorEnv",
    "env_class",
    "make",
    "register",
    "registered_ids",
    "tree_where",
    *_LAZY,
]
