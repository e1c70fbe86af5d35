"""``rl-gpu evaluate``: the run's own evaluation protocol by default, flags override it, and files that are
not its output are never written."""

import json

import pytest
import torch

from rl_gpu.__main__ import main as rl_gpu_main
from rl_gpu.nn.actor_critic import ActorCritic
from rl_gpu.runtime.checkpoint import save_checkpoint

RUN_CONFIG = {"env": "CartPole-v1", "num_envs": 5, "final_eval_episodes": 12, "deterministic_eval": True}


def _checkpoint(path, config=RUN_CONFIG, policy=None, state=None):
    torch.manual_seed(0)
    policy = policy or ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(8,))
    save_checkpoint(path, {"env_id": "CartPole-v1", "policy_config": policy.config(), "update": 3,
                           "global_step": 1200, "seed": 4, "config": config,
                           "algorithm": {"policy": state or policy.state_dict()}})
    return path


def _evaluate(capsys, *args):
    assert rl_gpu_main(["evaluate", "--device", "cpu", *args]) == 0
    return capsys.readouterr().out


def _error(capsys, *args):
    with pytest.raises(SystemExit) as info:
        rl_gpu_main(["evaluate", "--device", "cpu", *args])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and err.startswith("rl-gpu evaluate: error:") and "\n" not in err, err
    return err


def test_the_runs_protocol_is_the_default(tmp_path, capsys):
    ckpt = _checkpoint(tmp_path / "best.pt")
    report = tmp_path / "eval.json"
    out = _evaluate(capsys, "--checkpoint", str(ckpt), "--json-output", str(report))
    assert "protocol: deterministic, 12 episodes, 5 at a time (the run's final evaluation)" in out
    data = json.loads(report.read_text())
    assert data["policy"]["episodes"] == 12 and data["random"]["episodes"] == 12
    assert data["protocol"] == {"episodes": 12, "num_envs": 5, "deterministic": True,
                                "source": "the run's final evaluation"}


def test_flags_override_the_protocol(tmp_path, capsys):
    ckpt = _checkpoint(tmp_path / "best.pt")
    out = _evaluate(capsys, "--checkpoint", str(ckpt), "--episodes", "3", "--sample")
    assert "protocol: sampled actions, 3 episodes, 3 at a time (the run's final evaluation, with --episodes and " \
           "--sample)" in out
    out = _evaluate(capsys, "--checkpoint", str(ckpt), "--episodes", "4", "--num-envs", "2", "--deterministic")
    assert "protocol: deterministic, 4 episodes, 2 at a time (as given)" in out
    # A checkpoint without the settings (written before they existed) falls back to the training defaults.
    old = _checkpoint(tmp_path / "old.pt", config={"env": "CartPole-v1"})
    out = _evaluate(capsys, "--checkpoint", str(old), "--episodes", "6")
    assert "protocol: sampled actions, 6 episodes, 6 at a time" in out
    assert "not allowed together" in _error(capsys, "--checkpoint", str(ckpt), "--deterministic", "--sample")


def test_a_malformed_saved_protocol_is_refused(tmp_path, capsys):
    ckpt = _checkpoint(tmp_path / "odd.pt", config={**RUN_CONFIG, "deterministic_eval": "yes"})
    assert "deterministic_eval" in _error(capsys, "--checkpoint", str(ckpt))


def test_outputs_that_are_not_ours_are_refused_before_evaluating(tmp_path, capsys):
    ckpt = _checkpoint(tmp_path / "best.pt")
    before = ckpt.read_bytes()
    assert "is the input" in _error(capsys, "--checkpoint", str(ckpt), "--json-output", str(ckpt))
    assert "character device" in _error(capsys, "--checkpoint", str(ckpt), "--json-output", "/dev/null")
    assert "not a directory" in _error(capsys, "--checkpoint", str(ckpt), "--json-output",
                                       str(ckpt / "eval.json"))
    assert ckpt.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["best.pt"]


def test_unusable_policies_are_refused(tmp_path, capsys):
    policy = ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(8,))
    state = {k: v.clone() for k, v in policy.state_dict().items()}
    state["critic.0.weight"][1, 2] = float("nan")
    nan = _checkpoint(tmp_path / "nan.pt", policy=policy, state=state)
    assert "NaN or infinite values (critic.0.weight)" in _error(capsys, "--checkpoint", str(nan))
    three = _checkpoint(tmp_path / "three.pt", policy=ActorCritic(obs_dim=4, num_actions=3, hidden_sizes=(8,)))
    assert "chooses among 3 actions, CartPole-v1 takes 2" in _error(capsys, "--checkpoint", str(three))


def test_the_checkpoint_is_positional_or_a_flag(tmp_path, capsys):
    # `rl-gpu export` and `rl-gpu plot` take their paths positionally; evaluate does too, and keeps --checkpoint.
    ckpt = _checkpoint(tmp_path / "best.pt")
    spellings = ([str(ckpt)], ["--checkpoint", str(ckpt)], [f"--checkpoint={ckpt}"])
    outs = [_evaluate(capsys, *args, "--episodes", "3") for args in spellings]
    assert all("3 episodes" in out for out in outs) and outs[0] == outs[1] == outs[2]
    assert "--checkpoint needs a value" in _error(capsys, "--episodes", "3", "--checkpoint")
    assert "--checkpoint needs a value" in _error(capsys, "--checkpoint", "--episodes", "3")
    assert "--checkpoint needs a value" in _error(capsys, "--checkpoint=", "--episodes", "3")
    assert "Unrecognized options" in _error(capsys, str(ckpt), "--checkpoint", str(ckpt))
    # A path that starts with a dash is still a path, not a flag.
    assert "-x.pt: no such checkpoint file" in _error(capsys, "--checkpoint", "-x.pt")
