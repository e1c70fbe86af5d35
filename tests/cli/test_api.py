"""The Python API (rl_gpu.train -> Run): a run from a script with a callback class, its folder chosen when not
given, its files and policy read back, rl_gpu.train callable however it was imported, and bad settings refused in
one line before anything is written."""

import importlib

import pytest
import torch

import rl_gpu
from rl_gpu.core.errors import UsageError

TINY = dict(num_envs=8, num_steps=16, max_updates=3, min_updates=1, eval_every=1, eval_episodes=8,
            final_eval_episodes=8, progress="off", log=lambda line: None)


def test_a_run_from_python_returns_its_folder_files_and_policy(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []

    class Watch(rl_gpu.Callback):
        def on_validation(self, event):
            seen.append((event.update, event.policy is not None))

    run = rl_gpu.train("CartPole-v1", seed=2, callbacks=[Watch()], **TINY)
    assert run.run_dir == tmp_path.joinpath("artifacts", "CartPole-v1-ppo-1", "seed-2").relative_to(tmp_path)
    assert run.status == "goal_not_met" and seen == [(1, True), (2, True), (3, True)]
    assert [m["update"] for m in run.metrics if "loss" in m] == [1, 2, 3]
    assert run.summary["final_evaluation"]["best"]["episodes"] == 8
    probs = run.policy.probabilities(torch.zeros(4, 4), None)
    assert probs.shape == (4, 2) and torch.allclose(probs.sum(-1), torch.ones(4))
    from rl_gpu.cli.api import _free_output

    assert _free_output("CartPole-v1", "ppo").name == "CartPole-v1-ppo-2"  # the next run's: never the last one's


def test_train_is_callable_however_it_was_imported():
    module = importlib.import_module("rl_gpu.train")  # the command's module, set as the package's attribute
    from rl_gpu import train

    assert rl_gpu.train is module and train is module and callable(train) and hasattr(module, "main")


@pytest.mark.parametrize("kwargs,needle", [
    ({"num_env": 3}, "unknown setting 'num_env' (did you mean 'num_envs'?)"),
    ({"clip_coef": -1.0}, "clip_coef"),
    ({"pool_size": 3}, "--pool-size applies only with --self-play"),
    ({"progress": "loud"}, "progress must be one of auto, live, plain, off"),
    ({"seed": 1, "seeds": (1, 2)}, "seed or seeds, not both"),
])
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, kwargs, needle):
    with pytest.raises(UsageError) as caught:
        rl_gpu.train("CartPole-v1", output=tmp_path / "run", **kwargs)
    assert needle in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "run").exists()


def test_a_resume_from_python_refuses_a_setting_it_cannot_change(tmp_path):
    run = rl_gpu.train("CartPole-v1", output=tmp_path / "run", seed=1, **{**TINY, "max_updates": 1})
    with pytest.raises(UsageError, match="'num_envs' cannot change"):
        rl_gpu.train(resume=run.run_dir, num_envs=16)
    done = rl_gpu.train(resume=run.run_dir, max_updates=2, progress="off", log=lambda line: None)
    assert [m["update"] for m in done.metrics if "loss" in m] == [1, 2]
