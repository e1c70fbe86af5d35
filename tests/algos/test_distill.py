"""Teacher-student distillation (``--algo distill``): the teacher labels the student's own states through its own
environment's observation of them, the student's imitation loss and its gap to the teacher fall on a fixed
teacher, a student that sees less (no velocities, four frames) learns a teacher that sees them, and what cannot
work is refused in one line."""

import copy
import json

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.distill.algorithm import Distill
from rl_gpu.algos.distill.config import DistillConfig
from rl_gpu.envs.registry import make
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.runtime.checkpoint import save_checkpoint


def _teacher(tmp_path, env_id="CartPole-v1", seed=0):
    """A fixed teacher: a random network on ``env_id``, saved as a checkpoint."""
    env = make(env_id, num_envs=1)
    torch.manual_seed(seed)
    policy = policy_for_env(env.spec, (16,))
    torch.nn.init.normal_(policy.actor[-1].weight, std=1.0)  # a teacher whose choice depends on the state
    path = tmp_path / f"teacher-{seed}.pt"
    save_checkpoint(path, {"env_id": env_id, "algo": "ppo", "policy_config": policy.config(),
                           "algorithm": {"policy": policy.state_dict()}})
    return path, policy


def _student(teacher, env_id="CartPole-v1", n=32, **config):
    env = make(env_id, num_envs=n, seed=1)
    setup = Setup(env=env, seed=2, learning_rate=3e-3, num_steps=16, hidden_sizes=(32,))
    return Distill.from_setup(setup, DistillConfig(teacher=str(teacher), **config))


def test_the_teacher_sees_the_students_state_through_its_own_observation(tmp_path):
    path, _ = _teacher(tmp_path)
    algo = _student(path, "CartPoleNoVel-v1?frame_stack=4", n=4)
    state = algo.env.state.inner
    seen = algo.observe_teacher(state)
    full = make("CartPole-v1", num_envs=4, seed=1)
    full.state = full.state._replace(inner=type(full.state.inner)(*state[:len(full.state.inner)]))
    assert torch.equal(seen, full.observe().obs)  # the velocities the student does not see
    assert algo.env.observe().obs.shape == (4, 8)


def test_loss_and_gap_fall_on_a_fixed_teacher(tmp_path):
    path, teacher = _teacher(tmp_path)
    algo = _student(path, num_minibatches=2, update_epochs=4)
    results = [algo.iterate() for _ in range(15)]
    gaps = [float(r["action_gap"]) for r in results]
    losses = [float(r["loss"]) for r in results]
    assert gaps[-1] < 0.5 * gaps[0] and losses[-1] < losses[0], (gaps, losses)
    obs = torch.randn(256, 4) * torch.tensor([1.0, 1.0, 0.1, 1.0])
    agree = (algo.policy.act(obs, deterministic=True).action == teacher.act(obs, deterministic=True).action)
    assert float(agree.float().mean()) > 0.8
    # resume: the same next iteration from the saved state
    saved = copy.deepcopy(algo.state_dict())  # as a checkpoint holds it: no tensor shared with the live run
    twin = _student(path, num_minibatches=2, update_epochs=4)
    twin.load_state_dict(saved)
    twin.env.load_state_dict(algo.env.state_dict())
    a, b = algo.iterate(), twin.iterate()
    assert float(a["loss"]) == float(b["loss"]) and float(a["action_gap"]) == float(b["action_gap"])


@pytest.mark.parametrize("teacher_env, student_env, needle", [
    ("Pendulum-v1", "CartPole-v1", "the actions must be the same"),
    ("Pendulum-v1", "MountainCarContinuous-v0", "cannot observe the states"),
    (None, "CartPole-v1", "needs --teacher"),
])
def test_what_cannot_be_distilled_is_refused_in_one_line(tmp_path, teacher_env, student_env, needle):
    path = "" if teacher_env is None else _teacher(tmp_path, teacher_env)[0]
    with pytest.raises(ValueError, match=needle) as info:
        _student(path, student_env)
    assert "\n" not in str(info.value)


def test_from_the_command_line_the_student_trains_saves_and_evaluates(tmp_path, call_main):
    from rl_gpu.cli.evaluate import main as evaluate
    from rl_gpu.cli.train import main as train

    path, _ = _teacher(tmp_path)
    out = tmp_path / "student"
    code, _, err = call_main(train, "--env", "CartPoleNoVel-v1?frame_stack=2", "--algo", "distill", "--teacher", path,
                             "--num-envs", "16", "--num-steps", "8", "--max-updates", "2", "--min-updates", "1",
                             "--eval-every", "1", "--eval-episodes", "4", "--final-eval-episodes", "4",
                             "--solve-threshold", "1e9", "--device", "cpu", "--quiet", "--output", out)
    assert code == 1, err  # the goal is out of reach: files written, exit 1
    rows = [json.loads(line) for line in (out / "seed-11" / "metrics.jsonl").read_text().splitlines()]
    assert all("action_gap" in r for r in rows if "loss" in r)
    code, text, err = call_main(evaluate, out / "seed-11" / "best.pt", "--episodes", "4", "--device", "cpu")
    assert code == 0 and "mean return" in text, err
    assert "teacher: mean return" in text and "the student scores" in text, text  # the gap, side by side
    code, _, err = call_main(train, "--env", "CartPole-v1", "--algo", "distill", "--teacher", tmp_path / "nothing.pt",
                             "--max-updates", "1", "--device", "cpu", "--output", tmp_path / "never")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--teacher" in err, err
    assert not (tmp_path / "never").exists()


def test_a_student_of_a_task_with_a_critic_group_trains_on_its_own_observation(tmp_path):
    pytest.importorskip("mujoco")
    path, _ = _teacher(tmp_path, "Go1-Velocity-v0")  # its critic reads Go1's privileged group
    mask = ",".join(map(str, range(3, 48)))  # no base linear velocity: what the robot cannot measure
    algo = _student(path, f"Go1-Velocity-v0?obs_mask={mask}&frame_stack=3", n=4, num_minibatches=2)
    assert algo.env.spec.critic_obs_size > 0 and algo.policy.critic_obs_dim == 0
    assert algo.policy.critic[0].in_features == 45 * 3
    result = algo.iterate()
    assert torch.isfinite(result["loss"])
