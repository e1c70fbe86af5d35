"""Proximal Policy Optimization: config, loss, update and the algorithm object.

Its names are imported on first use: reading the hyper-parameters (``ppo.config``) imports no algorithm code."""

from rl_gpu.core.lazy import lazy_attributes

_LAZY = {"PPO": "algorithm", "PPOConfig": "config", "UpdateMetrics": "update", "update_policy": "update"}
__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
