"""rl_gpu: reinforcement learning with environments, rollouts and updates as batched tensors on one device.

How the code is laid out (imports only point down this list; ``make test`` enforces it):
``core`` -> ``runtime`` -> ``envs`` -> ``nn`` | ``data`` -> ``collect`` -> ``algos`` -> ``training`` -> ``interop``
-> ``cli``.

``rl_gpu.load(checkpoint)`` returns a checkpoint's policy ready to act
(:class:`rl_gpu.interop.policy_io.LoadedPolicy`); it is imported on first use, so ``import rl_gpu`` stays
light.
"""

from rl_gpu.envs.registry import make, register, registered_ids

__version__ = "0.2.0"

__all__ = ["__version__", "load", "make", "register", "registered_ids"]


def __getattr__(name: str):
    # PEP 562: ``load`` pulls in the networks and the checkpoint reader only when it is first asked for.
    if name == "load":
        from rl_gpu.interop.policy_io import load

        return load
    raise AttributeError(f"module 'rl_gpu' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "load"})
