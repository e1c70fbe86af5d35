"""The run's events as a public callback API (rl_gpu.training.events): their order and content against the files
the run writes, a callback that stops the run (a resumable pause, continued exactly), and the run state that
last.pt holds, checked when read back."""

import dataclasses
import gc
import json
import math

import pytest

from rl_gpu.core.errors import UsageError
from rl_gpu.runtime.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from rl_gpu.training.events import (
    Callback,
    CheckpointSaved,
    IterationDone,
    RunStarted,
    ValidationDone,
)
from rl_gpu.training.population import train_population
from rl_gpu.training.run_state import RunState
from rl_gpu.training.runner import resume, train
from test_reliability import QUIET, _assert_same_state, _config, _metrics, _params  # noqa: I001 (a sibling)


def test_a_run_spares_its_starting_objects_from_the_collector_until_it_ends(tmp_path, nothing_frozen):
    """rl_gpu.runtime.allocator.collector_spares_startup: frozen after the first update, handed back at the end."""
    counts = []
    train(_config("CartPole-v1", tmp_path, max_updates=3, min_updates=3, log_every=1), log=QUIET,
          callbacks=[lambda e: counts.append((type(e).__name__, gc.get_freeze_count()))])
    assert counts[0] == ("RunStarted", 0) and counts[-1] == ("RunEnded", 0)
    iterations = [n for name, n in counts if name == "IterationDone"]
    assert len(iterations) == 3 and all(n > 0 for n in iterations)


def test_events_arrive_in_order_and_match_the_files(tmp_path):
    events = []
    (result,) = train(_config("CartPole-v1", tmp_path, log_every=2), log=QUIET, callbacks=[events.append])
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunEnded" and kinds.count("RunStarted") == 1
    assert events[0].state.update == 0 and not events[0].resumed and events[0].state.baseline is None
    assert events[-1].result is result and events[-1].state.update == 7

    iterations = [e for e in events if isinstance(e, IterationDone)]
    assert [e.update for e in iterations] == list(range(1, 8))
    lines = {r["update"]: r for r in _metrics(tmp_path / "seed-5")}
    for e in iterations:
        line = lines[e.update]
        assert e.global_step == line["global_step"]
        assert e.metrics["loss"] == line["loss"] and e.metrics["transitions"] == line["transitions"]

    validations = [e for e in events if isinstance(e, ValidationDone)]
    assert [e.update for e in validations] == [3, 6, 7]  # eval_every 3, and at the limit
    for e in validations:
        assert lines[e.update]["validation"]["score"] == e.score and e.record["streak"] == e.streak
        before = next(i for i, x in enumerate(events) if isinstance(x, IterationDone) and x.update == e.update)
        assert before < events.index(e)
    best = [e for e in validations if e.best]
    assert best and best[-1].update == load_checkpoint(tmp_path / "seed-5" / "best.pt")["update"]

    saved = [(e.name, e.update) for e in events if isinstance(e, CheckpointSaved)]
    assert ("last.pt", 0) in saved and ("last.pt", 7) in saved and ("best.pt", best[-1].update) in saved
    assert all(e.path == tmp_path / "seed-5" / e.name for e in events if isinstance(e, CheckpointSaved))


class StopAt(Callback):
    def __init__(self, update):
        self.update, self.seen = update, []

    def on_iteration(self, event):
        self.seen.append(event.update)
        return event.update < self.update  # False at the update: stop


def test_a_callback_stops_the_run_which_resumes_to_the_result_of_one_never_stopped(tmp_path):
    (full,) = train(_config("CartPole-v1", tmp_path / "a"), log=QUIET)
    config = _config("CartPole-v1", tmp_path / "b", log_every=1)
    stopper = StopAt(4)
    (paused,) = train(config, log=QUIET, callbacks=[stopper])
    assert paused.status == "paused" and "after update 4 at the request of callback StopAt" in paused.reason
    assert stopper.seen == [1, 2, 3, 4]
    run_dir = tmp_path / "b" / "seed-5"
    assert load_checkpoint(run_dir / "last.pt")["update"] == 4

    resumed_events = []
    finished = resume(run_dir, config, log=QUIET, callbacks=[resumed_events.append])
    assert finished.status == full.status == "goal_not_met"
    assert isinstance(resumed_events[0], RunStarted) and resumed_events[0].resumed
    assert resumed_events[0].state.update == 4
    assert [e.update for e in resumed_events if isinstance(e, IterationDone)] == [5, 6, 7]
    assert _metrics(tmp_path / "a" / "seed-5") == _metrics(run_dir)
    _assert_same_state(_params(tmp_path / "a" / "seed-5"), _params(run_dir))


def test_a_stop_asked_at_the_start_pauses_before_any_update(tmp_path):
    (paused,) = train(_config("CartPole-v1", tmp_path), log=QUIET,
                      callbacks=[lambda e: not isinstance(e, RunStarted)])
    assert paused.status == "paused" and "after update 0 at the request of callback <lambda>" in paused.reason
    assert load_checkpoint(tmp_path / "seed-5" / "last.pt")["update"] == 0


def test_a_callback_error_reaches_the_caller_and_last_pt_stays_whole(tmp_path):
    def boom(event):
        if isinstance(event, IterationDone) and event.update == 2:
            raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        train(_config("CartPole-v1", tmp_path, log_every=1, checkpoint_every=1), log=QUIET, callbacks=[boom])
    assert load_checkpoint(tmp_path / "seed-5" / "last.pt")["update"] == 1


def test_what_is_not_a_callback_is_refused(tmp_path):
    with pytest.raises(TypeError, match="Callback objects or functions of one event, not int"):
        train(_config("CartPole-v1", tmp_path), log=QUIET, callbacks=[3])
    assert not (tmp_path / "seed-5").exists()
    with pytest.raises(UsageError, match="not delivered under --parallel"):
        train_population(_config("CartPole-v1", tmp_path, seeds=(1, 2)), log=QUIET, callbacks=[print])


def test_run_state_round_trips_and_refuses_what_it_cannot_be():
    state = RunState(update=4, global_step=4096, train_seconds=1.5, best_score=0.25, best_update=3, streak=1)
    assert RunState.from_dict(state.to_dict()) == state
    assert RunState.from_dict(RunState().to_dict()).best_score == -math.inf
    bad = [({"update": -1}, "update is -1"), ({"update": True}, "update is True"),
           ({"global_step": 1.5}, "global_step is 1.5"), ({"train_seconds": math.nan}, "train_seconds is nan"),
           ({"best_score": math.inf}, r"below \+inf"), ({"validation_due": 1}, "validation_due is 1"),
           ({"baseline": {"episodes": 3}}, "baseline is not a validation result"),
           ({"best_update": 9}, "best_update 9 is after its update 4")]
    for change, message in bad:
        with pytest.raises(ValueError, match=message):
            RunState.from_dict({**state.to_dict(), **change})
    with pytest.raises(ValueError, match="has no 'streak'"):
        RunState.from_dict({k: v for k, v in state.to_dict().items() if k != "streak"})


def test_a_last_pt_with_a_damaged_run_state_is_refused_in_one_line(tmp_path):
    config = _config("CartPole-v1", tmp_path, max_updates=2, min_updates=2)
    train(dataclasses.replace(config, max_updates=1, min_updates=1), log=QUIET)
    path = tmp_path / "seed-5" / "last.pt"
    payload = load_checkpoint(path)
    payload["trainer"]["global_step"] = "many"
    save_checkpoint(path, payload)
    with pytest.raises(CheckpointError, match="does not match this run .*global_step is 'many'"):
        resume(tmp_path / "seed-5", config, log=QUIET)
    assert json.loads((tmp_path / "seed-5" / "config.json").read_text())["max_updates"] == 1
