"""A run that learns while collecting (--async-collect; PPO and APPO) stopped and resumed equals the run never
stopped: the rollout collected for the next iteration travels in the checkpoint."""

import dataclasses

import pytest

from rl_gpu.cli.presets import preset_config
from rl_gpu.training.runner import resume, train
from test_reliability import QUIET, _config, assert_same_run  # noqa: I001 (a sibling)


@pytest.mark.parametrize("algo", ["appo"])  # PPO's own async resume: tests/algos/test_async_collect.py
def test_an_async_run_resumes_exactly(algo, tmp_path):
    def config(out):
        base = _config("CartPole-v1", out, max_updates=5, min_updates=5, async_collect=True)
        own = preset_config("CartPole-v1", algo)
        return dataclasses.replace(base, algo=algo, algo_params=own.algo_params)

    train(config(tmp_path / "a"), log=QUIET)
    (paused,) = train(config(tmp_path / "b"), log=QUIET, stop_after=3)
    assert paused.status == "paused"
    resume(tmp_path / "b" / "seed-5", config(tmp_path / "b"), log=QUIET)
    assert_same_run(tmp_path / "a" / "seed-5", tmp_path / "b" / "seed-5")
