"""Videos of MuJoCo episodes (``rl-gpu evaluate --video``, :mod:`rl_gpu.interop.video`): a real MP4 read back
frame by frame, paths refused before anything runs, and tasks that cannot be filmed refused in one line."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import rl_gpu.envs.mujoco  # noqa: F401 - first: picks a headless OpenGL platform before mujoco is imported

pytest.importorskip("mujoco")
pytest.importorskip("gymnasium.envs.mujoco")
imageio = pytest.importorskip("imageio.v2")
pytest.importorskip("imageio_ffmpeg")

from rl_gpu.__main__ import main as rl_gpu_main  # noqa: E402
from rl_gpu.envs.mujoco import gl  # noqa: E402
from rl_gpu.envs.mujoco.render import FrameRenderer, RenderError, TrackingCamera, camera_for  # noqa: E402
from rl_gpu.envs.registry import make  # noqa: E402
from rl_gpu.interop.video import check_video_path, record_episode  # noqa: E402
from rl_gpu.nn.actor_critic import ActorCritic, GaussianActorCritic  # noqa: E402
from rl_gpu.runtime.checkpoint import save_checkpoint  # noqa: E402
from rl_gpu.runtime.files import FileWriteError  # noqa: E402

SIZE = 64
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cheetah():
    env = make("HalfCheetah-v5", num_envs=2, seed=3, validate_actions=False)
    try:
        renderer = FrameRenderer(env, SIZE, SIZE)
    except RenderError as e:
        env.close()
        pytest.skip(f"no offscreen OpenGL here: {e}")
    yield env, renderer
    renderer.close()
    env.close()


def _policy():
    torch.manual_seed(0)
    return GaussianActorCritic(obs_dim=17, action_dim=6, hidden_sizes=(8,))


def _frames(path):
    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        return np.stack([frame for frame in reader.iter_data()]), reader.get_meta_data()
    finally:
        reader.close()


def test_an_episode_is_a_real_mp4_that_follows_the_robot(cheetah, tmp_path):
    env, renderer = cheetah
    path = tmp_path / "cheetah.mp4"
    result = record_episode(_policy(), env, path, max_steps=5, renderer=renderer, row=1)
    frames, meta = _frames(path)
    assert frames.shape == (6, SIZE, SIZE, 3) and frames.dtype == np.uint8
    assert result.frames == 6 and result.steps == 5 and not result.ended
    assert result.fps == pytest.approx(1 / env.dt) == pytest.approx(20.0) and meta["fps"] == pytest.approx(20.0)
    assert meta["codec"] == "h264"
    # The robot moves and the tracking camera's floor scrolls: no two consecutive frames alike.
    assert all(np.abs(a.astype(int) - b.astype(int)).mean() > 0.5 for a, b in zip(frames, frames[1:]))
    assert frames.std() > 10  # a scene, not a blank image
    assert [p.name for p in tmp_path.iterdir()] == ["cheetah.mp4"]  # no temporary file left


def test_the_same_seed_films_the_same_episode(cheetah, tmp_path):
    env, renderer = cheetah
    first = record_episode(_policy(), env, tmp_path / "a.mp4", max_steps=3, renderer=renderer)
    env.seed(3)
    again = record_episode(_policy(), env, tmp_path / "b.mp4", max_steps=3, renderer=renderer)
    env.seed(3)
    third = record_episode(_policy(), env, tmp_path / "c.mp4", max_steps=3, renderer=renderer)
    assert again.episode_return == third.episode_return and first.frames == again.frames == 4
    assert np.array_equal(_frames(tmp_path / "b.mp4")[0], _frames(tmp_path / "c.mp4")[0])


def test_an_episode_that_ends_is_filmed_to_its_last_state(cheetah, tmp_path):
    env, renderer = cheetah
    short = make("HalfCheetah-v5", num_envs=1, seed=0, max_episode_steps=3)
    result = record_episode(_policy(), short, tmp_path / "end.mp4", renderer=renderer)
    assert result.ended and result.steps == 3 and result.frames == 4
    assert _frames(tmp_path / "end.mp4")[0].shape[0] == 4


def test_bad_video_paths_are_refused_and_nothing_is_written(tmp_path):
    existing = tmp_path / "old.mp4"
    existing.write_bytes(b"not ours")
    (tmp_path / "folder.mp4").mkdir()
    os.symlink(existing, tmp_path / "link.mp4")
    os.symlink(tmp_path / "nowhere.mp4", tmp_path / "dangling.mp4")
    ckpt = tmp_path / "in.mp4"
    ckpt.write_bytes(b"input")
    cases = [(tmp_path / "clip.avi", "must name an .mp4 file"),
             (tmp_path / "missing" / "clip.mp4", "does not exist"),
             (existing / "clip.mp4", "is not a directory"),
             (tmp_path / "folder.mp4", "directory"),
             (tmp_path / "link.mp4", "symbolic link"),
             (tmp_path / "dangling.mp4", "symbolic link"),
             (existing, "exists; pass --overwrite-video")]
    for path, needle in cases:
        with pytest.raises(FileWriteError, match=needle):
            check_video_path(path)
    with pytest.raises(FileWriteError, match="is the input"):
        check_video_path(ckpt, inputs=[ckpt], overwrite=True)
    assert check_video_path(existing, overwrite=True) == existing
    assert existing.read_bytes() == b"not ours" and not (tmp_path / "missing").exists()


def test_cameras_and_the_headless_platform():
    assert camera_for(make("HalfCheetah-v5", num_envs=1)).distance == 4.0
    assert TrackingCamera().azimuth == 90.0
    # A MUJOCO_GL the user set, or a display, is left alone.
    env = dict(os.environ)
    try:
        os.environ["MUJOCO_GL"] = "osmesa"
        assert gl.prefer_headless_gl() == "osmesa"
        os.environ.pop("MUJOCO_GL")
        os.environ["DISPLAY"] = ":0"
        assert gl.prefer_headless_gl() is None and "MUJOCO_GL" not in os.environ
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert gl.headless_backend() in ("egl", "osmesa", None)


RENDER_THEN_OPTIMISER = """
import torch, rl_gpu
from rl_gpu.envs.mujoco.render import FrameRenderer
env = rl_gpu.make("HalfCheetah-v5", 1, seed=0)
with FrameRenderer(env, 32, 32) as renderer:
    renderer.render(env.state.inner.physics[0])
torch.optim.Adam(torch.nn.Linear(2, 2).parameters())  # imports torch._dynamo, and with it triton
print("ok")
"""


def test_rendering_then_training_does_not_crash(cheetah):
    """Mesa's software OpenGL loads libLLVM; triton loaded after it crashed the interpreter (SIGSEGV)."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", RENDER_THEN_OPTIMISER], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-2000:])


def _checkpoint(path, env_id, policy, obs_dim):
    save_checkpoint(path, {"env_id": env_id, "policy_config": policy.config(), "update": 1, "global_step": 10,
                           "seed": 1, "config": {"final_eval_episodes": 1, "num_envs": 1,
                                                 "deterministic_eval": True},
                           "algorithm": {"policy": policy.state_dict()}})
    return path


def _error(capsys, *args):
    with pytest.raises(SystemExit) as info:
        rl_gpu_main(["evaluate", "--device", "cpu", *args])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and err.startswith("rl-gpu evaluate: error:") and "\n" not in err, err
    return err


def test_evaluate_writes_the_video(cheetah, tmp_path, capsys):
    ckpt = _checkpoint(tmp_path / "best.pt", "HalfCheetah-v5", _policy(), 17)
    video, report = tmp_path / "run.mp4", tmp_path / "eval.json"
    args = ["evaluate", "--device", "cpu", "--checkpoint", str(ckpt), "--episodes", "1", "--video", str(video),
            "--video-steps", "3", "--json-output", str(report)]
    assert rl_gpu_main(args) == 0
    out = capsys.readouterr().out
    assert "video:   " in out and "4 frames (3 steps, episode cut short" in out and "480x480" in out
    frames, _ = _frames(video)
    assert frames.shape == (4, 480, 480, 3)
    assert json.loads(report.read_text())["video"]["frames"] == 4
    # Once written, the file is not replaced without --overwrite-video (refused before evaluating).
    before = video.read_bytes()
    assert "exists; pass --overwrite-video" in _error(capsys, "--checkpoint", str(ckpt), "--video", str(video))
    assert video.read_bytes() == before
    assert rl_gpu_main([*args[:-2], "--overwrite-video", "--video-steps", "1"]) == 0
    assert _frames(video)[0].shape[0] == 2


def test_evaluate_refuses_videos_it_cannot_make(tmp_path, capsys):
    cartpole = _checkpoint(tmp_path / "cartpole.pt", "CartPole-v1",
                           ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(8,)), 4)
    video = tmp_path / "clip.mp4"
    assert "CartPole-v1 is none of them" in _error(capsys, "--checkpoint", str(cartpole), "--video", str(video))
    named_like_a_video = _checkpoint(tmp_path / "cartpole.mp4", "CartPole-v1",
                                     ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(8,)), 4)
    assert "is the input" in _error(capsys, "--checkpoint", str(named_like_a_video), "--video",
                                    str(named_like_a_video), "--overwrite-video")
    assert "must name an .mp4 file" in _error(capsys, "--checkpoint", str(cartpole), "--video",
                                              str(tmp_path / "clip.gif"))
    assert "apply to --video" in _error(capsys, "--checkpoint", str(cartpole), "--video-steps", "3")
    assert "--video-steps must be a positive integer" in _error(capsys, "--checkpoint", str(cartpole),
                                                               "--video", str(video), "--video-steps", "0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cartpole.mp4", "cartpole.pt"]
