"""What a run sends beyond its own folder's files, from its settings: videos while it trains (``--video-every``)
and experiment trackers (``--track``), as callbacks on its events; the videos come first, so that a tracker finds
each video when its validation arrives."""

from __future__ import annotations

from collections.abc import Callable

from rl_gpu.core.device import resolve_device
from rl_gpu.core.errors import UsageError
from rl_gpu.training.config import TrainConfig
from rl_gpu.training.events import Callback
from rl_gpu.training.tracking import check_trackers, tracking_callbacks


def output_callbacks(config: TrainConfig, log: Callable[[str], None] = print) -> list[Callback]:
    """The callbacks ``config`` asks for (none by default); each refusal is one line, raised before anything is
    written."""
    if not (config.track or config.video_every):
        return []
    if config.parallel:
        raise UsageError("--track and --video-every follow one seed's run at a time, and --parallel trains its seeds "
                         "together in one process: drop them or --parallel")
    check_trackers(config.track)
    callbacks: list[Callback] = []
    if config.video_every:
        if config.uses_memory:
            raise UsageError("--video-every films policies without memory: drop it or --memory")
        from rl_gpu.interop.training_video import TrainingVideos

        callbacks.append(TrainingVideos(config.env, config.video_every, config.eval_every,
                                        resolve_device(config.device), log))
    return callbacks + tracking_callbacks(config)
