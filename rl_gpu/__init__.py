"""rl_gpu: reinforcement learning with environments, rollouts and updates as batched tensors on one device.

How the code is laid out (imports only point down this list; ``make test`` enforces it):
``core`` -> ``runtime`` -> ``envs`` -> ``nn`` | ``data`` -> ``collect`` -> ``algos`` -> ``training`` -> ``interop``
-> ``cli``.

``rl_gpu.load(checkpoint)`` returns a checkpoint's policy ready to act
(:class:`rl_gpu.interop.policy_io.LoadedPolicy`); ``rl_gpu.make``, ``register`` and ``registered_ids`` are
:mod:`rl_gpu.envs.registry`'s. Each is imported on first use, so ``import rl_gpu`` imports nothing else: under
``python -m rl_gpu`` the current directory leaves the import path before any other module is imported.
"""

_LAZY = {"load": "rl_gpu.interop.policy_io", "make": "rl_gpu.envs.registry", "register": "rl_gpu.envs.registry",
         "registered_ids": "rl_gpu.envs.registry"}

__version__ = "0.2.0"

__all__ = ["__version__", "load", "make", "register", "registered_ids"]


def __getattr__(name: str):
    # PEP 562: torch, the networks and the checkpoint reader are imported when first asked for.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rl_gpu' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
