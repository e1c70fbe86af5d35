"""Tensor environments: the base contract, the built-in suite and the registry."""

from rl_gpu.envs.acrobot import AcrobotEnv
from rl_gpu.envs.base import EnvState, StepResult, TensorEnv, tree_where
from rl_gpu.envs.cartpole import CartPoleEnv
from rl_gpu.envs.mountain_car import MountainCarContinuousEnv, MountainCarEnv
from rl_gpu.envs.pendulum import PendulumEnv
from rl_gpu.envs.registry import env_class, make, register, registered_ids
from rl_gpu.envs.roulette import RouletteState, RussianRouletteVectorized

__all__ = [
    "AcrobotEnv",
    "CartPoleEnv",
    "EnvState",
    "MountainCarContinuousEnv",
    "MountainCarEnv",
    "PendulumEnv",
    "RouletteState",
    "RussianRouletteVectorized",
    "StepResult",
    "TensorEnv",
    "env_class",
    "make",
    "register",
    "registered_ids",
    "tree_where",
]
