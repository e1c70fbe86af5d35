"""Twin delayed DDPG: config, loss and the algorithm object."""

from rl_gpu.algos.td3.algorithm import TD3
from rl_gpu.algos.td3.config import TD3Config

__all__ = ["TD3", "TD3Config"]
