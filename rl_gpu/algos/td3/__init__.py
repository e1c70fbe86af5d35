"""Twin delayed DDPG: config, loss and the algorithm object.

Its names are imported on first use: reading the hyper-parameters (``td3.config``) imports no algorithm code."""

from rl_gpu.core.lazy import lazy_attributes

_LAZY = {"TD3": "algorithm", "TD3Config": "config"}
__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
