"""TD3's maths: the smoothed target (clipped noise, clamped action) bootstraps through a time limit but not
through a terminal state (hand-computed), the actor is updated once every ``policy_frequency`` critic updates
with the targets moving only then, the actor's objective reads the first critic alone, and exploration stays
inside the bounds."""

import copy

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.td3 import TD3, TD3Config
from rl_gpu.algos.td3.loss import smoothed_target, td3_loss
from rl_gpu.data.replay import ReplayBuffer
from rl_gpu.envs.registry import make
from rl_gpu.nn.ensemble import EnsembleMLP
from rl_gpu.nn.squashed import DeterministicActor


def _constant_networks(q_values, actor_out=0.0):
    """An actor whose pre-tanh output is ``actor_out`` everywhere and critics that output ``q_values[e]``."""
    actor = DeterministicActor(2, 1, (4,))
    critic = EnsembleMLP(len(q_values), 3, (4,))
    with torch.no_grad():
        for p in [*actor.parameters(), *critic.parameters()]:
            p.zero_()
        actor.actor[-1].bias.fill_(actor_out)
        critic.layers[-1].bias.copy_(torch.tensor(q_values).view(-1, 1, 1))
    return actor, critic


def test_smoothed_target_bootstraps_through_truncation_not_termination():
    gamma = 0.99
    actor, target_critic = _constant_networks([5.0, 3.0])
    config = TD3Config(policy_noise=0.2, noise_clip=0.5, gamma=gamma)
    buf = ReplayBuffer(8, 3, (2,), (1,), "cpu", gamma=gamma)
    obs = torch.zeros(1, 3, 2)
    buf.add(obs, torch.zeros(1, 3, 1), torch.tensor([[1.0, 2.0, 3.0]]), obs, torch.tensor([[True, False, False]]),
            torch.tensor([[False, True, False]]))
    batch = buf.sample(torch.tensor([0, 1, 2]))
    target = smoothed_target(actor, actor.actor, target_critic, batch, config, torch.zeros(3, 1))
    assert target.tolist() == pytest.approx([1.0, 2.0 + gamma * 3.0, 3.0 + gamma * 3.0])


def test_target_smoothing_clips_the_noise_and_the_action():
    config = TD3Config(policy_noise=0.2, noise_clip=0.5)
    # A critic whose value is its action input: Q(s, a) = a (first layer passes a, ReLU keeps it positive).
    actor = DeterministicActor(2, 1, (4,))
    critic = EnsembleMLP(1, 3, (1,))
    with torch.no_grad():
        for p in [*actor.parameters(), *critic.parameters()]:
            p.zero_()
        actor.actor[-1].bias.fill_(1.0)  # tanh(1) = 0.7616
        critic.layers[0].weight[0, 2, 0] = 1.0
        critic.layers[1].weight.fill_(1.0)
    buf = ReplayBuffer(8, 3, (2,), (1,), "cpu", gamma=1.0)
    obs = torch.zeros(1, 3, 2)
    no = torch.zeros(1, 3, dtype=torch.bool)
    buf.add(obs, torch.zeros(1, 3, 1), torch.zeros(1, 3), obs, no, no)
    batch = buf.sample(torch.tensor([0, 1, 2]))
    noise = torch.tensor([[1.0], [10.0], [-10.0]])  # 0.2, then clipped to +0.5 and -0.5
    target = smoothed_target(actor, actor.actor, critic, batch, config, noise)
    mu = torch.tanh(torch.tensor(1.0)).item()
    # mu + 0.5 is beyond the bound: the action is clamped to 1.
    assert target.tolist() == pytest.approx([mu + 0.2, 1.0, mu - 0.5])


def test_the_actor_objective_reads_the_first_critic_only():
    torch.manual_seed(0)
    actor = DeterministicActor(3, 2, (16,))
    critic = EnsembleMLP(2, 5, (16,))
    buf = ReplayBuffer(32, 4, (3,), (2,), "cpu")
    buf.add(torch.randn(4, 4, 3), torch.rand(4, 4, 2) * 2 - 1, torch.randn(4, 4), torch.randn(4, 4, 3),
            torch.zeros(4, 4, dtype=torch.bool), torch.zeros(4, 4, dtype=torch.bool))
    bits, noise = torch.arange(8), torch.zeros(8, 2)
    config = TD3Config()
    loss, stats = td3_loss(actor, actor.actor, critic, critic, config, buf, True, bits, noise)
    x = buf.sample(bits).obs
    expected = -critic(torch.cat([x, actor.squashed(x)], -1))[0].mean()
    assert stats[1].item() == pytest.approx(expected.item(), rel=1e-6)
    grads = torch.autograd.grad(loss, [*actor.parameters(), critic.layers[0].weight])
    # The actor's gradient is the objective's alone (the TD loss does not reach the actor).
    actor_only = torch.autograd.grad(expected, list(actor.parameters()))
    for got, want in zip(grads[:-1], actor_only):
        torch.testing.assert_close(got, want)
    # Off actor steps: no actor term, and no gradient reaches the actor at all.
    loss, stats = td3_loss(actor, actor.actor, critic, critic, config, buf, False, bits, noise)
    assert stats[1].item() == 0.0
    assert all(g is None for g in torch.autograd.grad(loss, list(actor.parameters()), allow_unused=True))


def test_delayed_actor_and_target_updates():
    env = make("Pendulum-v1", num_envs=2, seed=0, validate_actions=False)
    torch.manual_seed(0)
    config = TD3Config(learning_starts=4, batch_size=8, buffer_size=64, policy_frequency=3)
    algo = TD3.from_setup(Setup(env=env, seed=1, hidden_sizes=(8,), num_steps=2), config)
    assert algo._pattern(0, 7) == (True, False, False, True, False, False, True)
    assert algo._pattern(5, 3) == (False, True, False)
    algo.iterate()  # random actions; its 2 updates are updates 0 (actor) and 1
    actor_before = [p.detach().clone() for p in algo.policy.parameters()]
    targets_before = [p.clone() for p in [*algo.target_actor.parameters(), *algo.target_critic.parameters()]]
    critic_before = [p.detach().clone() for p in algo.critic.parameters()]
    algo.iterate()  # updates 2 (critic only) and 3 (actor and targets)
    assert algo.updates_done == 4
    changed = lambda before, now: any(not torch.equal(a, b) for a, b in zip(before, now))  # noqa: E731
    assert changed(critic_before, algo.critic.parameters())
    assert changed(actor_before, algo.policy.parameters())
    assert changed(targets_before, [*algo.target_actor.parameters(), *algo.target_critic.parameters()])
    # Update 4 updates the critic alone: the actor and the targets stay as they are.
    one = TD3.from_setup(Setup(env=env, seed=1, hidden_sizes=(8,), num_steps=1),
                         TD3Config(learning_starts=0, batch_size=8, buffer_size=64, policy_frequency=3))
    one.load_state_dict(copy.deepcopy(algo.state_dict()))
    actor_before = [p.detach().clone() for p in one.policy.parameters()]
    targets_before = [p.clone() for p in [*one.target_actor.parameters(), *one.target_critic.parameters()]]
    one.iterate()
    assert not changed(actor_before, one.policy.parameters())
    assert not changed(targets_before, [*one.target_actor.parameters(), *one.target_critic.parameters()])


def test_exploration_stays_inside_the_bounds():
    torch.manual_seed(0)
    actor = DeterministicActor(3, 2, (8,), action_low=[-2.0, 0.0], action_high=[2.0, 4.0], exploration_noise=0.5)
    obs = torch.randn(1000, 3)
    det = actor.act(obs, deterministic=True).action
    noisy = actor.act(obs, generator=torch.Generator().manual_seed(0)).action
    assert (noisy[:, 0].abs() <= 2).all() and (noisy[:, 1] >= 0).all() and (noisy[:, 1] <= 4).all()
    # Noise of 0.5 x the half-range (2): the spread of noisy - det is about 1 where no clamping happens.
    spread = (noisy - det)[:, 0].std().item()
    assert 0.8 < spread < 1.1


def test_config_refuses_bad_values():
    with pytest.raises(ValueError, match="policy_frequency=0"):
        TD3Config(policy_frequency=0)
    with pytest.raises(ValueError, match="noise_clip=-0.1"):
        TD3Config(noise_clip=-0.1)
