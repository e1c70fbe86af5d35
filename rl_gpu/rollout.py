"""The quickstart's names for collection (``from rl_gpu.rollout import collect_episodes``); collection lives
in :mod:`rl_gpu.collect` and storage in :mod:`rl_gpu.data`."""

from rl_gpu.collect.reference import collect, collect_episodes, episode_horizon
from rl_gpu.data.rollout import Rollout

__all__ = ["Rollout", "collect", "collect_episodes", "episode_horizon"]
