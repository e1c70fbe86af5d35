"""Proximal Policy Optimization: config, loss, update and the algorithm object."""

from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.ppo.update import UpdateMetrics, update_policy

__all__ = ["PPO", "PPOConfig", "UpdateMetrics", "update_policy"]
