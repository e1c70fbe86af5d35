"""MAPPO learns on VMAS with its presets (slow: run with -m slow). Thresholds read off the runs in
benchmarks/learning.md (seed 1, one thread), with a margin: a fraction of the budget must already beat the initial
policy by most of what the full run gained."""

import dataclasses

import pytest

pytest.importorskip("vmas")

from rl_gpu.cli.presets import preset_config  # noqa: E402
from rl_gpu.training.runner import train  # noqa: E402


def _final(tmp_path, env_id: str, updates: int) -> dict:
    config = dataclasses.replace(preset_config(env_id, "mappo"), output=tmp_path / "run", device="cpu", seeds=(1,),
                                 total_timesteps=updates * 128 * 100, eval_every=updates, eval_episodes=64,
                                 final_eval_episodes=64)
    (result,) = train(config, log=lambda line: None)
    assert result.status == "budget_spent", result.reason
    return result.summary["final_evaluation"]


@pytest.mark.slow
@pytest.mark.parametrize("env_id, updates, above", [
    # navigation: 0.02 at the start, 3.56 after 10 updates, 3.93 at 1M steps.
    ("vmas:navigation", 10, 2.5),
    # balance: -1.51 at the start, 3.11 after 10 updates, 38.16 after 20, 40.86 at 1M steps.
    ("vmas:balance", 20, 30.0),
])
def test_mappo_learns_vmas_scenarios(tmp_path, env_id, updates, above):
    final = _final(tmp_path, env_id, updates)
    assert final["best"]["mean_return"] > above, final
    assert final["best"]["mean_return"] > final["initial"]["mean_return"] + above / 2, final
