"""rl_gpu: reinforcement learning with environments, rollouts and updates as batched tensors on one device."""

from rl_gpu.envs.registry import make, register, registered_ids

__version__ = "0.1.0"

__all__ = ["__version__", "make", "register", "registered_ids"]
