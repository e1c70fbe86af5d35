"""One uninterrupted record: a stop that lands during a validation (once, or again during the resumed run's
validation) and the resumes give the metrics.jsonl, parameters and final evaluation of the run never stopped."""

import signal

import pytest

from rl_gpu.training.runner import Trainer, resume, train
from rl_gpu.training.signals import Stopped
from test_reliability import QUIET, _config, _metrics, assert_same_run  # noqa: I001 (a sibling)


@pytest.mark.parametrize("stops", [1, pytest.param(2, marks=pytest.mark.slow)])  # a second stop: the same path again
def test_a_stop_during_a_validation_keeps_one_line_per_update(tmp_path, monkeypatch, stops):
    (full,) = train(_config("CartPole-v1", tmp_path / "a"), log=QUIET)
    validate = Trainer.validate
    left = {"stops": stops}

    def stopped_at_update_3(self):
        if self.state.update == 3 and left["stops"]:
            left["stops"] -= 1
            self.stop.signum = signal.SIGTERM  # what the handler does when SIGTERM lands inside the evaluation
            raise Stopped(signal.SIGTERM)
        return validate(self)

    monkeypatch.setattr(Trainer, "validate", stopped_at_update_3)
    config = _config("CartPole-v1", tmp_path / "b")
    (cut,) = train(config, log=QUIET)
    assert cut.status == "interrupted" and "during the validation at update 3" in cut.reason
    run_dir = tmp_path / "b" / "seed-5"
    for _ in range(stops - 1):
        again = resume(run_dir, config, log=QUIET)
        assert again.status == "interrupted"
        updates = [r["update"] for r in _metrics(run_dir)]
        assert updates.count(3) == 1, updates  # the held line is back in the file while stopped
    finished = resume(run_dir, config, log=QUIET)
    assert finished.status == full.status == "goal_not_met"
    assert_same_run(tmp_path / "a" / "seed-5", run_dir)
