"""``rl-gpu train --env pettingzoo:<module>``: a user's PettingZoo environment trained, evaluated and exported from
the command line, its module imported only when the user names it."""

import json

import pytest

pytest.importorskip("mpe2")

from rl_gpu.cli.evaluate import main as evaluate_main  # noqa: E402
from rl_gpu.cli.train import main  # noqa: E402

from cli_call import call_main  # noqa: E402

ENV = "pettingzoo:mpe2.simple_spread_v3?N=2&max_cycles=10"


def test_a_pettingzoo_module_trains_with_ippo_and_evaluates_when_trusted(tmp_path):
    out = tmp_path / "spread"
    code, text, err = call_main(main, "--algo", "ippo", "--env", ENV, "--device", "cpu", "--num-envs", "4",
                                "--num-steps", "10", "--max-updates", "2", "--min-updates", "1", "--eval-every", "2",
                                "--eval-episodes", "4", "--final-eval-episodes", "4", "--hidden-sizes", "16",
                                "--num-minibatches", "2", "--update-epochs", "1", "--seeds", "5", "--output", out)
    assert code == 0, err
    lines = [json.loads(x) for x in (out / "seed-5" / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in lines if "loss" in r] == [40, 80]
    best = out / "seed-5" / "best.pt"
    code, _, err = call_main(evaluate_main, best, "--episodes", "4")
    assert code == 2 and "--trust-env" in err and "mpe2.simple_spread_v3" in err and len(err.splitlines()) == 1
    code, text, err = call_main(evaluate_main, best, "--episodes", "4", "--trust-env", ENV)
    assert code == 0, err
    assert "mean length 10.0" in text


def test_a_module_without_parallel_env_is_one_line(tmp_path):
    code, _, err = call_main(main, "--algo", "mappo", "--env", "pettingzoo:json", "--device", "cpu",
                            "--output", tmp_path / "never")
    assert code == 2 and "no parallel_env" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "never").exists()
