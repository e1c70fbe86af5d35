"""Which OpenGL platform MuJoCo's offscreen renderer uses on a machine without a display.

MuJoCo's Python bindings pick their OpenGL platform once, when ``mujoco`` is first imported, from the
``MUJOCO_GL`` environment variable; unset, Linux gets GLFW, which needs a display (an X server), so a headless
server or CI job cannot render. :func:`prefer_headless_gl` sets ``MUJOCO_GL`` before that import when it is
unset and there is no display: ``egl`` where libEGL is installed (Mesa's software renderer or a GPU driver), else
``osmesa`` where libOSMesa is. A ``MUJOCO_GL`` the user set, or a display, is left alone. This module imports
nothing heavy: :mod:`rl_gpu.envs.mujoco` calls it on import, before any of its modules imports ``mujoco``.
"""

from __future__ import annotations

import ctypes.util
import os
import sys

HEADLESS_LIBRARIES = (("egl", "EGL"), ("osmesa", "OSMesa"))
"""``(MUJOCO_GL value, library)`` in order of preference for a machine without a display."""


def has_display() -> bool:
    """True when a window system is reachable (X11 or Wayland on Linux; always on macOS and Windows)."""
    if not sys.platform.startswith("linux"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def headless_backend() -> str | None:
    """The ``MUJOCO_GL`` value for this machine without a display: the first of :data:`HEADLESS_LIBRARIES`
    whose library is installed, or None when none is."""
    for backend, library in HEADLESS_LIBRARIES:
        if ctypes.util.find_library(library):
            return backend
    return None


def prefer_headless_gl() -> str | None:
    """Set ``MUJOCO_GL`` to :func:`headless_backend` when it is unset, there is no display and ``mujoco`` is
    not imported yet (afterwards the choice is made and setting it changes nothing). Returns the value now in
    force (None: MuJoCo's own default)."""
    current = os.environ.get("MUJOCO_GL")
    if current is not None or has_display() or "mujoco" in sys.modules:
        return current
    backend = headless_backend()
    if backend is not None:
        os.environ["MUJOCO_GL"] = backend
    return backend
