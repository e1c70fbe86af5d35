"""Videos while a run trains (``--video-every K``): a callback on the run's validations
(:mod:`rl_gpu.training.events`) that films one episode of the current policy every K-th validation into
``RUN_DIR/videos/update-U.mp4``, where the trackers (:mod:`rl_gpu.training.tracking`, placed after it) find it.

The episode is the policy's most probable actions from a fresh start of an environment of its own (one row,
seeded from the run's seed), so filming draws nothing from the run's random streams: a run with videos trains
exactly as one without (tested). Which validations: those whose index ``update // --eval-every`` is a multiple of
K, so a resumed run films the same ones. Environments that can be filmed: MuJoCo tasks, VMAS scenarios and MinAtar
games (:func:`~rl_gpu.interop.video.require_mujoco_env`), refused otherwise before the run starts.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from rl_gpu.core.errors import UsageError
from rl_gpu.core.seeding import derive_seed
from rl_gpu.runtime.files import FileWriteError, atomic_write_bytes
from rl_gpu.training.events import Callback, RunEnded, RunStarted, ValidationDone

VIDEO_DIR = "videos"


class TrainingVideos(Callback):
    """Films every ``every``-th validation's policy (see the module docstring); ``log`` gets one line a video."""

    def __init__(self, env_id: str, every: int, eval_every: int, device: torch.device, log=print) -> None:
        from rl_gpu.envs.registry import make
        from rl_gpu.interop.video import video_setup

        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        # Before any renderer loads its OpenGL: Triton (which torch._dynamo loads, as every optimiser does) carries
        # its own LLVM, and loaded after Mesa's (llvmpipe) it crashed the process.
        import torch._dynamo  # noqa: F401
        self.env_id, self.every, self.eval_every, self.device, self.log = env_id, every, eval_every, device, log
        self._make = lambda seed: make(env_id, num_envs=1, device=device, seed=seed, validate_actions=False)
        probe = self._make(0)
        try:
            self.env, self.renderer = video_setup(probe, env_id, lambda: probe, flag="--video-every")
        except UsageError:
            probe.close()
            raise
        if probe.spec.episode_horizon is None:
            self.close()
            raise UsageError(f"--video-every: {env_id} has no time limit, so an episode may never end")

    def on_run_start(self, event: RunStarted) -> None:
        from rl_gpu.interop.video import video_setup

        # Each seed films from an environment seeded by it, whatever ran before in this process.
        self.close()
        env = self._make(derive_seed(event.seed, "training-video"))
        self.env, self.renderer = video_setup(env, self.env_id, lambda: env, flag="--video-every")

    def on_validation(self, event: ValidationDone) -> None:
        from rl_gpu.interop.video import record_episode

        if event.policy is None or (event.update // self.eval_every) % self.every:
            return
        folder = event.run_dir / VIDEO_DIR
        if os.path.islink(folder) or (os.path.lexists(folder) and not folder.is_dir()):
            raise FileWriteError(f"{folder}: not a folder of the run's (a link or a file); refusing to write videos "
                                 "there")
        folder.mkdir(exist_ok=True)
        target = folder / f"update-{event.update}.mp4"
        # Filmed outside the run folder (which this process holds), then written into it like the run's files.
        with tempfile.TemporaryDirectory(prefix="rl_gpu-video-") as tmp, torch.inference_mode():
            video = record_episode(event.policy, self.env, Path(tmp) / target.name, renderer=self.renderer,
                                   deterministic=True)
            atomic_write_bytes(target, video.path.read_bytes())
        self.log(f"[seed {event.seed}] video @ {event.update}: {target}: {video.frames} frames, return "
                 f"{video.episode_return:.2f}")

    def on_run_end(self, event: RunEnded) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "renderer", None) is not None:
            self.renderer.close()
            self.renderer = None
        if getattr(self, "env", None) is not None:
            self.env.close()
            self.env = None
