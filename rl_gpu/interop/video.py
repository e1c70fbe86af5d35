"""An episode of a policy on a MuJoCo task as an MP4 video (``rl-gpu evaluate --video``).

:func:`record_episode` plays one episode of one row of a :class:`~rl_gpu.envs.mujoco.base.MujocoEnv` from a
fresh start, draws every state (the start and each control step's result, so ``steps + 1`` frames) with
:class:`~rl_gpu.envs.mujoco.render.FrameRenderer`'s tracking camera, and encodes them at the control rate
(``1 / env.dt`` frames per second) as H.264 with imageio's FFmpeg plugin (``imageio`` and ``imageio-ffmpeg``,
in the ``mujoco`` extra). Frames stream to the encoder in a temporary folder; the finished file is then written
with :func:`~rl_gpu.runtime.files.atomic_write_bytes` (a crash leaves the previous file or none).

:func:`check_video_path` refuses a path before anything runs: not ``.mp4``, a folder that does not exist, a
directory or special file, a symbolic link (never written through), an input of the command, or an existing
file unless ``overwrite``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rl_gpu.core.errors import UsageError
from rl_gpu.runtime.files import FileWriteError, atomic_write_bytes, check_output

DEFAULT_SIZE = 480
"""Width and height of the frames, in pixels."""
VIDEO_SUFFIX = ".mp4"


@dataclass(frozen=True)
class VideoResult:
    """What :func:`record_episode` wrote."""

    path: Path
    frames: int
    """images in the video: the start and one per step"""
    steps: int
    """control steps played"""
    episode_return: float
    """sum of the row's rewards over the steps played"""
    ended: bool
    """the episode ended (terminated or truncated) within the steps played"""
    fps: float
    width: int
    height: int

    def to_dict(self) -> dict:
        return {"path": str(self.path), "frames": self.frames, "steps": self.steps,
                "episode_return": self.episode_return, "ended": self.ended, "fps": self.fps,
                "width": self.width, "height": self.height}

    def describe(self) -> str:
        end = "episode ended" if self.ended else "episode cut short"
        return (f"{self.path}: {self.frames} frames ({self.steps} steps, {end}, return {self.episode_return:.2f}) "
                f"at {self.fps:g} fps, {self.width}x{self.height}")


def check_video_path(path: str | Path, inputs: Sequence[str | Path] = (), overwrite: bool = False,
                     flag: str = "--video") -> Path:
    """Refuse (with :class:`~rl_gpu.runtime.files.FileWriteError`, one line) a video path that is not an
    ``.mp4`` file name, whose folder does not exist, that is a directory, special file or symbolic link, that
    is one of ``inputs``, or that exists while ``overwrite`` is False. Nothing is created. Returns ``path``."""
    path = Path(path)
    if path.suffix.lower() != VIDEO_SUFFIX:
        raise FileWriteError(f"{flag} {path}: must name an {VIDEO_SUFFIX} file")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a directory" if os.path.lexists(folder) else "does not exist"
        raise FileWriteError(f"{flag} {path}: its folder {folder} {what}")
    if os.path.islink(path):
        raise FileWriteError(f"{flag} {path}: is a symbolic link; refusing to write through it (choose another "
                             "path)")
    check_output(path, inputs)
    if os.path.lexists(path) and not overwrite:
        raise FileWriteError(f"{flag} {path}: exists; pass --overwrite-video to replace it, or choose another "
                             "path")
    return path


def draws_itself(env) -> bool:
    """Whether ``env`` renders its own frames (VMAS scenarios, MinAtar games): ``render_frame(row)`` draws a world as it is,
    ``film_row`` makes ``step`` keep ``last_frame``, that row drawn before an auto-reset, and ``frame_rate`` is
    its steps per second."""
    return callable(getattr(env, "render_frame", None)) and hasattr(env, "film_row")


def require_mujoco_env(env, env_id: str | None = None) -> None:
    """Raise :class:`UsageError` unless ``env`` can be filmed: a MuJoCo task, or one that draws itself."""
    from rl_gpu.envs.mujoco.base import MujocoEnv

    if not isinstance(env, MujocoEnv) and not draws_itself(env):
        name = env_id or type(env).__name__
        raise UsageError(f"videos are recorded from MuJoCo environments (such as HalfCheetah-v5), VMAS scenarios "
                         f"(vmas:<scenario>) and MinAtar games (MinAtar-Breakout-v1, ...); {name} is none of them")


class Mp4Writer:
    """Streams ``[H, W, 3]`` uint8 frames to an H.264 MP4 in a temporary folder; :meth:`finish` writes the file
    to its path atomically, :meth:`close` (or leaving a ``with`` block) removes the temporary folder."""

    def __init__(self, fps: float) -> None:
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401 - the FFmpeg binary imageio's plugin runs
        except ImportError:
            raise UsageError("writing a video needs imageio and imageio-ffmpeg: pip install "
                             "'rl-gpu[mujoco]'") from None
        self._tmpdir = tempfile.TemporaryDirectory(prefix="rl_gpu-video-")
        self._tmp = Path(self._tmpdir.name) / f"video{VIDEO_SUFFIX}"
        # quality 7 of 10 (libx264's CRF about 19): sharp edges on the checkered floor at a few MB a minute.
        self._writer = imageio.get_writer(self._tmp, format="FFMPEG", mode="I", fps=fps, codec="libx264",
                                          quality=7, pixelformat="yuv420p", macro_block_size=16,
                                          ffmpeg_log_level="error")
        self.frames = 0

    def append(self, frame: np.ndarray) -> None:
        self._writer.append_data(frame)
        self.frames += 1

    def finish(self, path: str | Path, inputs: Sequence[str | Path] = (), overwrite: bool = False) -> None:
        """Close the encoder and write the MP4 to ``path`` (checked again: it may have changed meanwhile)."""
        self._writer.close()
        check_video_path(path, inputs, overwrite)
        atomic_write_bytes(path, self._tmp.read_bytes(), inputs)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._tmpdir.cleanup()

    def __enter__(self) -> "Mp4Writer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@torch.inference_mode()
def record_episode(policy, env, path: str | Path, *, max_steps: int | None = None, deterministic: bool = True,
                   generator: torch.Generator | None = None, row: int = 0, width: int = DEFAULT_SIZE,
                   height: int = DEFAULT_SIZE, renderer=None, inputs: Sequence[str | Path] = (),
                   overwrite: bool = False) -> VideoResult:
    """Play one episode of row ``row`` of ``env`` (a MuJoCo task) from a fresh start (``env.reset()``, from the
    environment's own seed) and write it to ``path`` as an MP4.

    Args:
        policy: an :class:`~rl_gpu.core.types.Actor` for ``env``'s observations (every row acts; one is filmed).
        env: a :class:`~rl_gpu.envs.mujoco.base.MujocoEnv`.
        path: the ``.mp4`` file (:func:`check_video_path`; ``inputs`` and ``overwrite`` as there).
        max_steps: most control steps to play (None: until the row's episode ends).
        deterministic: the policy's most probable action (False: sampled with ``generator``).
        width, height: frame size in pixels; ``renderer``: a :class:`~rl_gpu.envs.mujoco.render.FrameRenderer`
            of ``env`` to draw with (made here, and closed, when None).
    """
    require_mujoco_env(env)
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
    if not 0 <= row < env.num_envs:
        raise ValueError(f"row {row} is not one of the {env.num_envs} environments")
    path = check_video_path(path, inputs, overwrite)
    limit = max_steps if max_steps is not None else env.spec.episode_horizon
    if limit is None:
        raise ValueError(f"{type(env).__name__} has no time limit: give max_steps")
    if draws_itself(env):
        return _record_drawn(policy, env, path, limit, deterministic, generator, row, inputs, overwrite)
    from rl_gpu.envs.mujoco.render import FrameRenderer

    own = renderer is None
    if own:
        renderer = FrameRenderer(env, width, height)
    fps = 1.0 / float(env.dt)
    try:
        with Mp4Writer(fps) as writer:
            step = env.reset()
            variant = int(env.state.inner.variant[row])
            writer.append(renderer.render(env.state.inner.physics[row], variant))
            total, steps, ended = 0.0, 0, False
            while steps < limit and not ended:
                action = policy.act(step.obs, step.action_mask, generator, deterministic).action
                step = env.step(action)
                steps += 1
                total += float(step.reward[row])
                ended = bool(step.terminated[row] | step.truncated[row])
                # After the step, before an auto-reset replaced a finished row's state.
                physics = getattr(env, "last_physics", None)
                physics = physics if physics is not None else env.state.inner.physics
                writer.append(renderer.render(physics[row], variant))
            writer.finish(path, inputs, overwrite)
            frames = writer.frames
    finally:
        if own:
            renderer.close()
    return VideoResult(path=path, frames=frames, steps=steps, episode_return=total, ended=ended, fps=fps,
                       width=renderer.width, height=renderer.height)


def _padded(frame: np.ndarray) -> np.ndarray:
    """``frame`` padded with its edge colour to a multiple of 16 pixels each way (H.264's macro blocks), so the
    encoder does not rescale it."""
    h, w = frame.shape[:2]
    return np.pad(frame, ((0, -h % 16), (0, -w % 16), (0, 0)), mode="edge")


def _record_drawn(policy, env, path: Path, limit: int, deterministic: bool, generator, row: int,
                  inputs: Sequence[str | Path], overwrite: bool) -> VideoResult:
    """:func:`record_episode` for an environment that draws itself (:func:`draws_itself`); with M > 1 agents the
    policy acts for every agent and the return is the agents' mean."""
    from rl_gpu.collect.agents import joint_action

    fps = float(env.frame_rate)
    with Mp4Writer(fps) as writer:
        step = env.reset()
        first = _padded(env.render_frame(row))
        writer.append(first)
        env.film_row = row
        total, steps, ended = 0.0, 0, False
        try:
            while steps < limit and not ended:
                step = env.step(joint_action(policy, step, generator, deterministic))
                steps += 1
                total += float(step.reward[row].float().mean())
                ended = bool(step.terminated[row] | step.truncated[row])
                writer.append(_padded(env.last_frame))
        finally:
            env.film_row = None
        writer.finish(path, inputs, overwrite)
        frames = writer.frames
    return VideoResult(path=path, frames=frames, steps=steps, episode_return=total, ended=ended, fps=fps,
                       width=int(first.shape[1]), height=int(first.shape[0]))


def video_setup(probe, env_id: str, make_video_env, flag: str = "--video"):
    """``(environment, renderer)`` for ``--video`` (or ``flag``), made before anything is evaluated so that a task that cannot
    be filmed, or a machine that cannot render, is refused at once (:class:`UsageError`); the renderer is None
    for an environment that draws itself (VMAS)."""
    require_mujoco_env(probe, env_id)
    env = make_video_env()
    if draws_itself(env):
        try:
            env.render_frame(0)  # a machine that cannot draw says so now, before the evaluation
        except Exception as e:  # the renderer's own errors (no OpenGL, no display) vary by machine
            env.close()
            raise UsageError(f"{flag}: {env_id} cannot draw on this machine: {' '.join(str(e).split())}") from None
        return env, None
    from rl_gpu.envs.mujoco.render import FrameRenderer, RenderError

    try:
        return env, FrameRenderer(env)
    except RenderError as e:
        env.close()
        raise UsageError(str(e)) from None
