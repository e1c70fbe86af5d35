"""SAC and TD3 really learn: their presets solve Pendulum-v1 (and MountainCarContinuous-v0) from one command,
the goal checked again on fresh seeds by the final evaluation. `slow` (run with -m slow)."""

import json

import pytest

from rl_gpu.cli.presets import preset_config
from rl_gpu.cli.train import main
from rl_gpu.runtime.checkpoint import load_checkpoint


@pytest.mark.slow
@pytest.mark.parametrize("algo, env_id", [("sac", "Pendulum-v1"), ("td3", "Pendulum-v1"),
                                          ("sac", "MountainCarContinuous-v0")])
def test_the_preset_solves_from_one_command(tmp_path, capsys, algo, env_id):
    out = tmp_path / "run"
    code = main(["--algo", algo, "--env", env_id, "--device", "cpu", "--output", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert load_checkpoint(out / "seed-11" / "best.pt")["algo"] == algo
    result = json.loads((out / "seed-11" / "summary.json").read_text())
    assert result["success"], result["reason"]
    best = result["final_evaluation"]["best"]
    assert best["mean_return"] >= preset_config(env_id, algo).solve_threshold - best["return_ci"]
