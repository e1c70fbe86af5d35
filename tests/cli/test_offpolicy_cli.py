"""``rl-gpu train --algo sac|td3`` as a user runs it: a short run end to end (train, evaluate, export, plot,
resume), each algorithm's own flags and help, and combinations that cannot work refused in one line with exit
code 2 before anything is written."""

import importlib.util
import json

import pytest
import torch

from rl_gpu.cli.evaluate import main as evaluate_main
from rl_gpu.cli.export import main as export_main
from rl_gpu.cli.plot import main as plot_main
from rl_gpu.cli.presets import preset_config
from rl_gpu.cli.train import main
from rl_gpu.interop.policy_io import load_policy

from cli_call import call_main

TINY = ["--env", "Pendulum-v1", "--device", "cpu", "--num-envs", "4", "--num-steps", "8", "--max-updates", "4",
        "--min-updates", "1", "--eval-every", "2", "--eval-episodes", "4", "--final-eval-episodes", "4",
        "--hidden-sizes", "16", "16", "--learning-starts", "32", "--batch-size", "16", "--buffer-size", "512",
        "--log-every", "1", "--seeds", "3"]


def call(*args, command=main):
    """``command``'s exit code, stdout and stderr, in process (as the ``rl-gpu`` entry point runs it)."""
    return call_main(command, *args)


def test_a_short_sac_run_trains_evaluates_exports_plots_and_resumes(tmp_path):
    out = tmp_path / "run"
    code, _, err = call("--algo", "sac", *TINY, "--solve-threshold", "1e9", "--output", out)
    assert code == 1, err  # the goal of 1e9 is not met: a complete run
    run_dir = out / "seed-3"
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["algo"] == "sac" and saved["sac"]["learning_starts"] == 32 and saved["num_envs"] == 4
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in lines if "q_loss" in r] == [32, 64, 96, 128]
    assert all("alpha" in r and "actor_loss" in r for r in lines if "q_loss" in r)
    report = tmp_path / "eval.json"
    code, _, err = call("--checkpoint", run_dir / "best.pt", "--device", "cpu", "--episodes", "8", "--json-output",
                        report, command=evaluate_main)
    assert code == 0, err
    data = json.loads(report.read_text())
    assert data["policy"]["episodes"] == 8 and data["protocol"]["deterministic"] is True
    policy, _ = load_policy(run_dir / "best.pt")
    obs = torch.randn(5, 3)
    want = policy.act(obs, deterministic=True).action
    model = tmp_path / "policy.pt"
    code, text, err = call(run_dir / "best.pt", "--output", model, "--clip-actions", command=export_main)
    assert code == 0, err
    assert "observation normalisation" not in text and "action [N, 1]" in text
    torch.testing.assert_close(torch.jit.load(str(model))(obs), want, atol=1e-5, rtol=1e-5)
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime

        model = tmp_path / "policy.onnx"
        code, _, err = call(run_dir / "best.pt", "--output", model, command=export_main)
        assert code == 0, err
        session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        (action,) = session.run(None, {"obs": obs.numpy()})
        torch.testing.assert_close(torch.from_numpy(action), want, atol=1e-5, rtol=1e-5)
    code, _, err = call(out, "--output", tmp_path / "curve.png", command=plot_main)
    assert code == 0 and (tmp_path / "curve.png").stat().st_size > 0, err
    code, text, err = call("--resume", run_dir, "--max-updates", "6")
    assert code == 1, err
    assert "resumed at update 4" in text
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in lines if "q_loss" in r] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("args, needles", [
    (["--algo", "sac", "--env", "CartPole-v1"], ["SAC needs continuous actions", "--algo ppo"]),
    (["--algo", "td3", "--env", "RussianRoulette-v0"], ["TD3 needs continuous actions"]),
    (["--algo", "ddpg"], ["ddpg", "ppo", "sac", "td3"]),
    (["--algo", "sac", "--clip-coef", "0.1"], ["--clip-coef"]),
    (["--algo", "sac", "--algo", "td3"], ["--algo given more than once"]),
    (["--algo", "sac", "--env", "Pendulum-v1", "--num-steps", "3", "--updates-per-step", "0.5"],
     ["whole number"]),
    (["--algo", "td3", "--tau", "0"], ["tau=0.0"]),
    (["--algo", "sac", "--env", "Pendulum-v1", "--buffer-size", str(10**10)], ["needs about", "--buffer-size"]),
])
def test_combinations_that_cannot_work_are_one_line_exit_2(tmp_path, args, needles):
    out = tmp_path / "never"
    code, _, err = call(*args, "--output", out, "--device", "cpu")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not out.exists()


def test_help_lists_the_chosen_algorithms_flags_only():
    code, text, _ = call("--algo", "td3", "--help")
    assert code == 0 and "--policy-noise FLOAT" in text and "--exploration-noise FLOAT" in text
    assert "--tau FLOAT" in text and "--clip-coef FLOAT" not in text and "--alpha FLOAT" not in text
    code, text, _ = call("--help")
    assert code == 0 and "--clip-coef FLOAT" in text and "--tau FLOAT" not in text


def test_presets_are_per_environment_and_algorithm():
    ppo, sac, td3 = (preset_config("Pendulum-v1", algo) for algo in ("ppo", "sac", "td3"))
    assert (ppo.algo, sac.algo, td3.algo) == ("ppo", "sac", "td3")
    # The task keys (goal, evaluation) are shared; the training settings are each algorithm's.
    assert ppo.solve_threshold == sac.solve_threshold == td3.solve_threshold == -200.0
    assert (sac.num_envs, sac.num_steps) != (ppo.num_envs, ppo.num_steps) and not sac.anneal_lr
    # A task without an off-policy preset still gets the task keys of its own preset.
    walker = preset_config("Walker2d-v5", "td3")
    assert walker.solve_threshold == 2500.0 and type(walker.algo_params).__name__ == "TD3Config"
    with pytest.raises(ValueError, match="unknown algorithm 'a2c'"):
        preset_config("Pendulum-v1", "a2c")
