"""The memory door: a recurrent policy written here (``rl_gpu.nn.memory``'s protocol) is collected with its state
explicit: reset to the initial state in exactly the rows whose episode ended, kept in the others, carried from
one rollout to the next, and played by the evaluation; PPO refuses it in one line until it trains sequences."""

import contextlib
import io

import pytest
import torch
from torch import nn

from rl_gpu.collect.reference import collect
from rl_gpu.core.types import PolicyOutput
from rl_gpu.envs.registry import make
from rl_gpu.nn import distributions as D
from rl_gpu.nn.kinds import PolicyKind, register_policy_kind, unregister_policy_kind
from rl_gpu.nn.memory import GRUMemory
from rl_gpu.training.evaluation import evaluate_policy


class ToyGRU(nn.Module):
    """A GRU over observations, a categorical head and a critic on its state; records every step's states."""

    is_recurrent = True
    is_continuous = False

    def __init__(self, obs_dim: int, num_actions: int, hidden: int = 8) -> None:
        super().__init__()
        self.obs_dim, self.num_actions = obs_dim, num_actions
        self.memory = GRUMemory(obs_dim, hidden)
        self.actor, self.critic = nn.Linear(hidden, num_actions), nn.Linear(hidden, 1)
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def initial_state(self, num_envs):
        return self.memory.initial_state(num_envs)

    def act_with_state(self, obs, state, action_mask=None, generator=None, deterministic=False, noise=None):
        h = self.memory(obs, state)
        self.seen.append((state.clone(), h.clone()))
        action, log_prob = D.categorical_act(self.actor(h), action_mask, generator, deterministic, noise)
        return PolicyOutput(action, log_prob, self.critic(h).squeeze(-1)), h

    def value_with_state(self, obs, state):
        return self.critic(self.memory(obs, state)).squeeze(-1)

    def config(self):
        return {"kind": "toy_gru", "obs_dim": self.obs_dim, "num_actions": self.num_actions}


def test_the_state_resets_exactly_where_episodes_end():
    torch.manual_seed(0)
    env = make("CartPole-v1", num_envs=16, seed=3, max_episode_steps=6)
    policy = ToyGRU(4, 2)
    rng = torch.Generator().manual_seed(1)
    first = collect(policy, env, 20, rng)
    done = first.done
    assert bool(done.any()) and not bool(done.all())  # both cases occur, so the check below can fail
    for t in range(19):
        given, _ = policy.seen[t + 1]
        _, after = policy.seen[t]
        expected = torch.where(done[t][:, None], torch.zeros_like(after), after)
        assert torch.equal(given, expected), t
    assert torch.equal(first.policy_state0, torch.zeros(16, 8))
    last_after = policy.seen[-1][1]
    assert torch.equal(first.policy_state, torch.where(done[-1][:, None], 0.0, last_after))

    # The next rollout continues from where this one stopped.
    policy.seen.clear()
    second = collect(policy, env, 4, rng, policy_state=first.policy_state)
    assert torch.equal(policy.seen[0][0], first.policy_state) and torch.equal(second.policy_state0,
                                                                             first.policy_state)


def test_turn_based_games_advance_the_state_on_the_learners_turns_only():
    policy = ToyGRU(*_roulette_sizes())
    env = make("RussianRoulette-v0", num_envs=32, seed=5)
    rollout = collect(policy, env, 6, torch.Generator().manual_seed(2), episodic=True,
                      opponent_rng=torch.Generator().manual_seed(3))
    learner = rollout.weight > 0
    for t in range(5):
        given, _ = policy.seen[t + 1]
        state_before, after = policy.seen[t]
        kept = torch.where(learner[t][:, None], after, state_before)
        expected = torch.where(rollout.done[t][:, None], 0.0, kept)
        live = rollout.live[t + 1]
        assert torch.equal(given[live], expected[live]), t


def _roulette_sizes():
    spec = make("RussianRoulette-v0", num_envs=1).spec
    return spec.obs_size, spec.num_actions


def test_the_evaluation_plays_a_recurrent_policy():
    policy = ToyGRU(4, 2)
    result = evaluate_policy(policy, lambda n, seed: make("CartPole-v1", num_envs=n, seed=seed), 12, seed=4,
                             num_envs=6)
    assert result.episodes == 12 and result.mean_length > 0


def test_ppo_refuses_a_recurrent_policy_kind_it_cannot_replay(tmp_path):
    from rl_gpu.cli.train import main

    register_policy_kind(PolicyKind("toy_gru", f"{__name__}:ToyGRU", {"obs_dim": int, "num_actions": int},
                                    ("obs_dim", "num_actions"), "discrete", f"{__name__}:toy_gru_for_env"))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
                pytest.raises(SystemExit) as info:
            main(["--env", "CartPole-v1", "--policy", "toy_gru", "--num-envs", "4", "--device", "cpu",
                  "--output", str(tmp_path / "run")])
    finally:
        unregister_policy_kind("toy_gru")
    assert info.value.code == 2 and "has memory but no evaluate_sequence" in err.getvalue(), err.getvalue()
    assert not (tmp_path / "run").exists()


def toy_gru_for_env(spec, hidden_sizes, normalize_obs, init_log_std):
    return ToyGRU(spec.obs_size, spec.num_actions)
