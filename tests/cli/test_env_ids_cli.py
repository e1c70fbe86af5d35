"""Environment ids from outside on the command line: ``--env package.module:ClassName`` end to end (the
checkpoint records the id as given; ``evaluate`` and ``export`` build the environment again from it wherever the
module is importable), and ids that do not resolve, ours or Gymnasium's: one line, exit 2, nothing written."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
MODULE = "custom_walk_cli"
ENV_ID = f"{MODULE}:WalkEnv"

WALK = textwrap.dedent('''
    """A 1-D walk with a continuous step in [-1, 1]: reward = the step taken; ends at |position| >= 3."""
    from typing import NamedTuple

    import torch

    from rl_gpu.envs.base import TensorEnv


    class WalkState(NamedTuple):
        pos: torch.Tensor


    class WalkEnv(TensorEnv[WalkState]):
        obs_shape = (1,)
        action_shape = (1,)
        action_low = (-1.0,)
        action_high = (1.0,)
        max_episode_steps = 10

        def _sample_initial_state(self, num_envs, generator):
            return WalkState(torch.zeros(num_envs, device=self.device))

        def _transition(self, s, action):
            move = action[:, 0].clamp(-1.0, 1.0)
            pos = s.pos + move
            return WalkState(pos), move, pos.abs() >= 3

        def _observe(self, s):
            return s.pos.unsqueeze(1)
''')

TINY = ["--num-envs", "8", "--num-steps", "8", "--max-updates", "2", "--min-updates", "1", "--eval-every", "1",
        "--eval-episodes", "8", "--final-eval-episodes", "8", "--solve-threshold", "1e9", "--device", "cpu",
        "--hidden-sizes", "8"]


def run(args, cwd, pythonpath):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([sys.executable, "-m", "rl_gpu", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    home = tmp_path_factory.mktemp("custom")
    (home / f"{MODULE}.py").write_text(WALK)
    proc = run(["train", "--env", ENV_ID, "--output", "out", *TINY], cwd=home, pythonpath=[home, ROOT])
    return home, proc


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
def test_train_evaluate_export_a_custom_environment(trained, tmp_path):
    home, proc = trained
    # The goal (a return of 1e9) is out of reach: exit 1 after 2 updates, every file written.
    assert proc.returncode == 1, proc.stderr
    run_dir = home / "out" / "seed-11"
    assert json.loads((run_dir / "config.json").read_text())["env"] == ENV_ID
    assert (run_dir / "best.pt").is_file()

    # From elsewhere, with the module importable and named: the checkpoint's id builds the environment again.
    evaluate = run(["evaluate", "--checkpoint", str(run_dir / "best.pt"), "--device", "cpu", "--episodes", "16",
                    "--trust-env", ENV_ID], cwd=tmp_path, pythonpath=[home, ROOT])
    assert evaluate.returncode == 0, evaluate.stderr
    assert ENV_ID in evaluate.stdout and "mean return" in evaluate.stdout

    # --clip-actions reads the action bounds from the environment the checkpoint names.
    model = tmp_path / "policy.pt"
    export = run(["export", str(run_dir / "best.pt"), "--output", str(model), "--clip-actions",
                  "--trust-env", ENV_ID], cwd=tmp_path, pythonpath=[home, ROOT])
    assert export.returncode == 0, export.stderr
    policy = torch.jit.load(str(model))
    action = policy(torch.linspace(-50, 50, 64).unsqueeze(1) * torch.ones(64, 1))
    assert action.shape == (64, 1) and float(action.min()) >= -1.0 and float(action.max()) <= 1.0


def _one_line_exit_2(capsys, main, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_evaluating_without_the_module_is_one_line(trained, capsys):
    from rl_gpu.cli.evaluate import main

    home, proc = trained
    assert proc.returncode == 1, proc.stderr
    assert MODULE not in sys.modules  # this interpreter never had it on its path
    best = str(home / "out" / "seed-11" / "best.pt")
    err = _one_line_exit_2(capsys, main, [best, "--device", "cpu", "--episodes", "8", "--trust-env", ENV_ID])
    assert err.startswith("rl-gpu evaluate: error:") and f"cannot import module '{MODULE}'" in err
    # Not named: refused before any import is tried.
    err = _one_line_exit_2(capsys, main, [best, "--device", "cpu", "--episodes", "8"])
    assert f"would import the module '{MODULE}'" in err and f"--trust-env {ENV_ID}" in err


@pytest.mark.parametrize(("env_id", "expected"), [
    ("no_such_module_xyz:WalkEnv", "cannot import module 'no_such_module_xyz'"),
    ("custom_walk_bad:WalkState", "not an environment class"),
    ("custom_walk_bad:Missing", "has no attribute 'Missing'"),
])
def test_training_a_class_that_does_not_resolve_is_one_line(env_id, expected, tmp_path, monkeypatch, capsys):
    from rl_gpu.cli.train import main

    (tmp_path / "custom_walk_bad.py").write_text(WALK)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        err = _one_line_exit_2(capsys, main, ["--env", env_id, "--output", str(tmp_path / "out"), *TINY])
    finally:
        sys.modules.pop("custom_walk_bad", None)
    assert err.startswith("rl-gpu train: error:") and expected in err
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(importlib.util.find_spec("gymnasium") is None, reason="needs gymnasium")
@pytest.mark.parametrize(("env_id", "expected"), [
    ("gym:NoSuchEnv-v0", "Environment `NoSuchEnv` doesn't exist"),
    ("gym:Blackjack-v1", "observation space Tuple(Discrete(32), Discrete(11), Discrete(2)) is not supported"),
    pytest.param("gym:LunarLander-v3", "Box2D is not installed", marks=pytest.mark.skipif(
        importlib.util.find_spec("Box2D") is not None, reason="Box2D is installed")),
])
def test_training_a_gym_id_gymnasium_cannot_make_is_one_line(env_id, expected, tmp_path, capsys):
    from rl_gpu.cli.train import main

    err = _one_line_exit_2(capsys, main, ["--env", env_id, "--output", str(tmp_path / "out"), *TINY])
    assert err.startswith(f"rl-gpu train: error: {env_id}: ") and expected in err
    assert not (tmp_path / "out").exists()
