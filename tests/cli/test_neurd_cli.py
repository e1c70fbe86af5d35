"""``rl-gpu train --algo neurd`` as a user runs it on Leduc: a short run ends with its budget spent (exit 0), its
validations measured by OpenSpiel's exploitability, best.pt evaluated; a resume continues it; settings and games
it cannot run are refused in one line with exit code 2 before anything is written."""

import json

import pytest
import torch

from rl_gpu.cli.evaluate import main as evaluate_main
from rl_gpu.cli.train import main

from cli_call import call_main

SETTINGS = ["--algo", "neurd", "--device", "cpu", "--max-updates", "20", "--eval-every", "10", "--eval-episodes", "64",
            "--final-eval-episodes", "64", "--hidden-sizes", "16", "16"]
SHORT = ["--env", "LeducHoldem-v0", "--seeds", "3", *SETTINGS]


@pytest.mark.slow  # long: keeps the default suite under 8 minutes on 2 cores (make test-slow runs it)
def test_a_short_leduc_run_measures_exploitability_and_resumes(tmp_path):
    pytest.importorskip("pyspiel")
    out = tmp_path / "run"
    code, stdout, err = call_main(main, *SHORT, "--output", out, "--quiet")
    assert code == 0, err
    run = out / "seed-3"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "budget_spent" and summary["updates"] == 20
    validations = [line["validation"] for line in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
                   if "validation" in line]
    assert len(validations) == 3  # the initial policy, then updates 10 and 20
    assert validations[0]["exploitability"] == pytest.approx(2.37, abs=0.01)  # near uniform
    assert all(v["score"] == -v["exploitability"] for v in validations)
    assert min(v["exploitability"] for v in validations[1:]) < validations[0]["exploitability"]
    assert summary["exploitability"]["best"] == min(v["exploitability"] for v in validations)

    code, stdout, err = call_main(evaluate_main, "--checkpoint", run / "best.pt", "--episodes", "8", "--device",
                                 "cpu")
    assert code == 0 and "exploit: policy" in stdout, err

    code, stdout, err = call_main(main, "--resume", run, "--max-updates", "30", "--quiet")
    assert code == 0, err
    assert "full width over 10,200 nodes and 936 information states" in stdout
    assert json.loads((run / "summary.json").read_text())["updates"] == 30
    code, _, err = call_main(main, "--resume", run, "--max-updates", "30")
    assert code == 2 and "it trained its 30 updates" in err and "--max-updates above 30" in err


@pytest.mark.parametrize("extra, message", [
    (["--total-timesteps", "1000"], "--total-timesteps does not apply to --algo neurd"),
    (["--self-play"], "--self-play does not apply to --algo neurd"),
    (["--compile", "inductor"], "--compile inductor does not apply to --algo neurd"),
    (["--num-steps", "8"], "--num-steps does not apply to --algo neurd"),
    (["--env", "RussianRoulette-v0"], "does not list its chance outcomes"),
    (["--env", "CartPole-v1"], "--algo neurd needs a two-player game; CartPole-v1 has 1 player"),
    (["--parallel", "--seeds", "1", "2"], "--parallel trains populations of PPO or MAPPO or IPPO only"),
    (["--logit-threshold", "0"], "logit_threshold=0.0"),
])
def test_what_it_cannot_run_is_refused_before_anything_is_written(tmp_path, extra, message):
    out = tmp_path / "run"
    defaults = [*(["--env", "LeducHoldem-v0"] if "--env" not in extra else []),
                *(["--seeds", "3"] if "--seeds" not in extra else [])]
    code, _, err = call_main(main, *defaults, *SETTINGS, *extra, "--output", out)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_help_lists_its_own_flags():
    code, stdout, _ = call_main(main, "--algo", "neurd", "--env", "LeducHoldem-v0", "--help")
    assert code == 0
    assert "--logit-threshold" in stdout and "--average-lr" in stdout and "--ent-coef" not in stdout


def test_torchrun_is_refused(monkeypatch):
    from rl_gpu.core.errors import UsageError
    from rl_gpu.training import ranks
    from rl_gpu.cli.presets import preset_config

    monkeypatch.setattr(ranks, "is_distributed", lambda: True)
    monkeypatch.setattr(ranks, "world_size", lambda: 2)
    with pytest.raises(UsageError, match="--algo neurd cannot run under torchrun with 2 processes"):
        ranks.check_config(preset_config("LeducHoldem-v0", "neurd"))


@pytest.mark.slow  # tests/algos/test_neurd.py's test_a_resume_is_exact checks the same state, faster
def test_a_resumed_run_continues_exactly(tmp_path):
    pytest.importorskip("pyspiel")
    from rl_gpu.runtime.checkpoint import load_checkpoint

    quick = ["--env", "LeducHoldem-v0", "--seeds", "3", "--algo", "neurd", "--device", "cpu", "--hidden-sizes", "16",
             "16", "--eval-every", "5", "--eval-episodes", "16", "--final-eval-episodes", "16", "--quiet"]
    straight, paused = tmp_path / "straight", tmp_path / "paused"
    assert call_main(main, *quick, "--max-updates", "12", "--output", straight)[0] == 0
    assert call_main(main, *quick, "--max-updates", "7", "--output", paused)[0] == 0
    assert call_main(main, "--resume", paused / "seed-3", "--max-updates", "12", "--quiet")[0] == 0
    a, b = (load_checkpoint(run / "seed-3" / "last.pt")["trainer"]["algorithm"] for run in (straight, paused))
    assert a["iteration"] == b["iteration"] == 12
    for name in ("current", "average_policy"):
        for key in a[name]:
            assert torch.equal(a[name][key], b[name][key]), (name, key)
    assert torch.equal(a["average"], b["average"])
