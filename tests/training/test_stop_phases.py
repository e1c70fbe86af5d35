"""One uninterrupted record (issue 37, item 8): a stop signal landing in any phase of an update (collection, the
learning step, a checkpoint being written) stops the run after that update with last.pt saved, and the resume
gives the metrics.jsonl, parameters and final evaluation of the run never stopped."""

import contextlib
import os
import signal

import pytest

from rl_gpu.training import checkpointing
from rl_gpu.training.run_logger import RunLogger
from rl_gpu.training.runner import resume, train
from test_reliability import QUIET, _config, assert_same_run  # noqa: I001 (a sibling)


# each phase is its own boundary; the update's runs by default, the collection's and checkpoint's with the slow
# tests (suite time)
@pytest.mark.parametrize("phase", [pytest.param("collect", marks=pytest.mark.slow), "update",
                                   pytest.param("checkpoint", marks=pytest.mark.slow)])
def test_a_stop_in_any_phase_resumes_to_the_run_never_stopped(tmp_path, monkeypatch, phase):
    (full,) = train(_config("CartPole-v1", tmp_path / "a"), log=QUIET)
    fired = []

    def sigterm_once():
        if not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)

    if phase == "checkpoint":
        save = checkpointing.save_checkpoint

        def save_with_a_stop(path, payload):
            if path.name == "last.pt" and payload.get("update") == 4:
                sigterm_once()  # lands while the checkpoint of update 4 is being written
            return save(path, payload)

        monkeypatch.setattr(checkpointing, "save_checkpoint", save_with_a_stop)
    else:
        timed = RunLogger.phase
        updates = []

        @contextlib.contextmanager
        def phase_with_a_stop(self, name):
            updates.append(name)
            with timed(self, name):
                if name == phase and updates.count(phase) == 2:
                    sigterm_once()  # inside the second update's collection or learning step
                yield

        monkeypatch.setattr(RunLogger, "phase", phase_with_a_stop)
    config = _config("CartPole-v1", tmp_path / "b")
    (stopped,) = train(config, log=QUIET)
    assert fired and stopped.status == "interrupted" and stopped.signum == signal.SIGTERM
    run_dir = tmp_path / "b" / "seed-5"
    expected = 4 if phase == "checkpoint" else 2
    assert f"stopped after update {expected}" in stopped.reason
    monkeypatch.undo()
    finished = resume(run_dir, config, log=QUIET)
    assert finished.status == full.status == "goal_not_met"
    assert_same_run(tmp_path / "a" / "seed-5", run_dir)
