"""Experiment trackers (``--track wandb mlflow``): callbacks on the run's events (:mod:`rl_gpu.training.events`)
that send each seed's run to Weights & Biases or MLflow next to its own files.

Each seed is one tracker run, named ``NAME-seed-N`` (``--track-name``, else the output folder's name), in the
W&B project / MLflow experiment ``--track-project``, with ``--track-tags``. It receives the resolved settings
(config.json's values, flattened as ``ppo.clip_coef``), every metrics line as ``train/<metric>`` at its
environment step, each validation as ``validation/<field>``, each video the run films (``--video-every``: the
file ``videos/update-U.mp4`` that the video callback, placed before the trackers, wrote for that validation),
and at the end the final evaluation as ``final/<field>`` with best.pt, last.pt, config.json, summary.json and
metrics.jsonl as artifacts. The tracker runs' ids are kept in ``RUN_DIR/tracking.json``, so ``--resume``
continues the same tracker runs (updates replayed after the last checkpoint are sent again at the same steps).

The packages are optional extras, imported when a run starts: :func:`check_trackers` refuses a missing one in one
line, before anything is written. W&B follows its own environment variables (``WANDB_MODE=offline`` keeps the run
in ``RUN_DIR/wandb``); MLflow writes to ``--mlflow-uri``, else ``$MLFLOW_TRACKING_URI``, else
``sqlite:///OUTPUT/mlflow.db`` with artifacts in ``OUTPUT/mlartifacts``.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path

from rl_gpu.core.errors import UsageError
from rl_gpu.runtime.files import JsonReadError, atomic_write_json, check_database_file, read_json
from rl_gpu.training.events import (
    Callback,
    CheckpointSaved,
    IterationDone,
    RunEnded,
    RunStarted,
    ValidationDone,
)

EXTRAS = {"wandb": ("wandb", "rl-gpu[wandb]"), "mlflow": ("mlflow", "rl-gpu[mlflow]")}
"""tracker -> (module it imports, the extra that installs it)"""
ARTIFACTS = ("best.pt", "last.pt", "config.json", "summary.json", "metrics.jsonl")
IDS_FILE = "tracking.json"


def check_trackers(names) -> None:
    """Refuse, in one line, a tracker that is not one of :data:`EXTRAS` or whose package is not installed."""
    for name in names:
        if name not in EXTRAS:
            raise UsageError(f"--track {name!r} is not a tracker; known: {', '.join(EXTRAS)}")
        module, extra = EXTRAS[name]
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"--track {name} needs the {module} package: pip install '{extra}'")


def tracking_callbacks(config) -> list[Callback]:
    """One tracker callback per ``config.track`` name (checked by :func:`check_trackers`)."""
    check_trackers(config.track)
    kinds = {"wandb": WandbTracker, "mlflow": MlflowTracker}
    return [kinds[name](config) for name in config.track]


def flatten(values: Mapping, prefix: str = "") -> dict[str, object]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists kept whole)."""
    out: dict[str, object] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def numbers(values: Mapping, prefix: str) -> dict[str, float]:
    """The finite numbers among ``values``' flattened leaves (booleans as 0/1), keys as ``prefix/key``."""
    out = {}
    for key, value in flatten(values).items():
        if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[f"{prefix}/{key}"] = float(value)
    return out


class Tracker(Callback):
    """What both trackers share: names, the ids file, which events become which records."""

    kind = ""

    def __init__(self, config) -> None:
        self.config = config
        self.settings = flatten(config.to_dict())

    def run_name(self, seed: int) -> str:
        base = self.config.track_name or self.config.output.resolve().name or "run"
        return f"{base}-seed-{seed}"

    @staticmethod
    def _ids(run_dir: Path) -> dict:
        try:
            data = read_json(run_dir / IDS_FILE) if (run_dir / IDS_FILE).is_file() else {}
        except JsonReadError:
            return {}
        return data if isinstance(data, dict) else {}

    def on_run_start(self, event: RunStarted) -> None:
        saved = self._ids(event.run_dir).get(self.kind) if event.resumed else None
        try:
            run_id = self.open(event.seed, event.run_dir, saved if isinstance(saved, str) else None)
        except UsageError:
            raise  # our own check of the settings (a refused database path) already says what is wrong
        except Exception as e:  # the tracker's own errors (a store that cannot be opened, a refused login) vary
            raise UsageError(f"--track {self.kind}: could not start its run: {type(e).__name__}: "
                             f"{' '.join(str(e).split())[:300]}") from None
        ids = self._ids(event.run_dir)
        ids[self.kind] = run_id
        atomic_write_json(event.run_dir / IDS_FILE, ids)

    def on_iteration(self, event: IterationDone) -> None:
        self.log(numbers(event.metrics, "train"), event.global_step)

    def on_validation(self, event: ValidationDone) -> None:
        self.log(numbers(event.record, "validation"), event.global_step)
        video = event.run_dir / "videos" / f"update-{event.update}.mp4"
        if video.is_file():
            self.video(video, event.global_step)

    def on_checkpoint(self, event: CheckpointSaved) -> None:
        return None  # the checkpoints are sent once, at the end, as they are then

    def on_run_end(self, event: RunEnded) -> None:
        result = event.result
        self.log(numbers(result.summary, "final"), event.state.global_step)
        files = [result.run_dir / name for name in ARTIFACTS if (result.run_dir / name).is_file()]
        self.close(result.status, files)

    # What each tracker writes.
    def open(self, seed: int, run_dir: Path, run_id: str | None) -> str:
        raise NotImplementedError

    def log(self, values: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def video(self, path: Path, step: int) -> None:
        raise NotImplementedError

    def close(self, status: str, files: list[Path]) -> None:
        raise NotImplementedError


class WandbTracker(Tracker):
    """A W&B run per seed, in ``RUN_DIR/wandb`` when offline; x axis: ``global_step``."""

    kind = "wandb"

    def open(self, seed: int, run_dir: Path, run_id: str | None) -> str:
        import wandb

        settings = wandb.Settings(console="off", quiet=True, silent=True)
        self.run = wandb.init(project=self.config.track_project, name=self.run_name(seed), dir=str(run_dir),
                              group=self.config.track_name or self.config.output.resolve().name,
                              tags=list(self.config.track_tags), config=self.settings, id=run_id,
                              resume="allow" if run_id else None, settings=settings, reinit="create_new")
        self.run.define_metric("global_step")
        self.run.define_metric("*", step_metric="global_step")
        return self.run.id

    def log(self, values: dict[str, float], step: int) -> None:
        if values:
            self.run.log({**values, "global_step": step})

    def video(self, path: Path, step: int) -> None:
        import wandb

        self.run.log({"video": wandb.Video(str(path), format="mp4"), "global_step": step})

    def close(self, status: str, files: list[Path]) -> None:
        import wandb

        self.run.summary["status"] = status
        if files:
            artifact = wandb.Artifact(f"run-{self.run.id}", type="model")
            for f in files:
                artifact.add_file(str(f), name=f.name)
            self.run.log_artifact(artifact)
        self.run.finish(exit_code=0 if status in ("success", "goal_not_met", "budget_spent") else 1)


class MlflowTracker(Tracker):
    """An MLflow run per seed through ``MlflowClient`` (no global state of MLflow's is changed)."""

    kind = "mlflow"
    _FINAL = {"success": "FINISHED", "goal_not_met": "FINISHED", "budget_spent": "FINISHED",
              "numerical_error": "FAILED"}

    def store(self) -> tuple[str, str | None]:
        """``(tracking URI, artifact location for a new experiment or None: the server's)``. A path is a SQLite
        file (``.db``) or a folder to hold ``mlflow.db``; artifacts go beside the database (``mlartifacts/``)."""
        out = self.config.output.resolve()
        uri = self.config.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if uri is None:
            return f"sqlite:///{out / 'mlflow.db'}", (out / "mlartifacts").as_uri()
        if "://" not in uri:
            path = Path(uri).expanduser()
            db = check_database_file(path if path.suffix == ".db" else path / "mlflow.db", f"--mlflow-uri {uri}")
            return f"sqlite:///{db.resolve()}", (db.resolve().parent / "mlartifacts").as_uri()
        if uri.startswith("sqlite:///"):
            db = check_database_file(uri.removeprefix("sqlite:///"), f"--mlflow-uri {uri}")
            return uri, (db.resolve().parent / "mlartifacts").as_uri()
        if uri.split("://")[0] in ("http", "https", "databricks"):
            return uri, None
        return uri, (out / "mlartifacts").as_uri()  # another database: the artifacts stay with the run

    def open(self, seed: int, run_dir: Path, run_id: str | None) -> str:
        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # their database set-up talks at INFO level on stderr
            logging.getLogger(name).setLevel(logging.WARNING)

        uri, artifacts = self.store()
        self.client = MlflowClient(tracking_uri=uri)
        if run_id is not None:
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            return run_id
        experiment = self.client.get_experiment_by_name(self.config.track_project)
        exp_id = experiment.experiment_id if experiment is not None else \
            self.client.create_experiment(self.config.track_project, artifact_location=artifacts)
        tags = {t: "" for t in self.config.track_tags}
        run = self.client.create_run(exp_id, run_name=self.run_name(seed), tags=tags)
        self.run_id = run.info.run_id
        from mlflow.entities import Param

        params = [Param(k, str(v)[:6000]) for k, v in self.settings.items()]
        for i in range(0, len(params), 100):  # a batch holds at most 100 parameters
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        return self.run_id

    def log(self, values: dict[str, float], step: int) -> None:
        if not values:
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def video(self, path: Path, step: int) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path="videos")

    def close(self, status: str, files: list[Path]) -> None:
        for f in files:
            self.client.log_artifact(self.run_id, str(f), artifact_path="run")
        self.client.set_tag(self.run_id, "status", status)
        self.client.set_terminated(self.run_id, status=self._FINAL.get(status, "KILLED"))
