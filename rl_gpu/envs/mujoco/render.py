"""Pictures of one row of a :class:`~rl_gpu.envs.mujoco.base.MujocoEnv`: MuJoCo's offscreen renderer
(``mujoco.Renderer``) looking through a camera that tracks the robot.

The physics of a batch is a ``[N, nstate]`` tensor, not an ``MjData``: :meth:`FrameRenderer.render` loads one
row's state into a scratch ``MjData`` of the row's model (its domain-randomisation variant), runs the forward
kinematics and draws it. On a machine without a display MuJoCo needs a headless OpenGL platform (EGL or OSMesa,
chosen on import of :mod:`rl_gpu.envs.mujoco`: see :mod:`~rl_gpu.envs.mujoco.gl`); when none works,
:class:`RenderError` says so in one line.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch

from rl_gpu.envs.mujoco.engine import FULLPHYSICS, require_mujoco
from rl_gpu.envs.mujoco.gl import has_display

try:
    import mujoco
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    mujoco = None


class RenderError(RuntimeError):
    """MuJoCo cannot render here (no usable OpenGL platform), in one line naming what to change."""


@dataclass(frozen=True)
class TrackingCamera:
    """A camera that follows a body's centre of mass (``mjCAMERA_TRACKING``) at a fixed distance and angle.

    The defaults look at the robot from its side (the x axis, along which the locomotion tasks run, goes left
    to right) slightly from above, as Gymnasium's MuJoCo tasks render by default."""

    body: str | int | None = None
    """body whose subtree's centre of mass the camera follows (None: the robot's root, body 1)"""
    distance: float = 4.0
    """metres from the tracked point"""
    azimuth: float = 90.0
    """degrees about the vertical axis (90: looking along +y, from the robot's side)"""
    elevation: float = -20.0
    """degrees above (positive) or below (negative) the horizontal"""


CAMERAS: dict[str, TrackingCamera] = {
    "HalfCheetahEnv": TrackingCamera(distance=4.0),
    "HopperEnv": TrackingCamera(distance=3.0),
    "Walker2dEnv": TrackingCamera(distance=3.5),
    "AntEnv": TrackingCamera(distance=5.0, elevation=-30.0),
    "HumanoidEnv": TrackingCamera(distance=4.0),
    "Go1VelocityEnv": TrackingCamera(distance=1.6, azimuth=120.0, elevation=-25.0),
}
"""Cameras of the Gymnasium locomotion tasks, by class name (Gymnasium's default camera distances, tracking).
A task class may instead define a ``camera`` attribute (a :class:`TrackingCamera`)."""


GEOM_GROUPS: dict[str, tuple[int, ...]] = {"Go1VelocityEnv": (0, 1, 2, 3)}
"""Geom groups drawn besides MuJoCo's default 0-2, by class name: Go1's model keeps only its collision geoms
(group 3; the visual meshes were removed)."""


def camera_for(env) -> TrackingCamera:
    """The camera to film ``env`` with: its class's ``camera`` attribute, else :data:`CAMERAS` by the name of
    its class (or of a base class), else the default :class:`TrackingCamera`."""
    own = getattr(type(env), "camera", None)
    if isinstance(own, TrackingCamera):
        return own
    for cls in type(env).__mro__:
        if cls.__name__ in CAMERAS:
            return CAMERAS[cls.__name__]
    return TrackingCamera()


def load_triton_before_gl() -> None:
    """Import triton (torch.compile's GPU code generator) now when it is installed and not yet imported.

    Mesa's software OpenGL (llvmpipe, behind EGL or OSMesa on a machine without a GPU driver) loads the
    system's libLLVM into the process with the first context; triton's extension module, loaded after it, then
    crashes the interpreter with a segmentation fault (torch imports triton lazily, e.g. on the first
    ``torch.optim`` optimiser or ``torch.compile``). Loaded before the context, both work."""
    if "triton" in sys.modules or importlib.util.find_spec("triton") is None:
        return
    try:
        import triton  # noqa: F401
    except Exception:  # a broken triton is torch's concern, not the renderer's
        pass


def describe_backend() -> str:
    """``MUJOCO_GL=...`` (or that it is unset), for messages."""
    value = os.environ.get("MUJOCO_GL")
    return "MUJOCO_GL unset" if value is None else f"MUJOCO_GL={value!r}"


class FrameRenderer:
    """Draws rows of an environment's physics as ``[height, width, 3]`` uint8 RGB images.

    Args:
        env: a :class:`~rl_gpu.envs.mujoco.base.MujocoEnv` (its ``model``, ``engine.models`` and ``layout``).
        width, height: image size in pixels (the model's offscreen buffer is enlarged when smaller).
        camera: the camera (default: :func:`camera_for` ``env``).

    Raises :class:`RenderError` when no OpenGL context can be made (no display and no EGL or OSMesa).
    """

    def __init__(self, env, width: int = 480, height: int = 480, camera: TrackingCamera | None = None) -> None:
        require_mujoco()
        for name, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, int) or not 16 <= value <= 4096:
                raise ValueError(f"{name} must be an integer from 16 to 4096 pixels, got {value!r}")
        self.env = env
        self.width, self.height = width, height
        self.camera = camera if camera is not None else camera_for(env)
        model = copy.copy(env.model)
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        load_triton_before_gl()
        try:
            self._renderer = mujoco.Renderer(model, height=height, width=width)
        except Exception as e:  # mujoco.FatalError, ImportError of the GL platform, RuntimeError from EGL
            raise RenderError(self._no_gl_message(e)) from None
        self._data = mujoco.MjData(env.model)
        self._cam = mujoco.MjvCamera()
        self._cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        body = self.camera.body
        if body is None:
            body = 1 if env.model.nbody > 1 else 0
        elif isinstance(body, str):
            index = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_BODY, body)
            if index < 0:
                raise ValueError(f"the camera tracks body {body!r}, which {type(env).__name__}'s model lacks")
            body = index
        self._cam.trackbodyid = int(body)
        self._cam.distance = float(self.camera.distance)
        self._cam.azimuth = float(self.camera.azimuth)
        self._cam.elevation = float(self.camera.elevation)
        self._option = mujoco.MjvOption()
        for cls in type(env).__mro__:
            for group in GEOM_GROUPS.get(cls.__name__, ()):
                self._option.geomgroup[group] = 1

    @staticmethod
    def _no_gl_message(error: BaseException) -> str:
        detail = " ".join(str(error).split())[:200] or type(error).__name__
        late = ""
        if "MUJOCO_GL" not in os.environ and not has_display():
            late = ("mujoco was imported before rl_gpu.envs.mujoco could choose a headless platform, or none is "
                    "installed; ")
        return (f"MuJoCo cannot render here ({describe_backend()}: {detail}); {late}without a display it needs "
                "MUJOCO_GL=egl (libEGL, e.g. Debian's libegl1 with Mesa) or MUJOCO_GL=osmesa (libosmesa6), set "
                "before mujoco is imported")

    def render(self, physics: torch.Tensor | np.ndarray, variant: int = 0) -> np.ndarray:
        """``[height, width, 3]`` uint8 image of one row's ``[nstate]`` physics, stepped with model
        ``engine.models[variant]``."""
        model = self.env.engine.models[int(variant)]
        state = physics.detach().to("cpu", torch.float64).numpy() if isinstance(physics, torch.Tensor) \
            else np.asarray(physics, dtype=np.float64)
        mujoco.mj_setState(model, self._data, np.ascontiguousarray(state), FULLPHYSICS)
        mujoco.mj_forward(model, self._data)
        try:
            self._renderer.update_scene(self._data, camera=self._cam, scene_option=self._option)
            return self._renderer.render().copy()
        except Exception as e:
            raise RenderError(self._no_gl_message(e)) from None

    def close(self) -> None:
        """Free the OpenGL context."""
        renderer, self._renderer = getattr(self, "_renderer", None), None
        if renderer is not None:
            renderer.close()

    def __enter__(self) -> "FrameRenderer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
