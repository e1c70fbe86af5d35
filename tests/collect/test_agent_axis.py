"""The agent door: an environment of M = 2 agents acting at once (one world per row) is written against the
``TensorEnv`` contract alone, steps with ``[N, M]`` actions, rewards and legal masks, and is collected with its
agent axis: ``acting`` and ``controlled`` masks, the learner's rows weighted, the other agent played by the
opponent, ``done`` per world. An algorithm that does not train several agents refuses it in one line."""

import contextlib
import io
from typing import NamedTuple

import pytest
import torch

from rl_gpu.collect.reference import collect
from rl_gpu.envs.base import TensorEnv
from rl_gpu.nn.actor_critic import ActorCritic
from rl_gpu.training.evaluation import evaluate_policy


class Meet(NamedTuple):
    pos: torch.Tensor
    """[N, 2] int64 positions on 0..4."""


class MeetEnv(TensorEnv[Meet]):
    """Two agents on a line of 5 cells move left, stay or right at once; each is rewarded -|distance| and the
    episode ends when they share a cell. Agent i may not step off the line (its mask), and sees both
    positions."""

    num_agents = 2
    obs_shape = (2,)
    num_actions = 3
    max_episode_steps = 12

    def _sample_initial_state(self, num_envs, generator):
        return Meet(torch.randint(0, 5, (num_envs, 2), generator=generator, device=self.device))

    def _transition(self, s, action):
        pos = (s.pos + action - 1).clamp(0, 4)
        distance = (pos[:, 0] - pos[:, 1]).abs().float()
        return Meet(pos), -distance[:, None].expand(-1, 2).clone(), distance == 0

    def _observe(self, s):
        mine, theirs = s.pos.float(), s.pos.flip(1).float()
        return torch.stack([mine, theirs], dim=-1) / 4

    def _legal_actions(self, s):
        left, right = s.pos > 0, s.pos < 4
        return torch.stack([left, torch.ones_like(left), right], dim=-1)


def test_an_m_agent_environment_steps_with_an_agent_axis():
    env = MeetEnv(6, seed=0)
    spec = env.spec
    assert spec.num_agents == 2 and spec.obs_shape == (2,) and spec.num_actions == 3
    first = env.reset()
    assert first.obs.shape == (6, 2, 2) and first.action_mask.shape == (6, 2, 3)
    assert first.acting.shape == (6, 2) and bool(first.acting.all())
    step = env.step(torch.ones(6, 2, dtype=torch.long))  # both stay
    assert step.reward.shape == (6, 2) and step.terminated.shape == (6,) and step.episode_return.shape == (6, 2)
    with pytest.raises(ValueError, match=r"shape \(6, 2\)"):
        env.step(torch.ones(6, dtype=torch.long))
    at_edge = env.state.inner.pos == 0
    if bool(at_edge.any()):
        bad = torch.where(at_edge, 0, 1)
        with pytest.raises(ValueError, match="illegal action"):
            env.step(bad)


def test_the_collector_keeps_the_agent_axis_and_its_masks():
    torch.manual_seed(0)
    env = MeetEnv(16, seed=1)
    policy = ActorCritic(obs_dim=2, num_actions=3, hidden_sizes=(8,))
    controlled = torch.tensor([True, False]).expand(16, 2)
    rollout = collect(policy, env, 20, torch.Generator().manual_seed(2), controlled=controlled,
                      opponent_rng=torch.Generator().manual_seed(3))
    t, n, m = 20, 16, 2
    assert rollout.obs.shape == (t, n, m, 2) and rollout.action.shape == (t, n, m)
    assert rollout.reward.shape == (t, n, m) and rollout.log_prob.shape == (t, n, m)
    assert rollout.value.shape == (t, n, m) and rollout.bootstrap_value.shape == (n, m)
    assert rollout.terminated.shape == (t, n) and rollout.truncated.shape == (t, n)
    assert torch.equal(rollout.controlled, controlled) and bool(rollout.acting.all())
    assert bool((rollout.weight[..., 0] == 1).all()) and bool((rollout.weight[..., 1] == 0).all())
    assert bool(rollout.action_mask.gather(-1, rollout.action.unsqueeze(-1)).all())  # every action legal
    # The learner's log-probabilities are its policy's, row by row, agent by agent.
    log_prob, _, value = policy.evaluate(rollout.obs[..., 0, :].reshape(-1, 2), rollout.action[..., 0].reshape(-1),
                                         rollout.action_mask[..., 0, :].reshape(-1, 3))
    torch.testing.assert_close(log_prob.view(t, n), rollout.log_prob[..., 0])
    torch.testing.assert_close(value.view(t, n), rollout.value[..., 0])
    # Worlds end together: where a world ended, both agents' next observations are a fresh start's.
    done = rollout.done
    assert bool(done.any()) and not bool(done.all())
    stats = rollout.episode_stats()
    assert float(stats["episodes"]) == float(done.sum())


def test_the_evaluation_plays_every_agent_with_the_policy():
    policy = ActorCritic(obs_dim=2, num_actions=3, hidden_sizes=(8,))
    result = evaluate_policy(policy, lambda n, seed: MeetEnv(n, seed=seed), 10, seed=0, num_envs=5)
    assert result.episodes == 10 and result.mean_return <= 0


def test_an_algorithm_without_agents_refuses_in_one_line(tmp_path):
    from rl_gpu.cli.train import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
            pytest.raises(SystemExit) as info:
        main(["--env", f"{__name__}:MeetEnv", "--num-envs", "4", "--solve-threshold", "0", "--device", "cpu",
              "--output", str(tmp_path / "run")])
    assert info.value.code == 2, err.getvalue()
    assert "2 agents acting at once" in err.getvalue() and "--algo ppo" in err.getvalue()
    assert not (tmp_path / "run").exists()


def test_the_gymnasium_bridge_refuses_several_agents():
    pytest.importorskip("gymnasium")
    from rl_gpu.interop.gymnasium import TensorVectorEnv

    with pytest.raises(ValueError, match="2 agents acting at once"):
        TensorVectorEnv(MeetEnv(2))
