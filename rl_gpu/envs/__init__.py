"""Tensor environments: the base contract and the built-in suite."""

from rl_gpu.envs.base import EnvState, StepResult, TensorEnv, tree_where
from rl_gpu.envs.roulette import RouletteState, RussianRouletteVectorized

__all__ = [
    "EnvState",
    "RouletteState",
    "RussianRouletteVectorized",
    "StepResult",
    "TensorEnv",
    "tree_where",
]
