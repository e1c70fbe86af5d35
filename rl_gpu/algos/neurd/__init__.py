"""Neural Replicator Dynamics, full width: self-play of a two-player zero-sum game through its whole tree.

Its names are imported on first use: reading the hyper-parameters (``neurd.config``) imports no algorithm code."""

from rl_gpu.core.lazy import lazy_attributes

_LAZY = {"NeuRD": "algorithm", "NeuRDConfig": "config"}
__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
