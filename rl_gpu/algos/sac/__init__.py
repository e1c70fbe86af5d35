"""Soft actor-critic: config, loss and the algorithm object."""

from rl_gpu.algos.sac.algorithm import SAC
from rl_gpu.algos.sac.config import SACConfig

__all__ = ["SAC", "SACConfig"]
