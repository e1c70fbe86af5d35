"""rl_gpu: reinforcement learning with environments, rollouts and updates as batched tensors on one device.

How the code is laid out (imports only point down this list; ``make test`` enforces it):
``core`` -> ``runtime`` -> ``envs`` -> ``nn`` | ``data`` -> ``collect`` -> ``algos`` -> ``training`` -> ``interop``
-> ``cli``.

``rl_gpu.train(env=..., algo=..., total_timesteps=..., callbacks=[...], **overrides)`` trains as ``rl-gpu train``
does and returns a :class:`rl_gpu.cli.api.Run` (its folder, ``policy``, ``metrics``, ``summary``); callbacks are
:class:`rl_gpu.Callback` objects or functions of one event (:mod:`rl_gpu.training.events`).
``rl_gpu.load(checkpoint)`` returns a checkpoint's policy ready to act
(:class:`rl_gpu.interop.policy_io.LoadedPolicy`); ``rl_gpu.make``, ``register`` and ``registered_ids`` are
:mod:`rl_gpu.envs.registry`'s. Each is imported on first use, so ``import rl_gpu`` imports nothing else: under
``python -m rl_gpu`` the current directory leaves the import path before any other module is imported.
"""

_LAZY = {"load": "rl_gpu.interop.policy_io", "make": "rl_gpu.envs.registry", "register": "rl_gpu.envs.registry",
         "registered_ids": "rl_gpu.envs.registry", "Callback": "rl_gpu.training.events", "Run": "rl_gpu.cli.api"}

__version__ = "0.2.0"

__all__ = ["Callback", "Run", "__version__", "load", "make", "register", "registered_ids", "train"]


def __getattr__(name: str):
    # PEP 562: torch, the networks and the checkpoint reader are imported when first asked for.
    import importlib

    if name == "train":  # the module rl_gpu.train is callable: rl_gpu.train(...) trains
        return importlib.import_module("rl_gpu.train")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rl_gpu' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "train"})
