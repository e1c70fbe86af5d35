"""Package attributes imported on first use (PEP 562), so that importing a package imports none of its heavy
modules until one of their names is asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, names: Mapping[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``, whose attribute ``name`` is ``names[name]``'s (a submodule
    relative to ``package``, such as ``"algorithm"``)."""
    def getattr_(name: str):
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *names})

    return getattr_, dir_


def require_transformers(what: str):
    """Hugging Face ``transformers`` (the ``lm`` extra), its progress bars off; a one-line
    :class:`~rl_gpu.core.errors.UsageError` saying ``what`` needs it when it is not installed."""
    try:
        import transformers
    except ImportError:
        from rl_gpu.core.errors import UsageError

        raise UsageError(f"{what} need transformers: pip install 'rl-gpu[lm]'") from None
    transformers.utils.logging.disable_progress_bar()
    return transformers
