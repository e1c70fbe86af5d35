"""Checkpoints written before the training state moved to the layered layout (format version 1): their policy
still evaluates and exports; resuming them is refused with one line that says why."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.envs.registry import make
from rl_gpu.runtime.checkpoint import FORMAT

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _version_1_run(run_dir: Path) -> Path:
    """A run directory whose last.pt has version 1's layout: the trainer state without the environments'
    ``env`` entry (it kept ``env_state`` / ``env_rng`` and an ``opponent_rng`` of its own)."""
    env = make("CartPole-v1", num_envs=4, seed=0)
    policy = policy_for_env(env.spec)
    run_dir.mkdir(parents=True)
    payload = {
        "format": FORMAT, "version": 1, "env_id": "CartPole-v1", "policy_config": policy.config(),
        "update": 3, "global_step": 384, "seed": 5,
        "config": {"env": "CartPole-v1", "seeds": [5], "num_envs": 4, "solve_threshold": 475.0, "num_steps": 32,
                   "device": "cpu", "ppo": {"num_minibatches": 4}},
        "validation": None,
        "trainer": {"algorithm": {"policy": policy.state_dict()}, "opponent_rng": torch.get_rng_state(),
                    "env_rng": torch.get_rng_state(), "update": 3},
        "algorithm": {"policy": policy.state_dict()},
    }
    torch.save(payload, run_dir / "last.pt")
    return run_dir / "last.pt"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rl_gpu", *args], env=ENV, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow  # suite time; the refusal to resume a version-1 run still runs in the suite
def test_a_version_1_checkpoint_evaluates_and_exports(tmp_path):
    last = _version_1_run(tmp_path / "old" / "seed-5")
    out = _run("evaluate", "--checkpoint", str(last), "--device", "cpu", "--episodes", "8", "--num-envs", "8")
    assert out.returncode == 0, out.stderr
    assert "mean return" in out.stdout
    exported = tmp_path / "policy.pt"
    out = _run("export", str(last), "--output", str(exported))
    assert out.returncode == 0, out.stderr
    assert torch.jit.load(str(exported))(torch.zeros(2, 4)).shape == (2,)


def test_resuming_a_version_1_run_is_refused_with_one_line(tmp_path, call_main):
    from rl_gpu.cli.train import main

    run_dir = _version_1_run(tmp_path / "old" / "seed-5").parent
    before = (run_dir / "last.pt").read_bytes()
    code, _, err = call_main(main, "--resume", run_dir, "--device", "cpu")  # as `rl-gpu train` runs it
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "before 0.2" in lines[0] and "evaluate and export still read it" in lines[0]
    assert (run_dir / "last.pt").read_bytes() == before
