"""Experiment tracking (--track wandb mlflow) and videos while training (--video-every), read back through each
tracker's own files and client: W&B's offline run (its record log, read as LevelDB's log format that W&B writes)
and MLflow's SQLite store. A tracked, filmed run trains exactly as a plain one; --resume continues the same
tracker runs; a missing package is refused in one line before anything is written."""

import importlib.util
import json
import struct

import pytest

import rl_gpu
from rl_gpu.cli.train import main as train_main

# Found here, imported by the tests that use them (importing both trackers takes seconds).
for _package in ("wandb", "mlflow", "imageio_ffmpeg"):
    if importlib.util.find_spec(_package) is None:
        pytest.skip(f"needs {_package}", allow_module_level=True)

import numpy as np  # noqa: E402

from rl_gpu.envs.cartpole import CartPoleEnv  # noqa: E402
from test_reliability import _metrics  # noqa: E402,I001 (a sibling)

TINY = dict(num_envs=16, num_steps=32, min_updates=1, eval_every=2, eval_episodes=16, final_eval_episodes=16,
            log_every=1, progress="off", log=lambda line: None)


class FilmedCartPole(CartPoleEnv):
    """CartPole that draws itself as VMAS scenarios and MinAtar games do (a 16 x 32 frame: the cart's column lit)."""

    film_row = None
    frame_rate = 50.0
    last_frame = None

    def render_frame(self, row: int = 0) -> np.ndarray:
        frame = np.zeros((16, 32, 3), np.uint8)
        column = int(np.clip((float(self.state.inner.x[row]) + 2.4) / 4.8 * 31, 0, 31))
        frame[:, column] = 255
        return frame

    def step(self, action):
        out = super().step(action)
        if self.film_row is not None:
            self.last_frame = self.render_frame(self.film_row)
        return out


rl_gpu.register("FilmedCartPole-v0", FilmedCartPole, override=True)


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def wandb_records(run_dir):
    """Every record of a seed's offline W&B runs, in order: ``(kind, protobuf record)``."""
    from wandb.proto import wandb_internal_pb2

    out = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        data, pos, block, pending = path.read_bytes(), 7, 32768, b""  # 7: W&B's own file header
        while pos + 7 <= len(data):
            if block - pos % block < 7:  # a block's tail too short for a header is padding
                pos += block - pos % block
                continue
            _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
            if length == 0 and kind == 0:
                break
            pending += data[pos + 7:pos + 7 + length]
            pos += 7 + length
            if kind in (1, 4):  # a whole record, or the last piece of one
                record = wandb_internal_pb2.Record()
                record.ParseFromString(pending)
                out.append((record.WhichOneof("record_type"), record))
                pending = b""
    return out


def _history(records):
    rows = []
    for kind, r in records:
        if kind == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item})
    return rows


def test_a_tracked_filmed_run_reaches_both_trackers_and_trains_as_a_plain_one(tmp_path, offline_wandb):
    # Paused after update 2 by a callback, then resumed: one tracker run each, continued.
    out = tmp_path / "tracked"
    paused = rl_gpu.train("FilmedCartPole-v0", output=out, seed=3, max_updates=4, video_every=1,
                          track=("wandb", "mlflow"), track_tags=("smoke",),
                          callbacks=[lambda e: type(e).__name__ != "IterationDone" or e.update < 2], **TINY)
    assert paused.status == "paused"
    ids = json.loads((paused.run_dir / "tracking.json").read_text())
    run = rl_gpu.train(resume=paused.run_dir, progress="off", log=lambda line: None)
    plain = rl_gpu.train("FilmedCartPole-v0", output=tmp_path / "plain", seed=3, max_updates=4, **TINY)
    assert _metrics(run.run_dir) == _metrics(plain.run_dir)  # filming and tracking change nothing of the run
    assert sorted(p.name for p in (run.run_dir / "videos").iterdir()) == ["update-2.mp4", "update-4.mp4"]
    assert json.loads((run.run_dir / "tracking.json").read_text()) == ids
    steps = [512, 1024, 1536, 2048]  # 16 worlds x 32 steps per update

    records = wandb_records(run.run_dir)
    starts = [r.run for kind, r in records if kind == "run"]
    assert [s.run_id for s in starts] == [ids["wandb"]] * 2  # each part's offline folder, one W&B run
    start = starts[0]
    assert start.display_name == "tracked-seed-3" and list(start.tags) == ["smoke"] and start.project == "rl_gpu"
    config = {item.key: json.loads(item.value_json) for item in start.config.update}
    assert config["ppo.clip_coef"] == run.config.algo_params.clip_coef and config["env"] == "FilmedCartPole-v0"
    history = _history(records)
    assert [h["global_step"] for h in history if "train/loss" in h] == steps
    assert [h["global_step"] for h in history if "validation/score" in h] == [1024, 2048]
    assert [h["global_step"] for h in history if "video/_type" in h] == [1024, 2048]
    summary = {}
    for kind, r in records:
        if kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in r.summary.update})
    best = run.summary["final_evaluation"]["best"]["mean_return"]
    assert summary["final/final_evaluation.best.mean_return"] == pytest.approx(best)
    assert summary["status"] == "budget_spent"
    files = [[c.path for c in r.artifact.manifest.contents] for kind, r in records if kind == "artifact"]
    assert {"best.pt", "last.pt", "summary.json", "config.json", "metrics.jsonl"} <= set(files[-1])

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    (found,) = client.search_runs([client.get_experiment_by_name("rl_gpu").experiment_id])
    run_id = found.info.run_id
    assert run_id == ids["mlflow"]
    assert found.info.run_name == "tracked-seed-3" and found.info.status == "FINISHED" and "smoke" in found.data.tags
    assert found.data.params["ppo.clip_coef"] == str(run.config.algo_params.clip_coef)
    assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == steps
    assert found.data.metrics["final/final_evaluation.best.mean_return"] == pytest.approx(best)
    assert {a.path for a in client.list_artifacts(run_id, "run")} >= {"run/best.pt", "run/last.pt", "run/summary.json"}
    assert {a.path for a in client.list_artifacts(run_id, "videos")} == {"videos/update-2.mp4", "videos/update-4.mp4"}


def test_a_missing_tracker_package_is_refused_before_anything_is_written(call_main, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    code, _, err = call_main(train_main, "--env", "CartPole-v1", "--output", tmp_path / "run", "--track", "mlflow")
    assert code == 2 and "--track mlflow needs the mlflow package: pip install 'rl-gpu[mlflow]'" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("args,needle", [
    (["--env", "CartPole-v1", "--video-every", "1"], "videos are recorded from MuJoCo environments"),
    (["--env", "CartPole-v1", "--track", "wandb", "wandb"], "--track names a tracker twice"),
    (["--env", "CartPole-v1", "--track", "wandb", "--track-name", " "], "--track-name must be printable text"),
    (["--env", "CartPole-v1", "--video-every", "-1"], "--video-every must be a whole number from 0"),
    (["--env", "CartPole-v1", "--seeds", "1", "2", "--parallel", "--track", "wandb"],
     "--track and --video-every follow one seed's run"),
])
def test_bad_tracking_and_video_settings_are_refused_in_one_line(call_main, tmp_path, args, needle):
    code, _, err = call_main(train_main, *args, "--output", tmp_path / "run")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_a_database_through_a_symbolic_link_is_refused_and_left_alone(call_main, tmp_path):
    kept = tmp_path / "kept.db"
    kept.write_bytes(b"not ours")
    (tmp_path / "x.db").symlink_to(kept)
    code, _, err = call_main(train_main, "--env", "CartPole-v1", "--output", tmp_path / "run", "--track", "mlflow",
                             "--mlflow-uri", tmp_path / "x.db", "--max-updates", "1")
    assert code == 2 and "x.db is a symbolic link; give a regular file" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    assert kept.read_bytes() == b"not ours"
