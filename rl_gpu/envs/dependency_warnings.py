"""Warnings from the libraries behind host-stepped environments, each shown once per process.

A training run builds its environments again for every evaluation, and each build makes N sub-environments:
a library that warns at construction (MuJoCo's compiler prints its deprecations from C, once per model) would
otherwise repeat itself thousands of times in one run.
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from collections.abc import Iterator

_shown: set[tuple[type, str]] = set()
"""The warnings already shown in this process, as (category, text with numbers blanked): MuJoCo's carry the
simulation time, which would make every instance of one warning look new."""


UNACTIONABLE = (re.compile(r"compiler attribute 'settotalmass' is deprecated"),)
"""Warnings about third-party assets that a user cannot act on, never shown: Gymnasium's own MJCF files (its
``gym:`` MuJoCo tasks) still use ``settotalmass``; rl_gpu's own models apply it after compiling instead."""


def show_once(category: type[Warning], text: str, filename: str, lineno: int, module: str) -> None:
    """Show a warning through the warning filters as if ``module`` had just issued it, unless it was shown (or is
    one of :data:`UNACTIONABLE`)."""
    key = (category, re.sub(r"\d+(\.\d+)?", "#", text))
    if any(p.search(text) for p in UNACTIONABLE):
        return
    if key not in _shown:
        _shown.add(key)
        warnings.warn_explicit(text, category, filename, lineno, module=module)


def module_named(filename: str) -> str:
    """The loaded module whose file is ``filename`` (what filters such as ``ignore:::gymnasium`` match)."""
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    return filename.removesuffix(".py")


@contextlib.contextmanager
def warnings_once(python: bool) -> Iterator[None]:
    """Collect what the environments warn inside the block and show each warning once per process.

    ``python``: also Python warnings. Catching them edits the warning filters, which makes Python forget
    what it has already shown everywhere, so it is done only when building, resetting and first stepping
    (when Gymnasium's environment checker speaks), never on every step. MuJoCo's messages are taken from its
    warning callback (when MuJoCo is loaded and nobody else has set one), which costs nothing to swap.
    """
    mujoco = sys.modules.get("mujoco")
    collected: list[str] = []
    hooked = hasattr(mujoco, "set_mju_user_warning") and not mujoco.get_mju_user_warning()
    if hooked:
        mujoco.set_mju_user_warning(collected.append)
    caught: list[warnings.WarningMessage] = []
    try:
        if python:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                yield
        else:
            yield
    finally:
        if hooked:
            mujoco.set_mju_user_warning(None)
        for message in collected:
            show_once(RuntimeWarning, f"MuJoCo: {message.strip()}", mujoco.__file__, 0, "mujoco")
        for w in caught:
            show_once(w.category, str(w.message), w.filename, w.lineno, module_named(w.filename))
