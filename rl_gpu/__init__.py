"""rl_gpu: reinforcement learning with environments, rollouts and updates as batched tensors on one device.

How the code is laid out (imports only point down this list; ``make test`` enforces it):
``core`` -> ``runtime`` -> ``envs`` -> ``nn`` | ``data`` -> ``collect`` -> ``algos`` -> ``training`` -> ``interop``
-> ``cli``.
"""

from rl_gpu.envs.registry import make, register, registered_ids

__version__ = "0.2.0"

__all__ = ["__version__", "make", "register", "registered_ids"]
