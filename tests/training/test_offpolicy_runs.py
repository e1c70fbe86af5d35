"""SAC and TD3 through the unchanged trainer: a stopped run resumes bit for bit (replay buffer included), a
checkpoint without the buffer resumes with a note in the log, a SIGTERM stops a run of several seeds that then
resumes to the same result, and the checkpoints hold a policy that evaluation and export read."""

import dataclasses
import json
import os
import signal

import pytest
import torch

from rl_gpu.cli.presets import preset_config
from rl_gpu.interop.policy_io import load_policy
from rl_gpu.runtime.checkpoint import load_checkpoint
from rl_gpu.training.runner import VOLATILE_METRICS, Trainer, resume, train

QUIET = lambda line: None  # noqa: E731


def _config(algo, out, section=None, **kw):
    base = dict(device="cpu", seeds=(5,), num_envs=4, num_steps=8, max_updates=6, eval_every=3, eval_episodes=4,
                final_eval_episodes=4, checkpoint_every=2, min_updates=6, hidden_sizes=(16, 16), output=out,
                solve_threshold=1e9, overwrite=True)
    base.update(kw)
    config = dataclasses.replace(preset_config("Pendulum-v1", algo), **base)
    section = dataclasses.replace(config.algo_params, learning_starts=64, batch_size=16, buffer_size=1024,
                                  updates_per_step=0.5, **(section or {}))
    return dataclasses.replace(config, algo_params=section)


def _metrics(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        for k in VOLATILE_METRICS:
            r.pop(k, None)
    return records


def _state(run_dir):
    return load_checkpoint(run_dir / "last.pt")["trainer"]["algorithm"]


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_stop_and_resume_is_bit_identical(tmp_path, algo):
    (full,) = train(_config(algo, tmp_path / "a"), log=QUIET)
    stopped = _config(algo, tmp_path / "b")
    (paused,) = train(stopped, log=QUIET, stop_after=3)
    assert paused.status == "paused"
    resumed = resume(tmp_path / "b" / "seed-5", stopped, log=QUIET)
    assert resumed.status == full.status == "goal_not_met"
    a, b = _state(tmp_path / "a" / "seed-5"), _state(tmp_path / "b" / "seed-5")
    for part in ("policy", "critic", "target_critic"):
        for k in a[part]:
            assert torch.equal(a[part][k], b[part][k]), (part, k)
    for k in ("obs", "reward", "pos"):
        assert torch.equal(a["replay"][k], b["replay"][k]), k
    assert a["updates_done"] == b["updates_done"] > 0
    assert _metrics(tmp_path / "a" / "seed-5") == _metrics(tmp_path / "b" / "seed-5")
    summary = json.loads((tmp_path / "a" / "seed-5" / "summary.json").read_text())
    assert set(summary["final_evaluation"]) == {"best", "initial"}
    # best.pt holds the policy evaluation and export read: the squashed actor, deterministic by default.
    policy, payload = load_policy(tmp_path / "a" / "seed-5" / "best.pt")
    assert payload["algo"] == algo and policy.config()["kind"] == ("squashed_gaussian" if algo == "sac"
                                                                  else "deterministic")
    # ... and no training state: the replay buffer stays in last.pt alone.
    assert "trainer" not in payload and "replay" in a


def test_a_checkpoint_without_the_buffer_resumes_with_a_note(tmp_path):
    config = _config("sac", tmp_path / "b", section={"checkpoint_buffer": False})
    (paused,) = train(config, log=QUIET, stop_after=3)
    assert paused.status == "paused" and "replay" not in _state(tmp_path / "b" / "seed-5")
    lines = []
    result = resume(tmp_path / "b" / "seed-5", config, log=lines.append)
    assert result.status == "goal_not_met"
    note = [line for line in lines if "no replay buffer" in line]
    assert len(note) == 1 and "not exact" in note[0] and note[0].startswith("[seed 5] note:")


def test_sigterm_stops_a_multi_seed_run_that_resumes_to_the_same_result(tmp_path, monkeypatch):
    straight = train(_config("td3", tmp_path / "a", seeds=(1, 2)), log=QUIET)
    assert [r.status for r in straight] == ["goal_not_met"] * 2
    assert len(json.loads((tmp_path / "a" / "summary.json").read_text())["seeds"]) == 2
    one_update, fired = Trainer.train_one_update, []

    def sigterm_in_seed_2(self, logger):
        values = one_update(self, logger)
        if self.seed == 2 and self.state.update == 2 and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        return values

    monkeypatch.setattr(Trainer, "train_one_update", sigterm_in_seed_2)
    config = _config("td3", tmp_path / "b", seeds=(1, 2))
    first, stopped = train(config, log=QUIET)
    assert fired and stopped.status == "interrupted" and stopped.signum == signal.SIGTERM
    assert load_checkpoint(tmp_path / "b" / "seed-2" / "last.pt")["update"] == 2
    monkeypatch.undo()
    resumed = resume(tmp_path / "b" / "seed-2", config, log=QUIET)
    for a, b in zip(straight, (first, resumed)):
        assert a.summary["final_evaluation"] == b.summary["final_evaluation"]
    assert _metrics(tmp_path / "a" / "seed-2") == _metrics(tmp_path / "b" / "seed-2")
