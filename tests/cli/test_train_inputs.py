"""``rl-gpu train``'s inputs, in process (no subprocess start-up): flags, ``--config`` files and saved
configurations all pass one strict check; every refusal is one line, exit code 2, nothing written."""

import contextlib
import dataclasses
import io
import json
import math
import os

import pytest

from rl_gpu import __version__
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.cli.main import main as rl_gpu_main
from rl_gpu.cli.presets import PRESETS, preset_config
from rl_gpu.cli.train import main
from rl_gpu.core.errors import UsageError
from rl_gpu.envs.registry import make
from rl_gpu.core.device import thread_limit
from rl_gpu.training.config import SAVED_EXTRA_KEYS, TrainConfig, config_from_dict
from rl_gpu.training.resources import available_bytes, estimate_bytes


def call(*args, entry=main):
    """``(exit code, stdout, stderr)`` of the command run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = entry(list(args))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def one_line_error(code, out, err):
    assert code == 2, (code, out, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("rl-gpu train: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


BAD_FLAGS = [
    (["--learning-rate", "nan"], "--learning-rate must be a finite number, got nan"),
    (["--learning-rate", "inf"], "--learning-rate must be a finite number, got inf"),
    (["--learning-rate", "-1"], "--learning-rate must be positive"),
    (["--solve-threshold", "nan"], "--solve-threshold must be a finite number"),
    (["--success-z", "nan"], "--success-z must be a finite number"),
    (["--success-z", "-inf"], "--success-z must be a finite number"),
    (["--init-log-std", "1e6"], "--init-log-std must be between"),
    (["--gamma", "nan"], "gamma must be a finite number"),
    (["--ent-coef", "inf"], "ent_coef must be a finite number"),
    (["--target-kl", "nan"], "target_kl must be a finite number"),
    (["--num-steps", str(10**7)], "--num-steps must be at most 1,000,000, got 10,000,000"),
    (["--eval-episodes", str(10**9)], "--eval-episodes must be at most"),
    (["--final-eval-episodes", str(10**9)], "--final-eval-episodes must be at most"),
    (["--max-updates", str(10**10)], "--max-updates must be at most"),
    (["--total-timesteps", "0"], "--total-timesteps must be a positive integer"),
    (["--threads", str(2**40)], f"--threads must be between 1 and {thread_limit()}"),
    (["--threads", "0"], "--threads must be a positive integer"),
    (["--seeds", str(2**64)], "--seeds must be between 0 and 2**63 - 1"),
    (["--num-envs", str(10**12)], "needs about"),
    (["--hidden-sizes", str(10**12)], "needs about"),
    (["--resume", "a", "--resume", "b"], "--resume given more than once"),
    (["--config=a.json", "--config", "b.json"], "--config given more than once"),
    (["--env", "CartPole-v1", "--env=Acrobot-v1"], "--env given more than once"),
    (["--min-updates", "10", "--max-updates", "5"], "pass --min-updates 5 or lower"),
]


@pytest.mark.parametrize("args, needle", BAD_FLAGS, ids=[" ".join(a)[:40] for a, _ in BAD_FLAGS])
def test_bad_flags_are_one_line_errors(cwd, args, needle):
    line = one_line_error(*call("--output", "out", "--device", "cpu", *args))
    assert needle in line
    assert not (cwd / "out").exists()


def test_memory_refusal_gives_the_estimate_and_the_limit(cwd):
    line = one_line_error(*call("--output", "out", "--device", "cpu", "--num-envs", str(10**12)))
    limit = available_bytes(__import__("torch").device("cpu"))
    assert f"{limit / 2**30:,.1f} GiB" in line and "lower --num-envs" in line
    # The estimate grows with what the user asked for, and a preset's run is far inside the machine.
    spec = make("CartPole-v1", num_envs=1).spec
    small = preset_config("CartPole-v1")
    assert estimate_bytes(small, spec) < 2**30
    assert estimate_bytes(dataclasses.replace(small, num_envs=64 * 1000), spec) > 500 * estimate_bytes(small, spec)
    wide = dataclasses.replace(small, hidden_sizes=(4096, 4096))
    assert estimate_bytes(wide, spec) > 6 * 4 * 2 * 4096 * 4096


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


BAD_FILES = [
    ({"seeds": [1.5]}, "seeds must be a list of integers, got [1.5]"),
    ({"seeds": [True]}, "seeds must be a list of integers, got [True]"),
    ({"anneal_lr": "yes"}, "anneal_lr must be true or false, got 'yes'"),
    ({"num_envs": True}, "num_envs must be an integer, got True"),
    ({"num_envs": 3.0}, "num_envs must be an integer, got 3.0"),
    ({"learning_rat": 0.1}, "unknown key 'learning_rat'; did you mean 'learning_rate'?"),
    ({"ppo": {"gama": 0.9}}, "unknown key 'ppo.gama'; did you mean 'ppo.gamma'?"),
    ({"ppo": {"gamma": "0.9"}}, "ppo.gamma must be a finite number, got '0.9'"),
    ({"ppo": {"update_epochs": False}}, "ppo.update_epochs must be an integer"),
    ({"ppo": [1]}, "ppo must be a JSON object"),
    ({"learning_rate": float("nan")}, "learning_rate must be a finite number, got nan"),
    ({"solve_threshold": float("inf")}, "solve_threshold must be a finite number or none, got inf"),
    ({"device": "tpu"}, "device must be one of 'auto', 'cpu', 'cuda'"),
    ({"output": 5}, "output must be a path (string), got 5"),
    ({"num_steps": 0}, "--num-steps must be a positive integer"),
    ({"eval_episodes": 10**12}, "--eval-episodes must be at most"),
]


@pytest.mark.parametrize("extra, needle", BAD_FILES, ids=[str(e)[:40] for e, _ in BAD_FILES])
def test_bad_config_files_are_one_line_errors(cwd, extra, needle):
    path = _write(cwd / "c.json", {"env": "CartPole-v1", "output": "out", **extra})
    line = one_line_error(*call("--config", str(path)))
    assert f"--config {path}: " in line and needle in line
    assert not (cwd / "out").exists()


def test_one_check_for_files_flags_and_python():
    # The same rules hold for a configuration built in Python and for the PPO section on its own.
    for kwargs, needle in [({"seeds": (1.5,)}, "--seeds"), ({"anneal_lr": "yes"}, "--anneal-lr"),
                           ({"num_envs": True}, "--num-envs"), ({"learning_rate": math.inf}, "--learning-rate"),
                           ({"success_z": math.nan}, "--success-z"), ({"threads": 1.0}, "--threads")]:
        with pytest.raises(UsageError, match=needle):
            TrainConfig(**kwargs)
    for kwargs in [{"gamma": math.nan}, {"clip_coef": math.inf}, {"vf_coef": -math.inf},
                   {"max_grad_norm": math.nan}, {"reward_scale": math.inf}, {"update_epochs": True}]:
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            PPOConfig(**kwargs)
    # A saved config.json round-trips, extra keys included; anything else is refused.
    config = preset_config("Pendulum-v1")
    saved = {**config.to_dict(), "seed": 3, "num_steps_resolved": 256, "run_environment": {"torch": "x"}}
    assert set(saved) - set(config.to_dict()) == SAVED_EXTRA_KEYS
    assert config_from_dict(saved) == config
    with pytest.raises(UsageError, match="unknown key 'seed_'"):
        config_from_dict({**saved, "seed_": 1})
    # Python code may spell a tuple as a list and a path as a string.
    assert TrainConfig(seeds=[1, 2], output="x").output.name == "x"


def test_overwrite_is_never_saved_and_ignored_in_files(cwd):
    config = dataclasses.replace(preset_config("CartPole-v1"), overwrite=True)
    assert config.to_dict()["overwrite"] is False
    assert config_from_dict({**config.to_dict(), "overwrite": True}).overwrite is False


def test_min_updates_of_a_preset_is_lowered_to_a_smaller_max_updates(cwd, monkeypatch):
    import rl_gpu.training.runner as runner

    seen = {}
    monkeypatch.setattr(runner, "train", lambda config, **kw: seen.setdefault("config", config) and [])
    code, _, err = call("--max-updates", "20", "--output", "out")
    assert code == 0, err
    assert seen["config"].min_updates == seen["config"].max_updates == 20
    assert PRESETS["RussianRoulette-v0"]["min_updates"] > 20
    assert "note: --min-updates lowered from 150 to 20" in err


def test_version_and_help(cwd):
    for entry, args in [(rl_gpu_main, ["--version"]), (main, ["--version"]), (rl_gpu_main, ["train", "--version"])]:
        code, out, _ = call(*args, entry=entry)
        assert code == 0 and out.strip() == f"rl-gpu {__version__}"
    code, out, _ = call("--help")
    assert code == 0
    head = "\n".join(out.splitlines()[:6])
    assert "RussianRoulette-v0's preset" in head and "--env ID --help" in head
    assert "{None}" not in out and "(default: None) (default" not in out
    assert "--num-steps INT" in out and "--total-timesteps INT" in out and "--target-kl FLOAT" in out
    code, out, _ = call("--env", "CartPole-v1", "--help")
    assert code == 0 and "CartPole-v1's preset" in out and "(default: 475.0)" in out
    # "None" still means no value for an optional flag: only the bad --num-envs is reported.
    line = one_line_error(*call("--num-steps", "None", "--num-envs", "x"))
    assert "--num-envs" in line and "--num-steps" not in line


def test_config_with_a_single_player_task_needs_a_goal_or_a_budget(cwd):
    line = one_line_error(*call("--env", "CartPole-v1", "--solve-threshold", "None", "--device", "cpu",
                                "--output", "out"))
    assert "--solve-threshold" in line and "--total-timesteps" in line
    assert not os.path.exists(cwd / "out")


def test_config_that_is_no_regular_file_is_named_as_such(tmp_path):
    line = one_line_error(*call("--config", os.devnull, "--output", str(tmp_path / "out")))
    assert "not a regular file" in line
    line = one_line_error(*call("--config", str(tmp_path / "missing.json"), "--output", str(tmp_path / "out")))
    assert "no such file" in line
    assert not (tmp_path / "out").exists()
