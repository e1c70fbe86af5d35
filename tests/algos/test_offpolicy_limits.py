"""SAC and TD3 train environments with a ``critic`` observation group (their Q critics read the policy
observation; the group is accepted, not an error), and settings that make a run impossible are refused before
anything is written, naming the setting: a warm-up the budget never gets past, an n-step return longer than an
episode, updates per step or an n-step beyond their bounds, a batch too big for memory."""

from typing import NamedTuple

import pytest
import torch

from rl_gpu.envs.base import TensorEnv


class Drift(NamedTuple):
    x: torch.Tensor
    goal: torch.Tensor


class DriftEnv(TensorEnv[Drift]):
    """Push x towards a hidden goal (the critic group shows it); 10 steps an episode."""

    obs_shape = (1,)
    action_shape = (1,)
    action_low, action_high = (-1.0,), (1.0,)
    max_episode_steps = 10
    critic_obs_shape = (1,)

    def _sample_initial_state(self, num_envs, generator):
        goal = torch.rand(num_envs, generator=generator, device=self.device) * 2 - 1
        return Drift(torch.zeros(num_envs, device=self.device), goal)

    def _transition(self, s, action):
        x = (s.x + 0.2 * action[:, 0].clamp(-1, 1)).clamp(-2, 2)
        return Drift(x, s.goal), -(x - s.goal).abs(), torch.zeros_like(x, dtype=torch.bool)

    def _observe(self, s):
        return s.x[:, None]

    def _observe_critic(self, s):
        return s.goal[:, None]


TINY = ["--env", f"{__name__}:DriftEnv", "--num-envs", "4", "--num-steps", "8", "--min-updates", "1",
        "--eval-every", "2", "--eval-episodes", "4", "--final-eval-episodes", "4", "--solve-threshold", "0",
        "--device", "cpu", "--hidden-sizes", "16", "--batch-size", "16", "--buffer-size", "512"]


@pytest.fixture
def call(call_main):
    from rl_gpu.cli.train import main

    return lambda *args: call_main(main, *args)[::2]  # (exit code, stderr)


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_an_env_with_a_critic_group_trains(algo, tmp_path, call):
    code, err = call("--algo", algo, *TINY, "--learning-starts", "32", "--max-updates", "4",
                     "--output", tmp_path / "run")
    assert code == 1, err  # trained, validated and evaluated; the goal (a return of 0) is out of reach
    assert (tmp_path / "run" / "seed-11" / "best.pt").is_file()


@pytest.mark.parametrize(("args", "needle"), [
    (["--learning-starts", "1000000000000", "--max-updates", "4"],
     "--learning-starts 1,000,000,000,000: the run ends (--max-updates 4 x --num-envs 4 x --num-steps 8 = 128 "
     "steps) before that many"),
    (["--learning-starts", "5000", "--total-timesteps", "2000"], "the run ends (--total-timesteps 2,000)"),
    (["--n-step", "1000000", "--max-updates", "4"], "n_step=1000000"),
    (["--n-step", "50", "--learning-starts", "32", "--max-updates", "4"],
     "--n-step 50 is longer than an episode of DriftEnv (10 steps): give at most 10"),
    (["--updates-per-step", "1000000000", "--max-updates", "4"], "updates_per_step=1000000000.0"),
    (["--batch-size", "1000000000", "--learning-starts", "32", "--max-updates", "4"], "--batch-size 1,000,000,000"),
])
def test_impossible_runs_are_refused_before_anything_is_written(args, needle, tmp_path, call):
    code, err = call("--algo", "sac", *TINY, *args, "--output", tmp_path / "run")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
