"""Algorithms by name: the one place that maps a configuration's ``algo`` to its implementation."""

from __future__ import annotations

import importlib
from typing import Any

from rl_gpu.algos.base import Algorithm, Setup

ALGORITHMS: dict[str, str] = {"ppo": "rl_gpu.algos.ppo.algorithm:PPO", "sac": "rl_gpu.algos.sac.algorithm:SAC",
                              "td3": "rl_gpu.algos.td3.algorithm:TD3", "neurd": "rl_gpu.algos.neurd.algorithm:NeuRD"}
"""Name -> ``"module:Class"``; the class has ``from_setup(setup, config) -> Algorithm``. Imported on use."""


def make_algorithm(name: str, setup: Setup, config: Any) -> Algorithm:
    """Build algorithm ``name`` on ``setup`` with its own hyper-parameters ``config``. Raises ``ValueError`` for an
    unknown name or a setup the algorithm cannot run (the message says why)."""
    entry = ALGORITHMS.get(name)
    if entry is None:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGORITHMS))}")
    module, cls = entry.split(":")
    return getattr(importlib.import_module(module), cls).from_setup(setup, config)
