"""MuJoCo robots learn with their presets on a short step budget (`slow`: run with -m slow).

Each budget is a fraction of the preset's: these prove learning, benchmarks/learning.md has the full runs."""

import dataclasses

import pytest

pytest.importorskip("mujoco")

from rl_gpu.cli.presets import preset_config  # noqa: E402
from rl_gpu.training.runner import train  # noqa: E402

SHORT = {
    # env id: (step budget, mean deterministic return the best policy must reach)
    "HalfCheetah-v5": (300_000, 1500.0),
    "Hopper-v5": (600_000, 800.0),
    "Walker2d-v5": (500_000, 800.0),
    # An Ant that stands still for 1000 steps already earns about 1000 (the healthy reward).
    "Ant-v5": (500_000, 1500.0),
    "Humanoid-v5": (300_000, 350.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(SHORT))
def test_a_robot_learns_on_a_short_budget(tmp_path, env_id):
    budget, threshold = SHORT[env_id]
    config = dataclasses.replace(preset_config(env_id), output=tmp_path / env_id, device="cpu", seeds=(1,),
                                 total_timesteps=budget, solve_threshold=threshold)
    (result,) = train(config, log=lambda line: None)
    best = result.summary["final_evaluation"]["best"]
    initial = result.summary["final_evaluation"]["initial"]
    assert result.success, result.reason
    assert best["mean_return"] >= threshold - best["return_ci"]
    assert best["mean_return"] > initial["mean_return"] + 3 * (best["return_ci"] + initial["return_ci"])
