"""Neural Replicator Dynamics, full width: self-play of a two-player zero-sum game through its whole tree."""

from rl_gpu.algos.neurd.algorithm import NeuRD
from rl_gpu.algos.neurd.config import NeuRDConfig

__all__ = ["NeuRD", "NeuRDConfig"]
