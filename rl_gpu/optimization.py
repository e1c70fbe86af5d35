"""The quickstart's names for the update (``from rl_gpu.optimization import update_policy``); PPO lives in
:mod:`rl_gpu.algos.ppo`."""

from rl_gpu.algos.ppo import PPO, PPOConfig, UpdateMetrics, update_policy

__all__ = ["PPO", "PPOConfig", "UpdateMetrics", "update_policy"]
