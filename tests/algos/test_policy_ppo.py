"""Masked categorical head, Gaussian head, rollout collection and the masked PPO update."""

import copy
import math

import pytest
import torch

from rl_gpu.nn import distributions as D
from rl_gpu.envs import RussianRouletteVectorized
from rl_gpu.algos.ppo import PPOConfig, update_policy
from rl_gpu.policy import ActorCritic, GaussianActorCritic, UniformRandomPolicy
from rl_gpu.rollout import collect_episodes


def test_masked_sampling_never_picks_illegal_actions():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(20000, 5, generator=g) * 5
    mask = torch.rand(20000, 5, generator=g) < 0.4
    mask[:, 3] |= ~mask.any(1)
    action = D.categorical_sample(logits, mask, g)
    assert mask.gather(1, action[:, None]).all()


def test_masked_sampling_matches_softmax_over_legal_actions():
    g = torch.Generator().manual_seed(1)
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]]).expand(200000, 4)
    mask = torch.tensor([[True, False, True, True]]).expand(200000, 4)
    action = D.categorical_sample(logits, mask, g)
    freq = torch.bincount(action, minlength=4).float() / action.numel()
    expected = torch.softmax(torch.tensor([0.0, -1e30, 2.0, 3.0]), 0)
    torch.testing.assert_close(freq, expected, atol=4e-3, rtol=0)


def test_entropy_over_legal_actions_only():
    logits = torch.zeros(3, 4)
    mask = torch.tensor([[True, True, False, False], [True, False, False, False], [True] * 4])
    ent = D.categorical_entropy(logits, mask)
    torch.testing.assert_close(ent, torch.tensor([math.log(2), 0.0, math.log(4)]))
    assert torch.isfinite(D.categorical_log_prob(logits, mask, torch.tensor([0, 0, 3]))).all()


def test_gaussian_log_prob_and_entropy_match_torch():
    g = torch.Generator().manual_seed(2)
    mean, log_std = torch.randn(50, 3, generator=g), torch.randn(3, generator=g) * 0.3
    action = torch.randn(50, 3, generator=g)
    ref = torch.distributions.Normal(mean, log_std.exp())
    torch.testing.assert_close(D.gaussian_log_prob(mean, log_std, action), ref.log_prob(action).sum(-1))
    torch.testing.assert_close(D.gaussian_entropy(log_std, torch.Size([50])), ref.entropy().sum(-1))


def test_gaussian_policy_log_prob_is_of_the_sampled_action():
    torch.manual_seed(0)
    policy = GaussianActorCritic(3, 2)
    obs = torch.randn(16, 3)
    out = policy.act(obs, generator=torch.Generator().manual_seed(0))
    log_prob, entropy, value = policy.evaluate(obs, out.action)
    torch.testing.assert_close(log_prob, out.log_prob)
    torch.testing.assert_close(value, out.value)


def _batch(seed=0, n=512):
    torch.manual_seed(seed)
    env = RussianRouletteVectorized(n, seed=seed)
    policy = ActorCritic()
    batch = collect_episodes(policy, env, torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 2))
    return policy, batch


def test_collected_batch_shapes_weights_and_rewards():
    policy, batch = _batch()
    T, N = batch.reward.shape
    assert (T, N) == (10, 512) and batch.obs.shape == (T, N, 6) and batch.action_mask.shape == (T, N, 3)
    # Every game ends inside the horizon and exactly once per row.
    assert (batch.done.sum(0) == 1).all()
    # Learner decisions: only on the learner's turn in a live game; legal actions only.
    assert batch.action_mask.gather(2, batch.action[..., None]).all()
    assert ((batch.weight > 0) <= batch.live).all()
    # The learner's reward: +1 or -1 once per game, and it is the learner seat's.
    assert torch.equal(batch.reward.sum(0).abs(), torch.ones(N))
    wins = batch.reward.sum(0) > 0
    stats = batch.episode_stats()
    assert int(stats["episodes"]) == N
    torch.testing.assert_close(stats["win_rate"], wins.float().mean())


def test_learner_reward_sign_from_who_fired():
    policy, batch = _batch(seed=3)
    # In the step where the game ended, the row's actor fired the live round; the learner lost iff it acted.
    end = batch.done
    learner_acted = (batch.weight > 0) & end
    assert torch.all(batch.reward[learner_acted] == -1)
    opponent_acted = end & batch.live & ~(batch.weight > 0)
    assert torch.all(batch.reward[opponent_acted] == 1)


def test_padding_and_opponent_slots_do_not_affect_the_update():
    policy, batch = _batch(seed=4, n=256)
    cfg = PPOConfig(num_minibatches=1, update_epochs=1)
    p1, p2 = copy.deepcopy(policy), copy.deepcopy(policy)
    o1, o2 = torch.optim.Adam(p1.parameters(), lr=1e-3), torch.optim.Adam(p2.parameters(), lr=1e-3)
    update_policy(p1, o1, batch, cfg, torch.Generator().manual_seed(0))
    noisy = copy.copy(batch)
    unused = batch.weight == 0
    noisy.log_prob = torch.where(unused, torch.randn_like(batch.log_prob) * 10, batch.log_prob)
    noisy.value = torch.where(unused, torch.randn_like(batch.value) * 10, batch.value)
    noisy.reward = torch.where(~batch.live, torch.randn_like(batch.reward), batch.reward)
    update_policy(p2, o2, noisy, cfg, torch.Generator().manual_seed(0))
    for a, b in zip(p1.parameters(), p2.parameters()):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("norm_adv", [True, False])
def test_micro_batches_give_the_minibatch_update(norm_adv):
    """A minibatch run as micro-batches (each loss its share of the minibatch's mean, gradients accumulated)
    is the same update as the whole minibatch at once, padding and opponent slots included."""
    policy, batch = _batch(seed=6)
    results = []
    for micro in (None, 700, 10**6):  # 4 uneven micro-batches of 2560 slots, and one
        p = copy.deepcopy(policy)
        cfg = PPOConfig(num_minibatches=2, update_epochs=2, norm_adv=norm_adv, micro_batch_size=micro or 10**6)
        opt = torch.optim.Adam(p.parameters(), lr=1e-3)
        metrics = update_policy(p, opt, batch, cfg, torch.Generator().manual_seed(0))
        results.append((p, metrics.as_floats()))
    (split, m_split), (whole, m_whole) = results[1], results[2]
    assert torch.equal(torch.nn.utils.parameters_to_vector(results[0][0].parameters()),
                       torch.nn.utils.parameters_to_vector(whole.parameters()))
    for a, b in zip(split.parameters(), whole.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert any(not torch.equal(a, b) for a, b in zip(split.parameters(), policy.parameters()))
    for k in m_whole:
        assert m_split[k] == pytest.approx(m_whole[k], rel=1e-4, abs=1e-6), k


def test_update_changes_parameters_and_metrics_are_finite():
    policy, batch = _batch(seed=5)
    before = [p.detach().clone() for p in policy.parameters()]
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    metrics = update_policy(policy, opt, batch)
    values = metrics.as_floats()
    assert all(math.isfinite(v) for v in values.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_uniform_random_opponent_only_legal_and_roughly_uniform():
    mask = torch.tensor([[True, False, True]]).expand(30000, 3)
    out = UniformRandomPolicy().act(torch.zeros(30000, 6), mask, torch.Generator().manual_seed(0))
    counts = torch.bincount(out.action, minlength=3)
    assert counts[1] == 0 and abs(int(counts[0]) - 15000) < 600


def test_running_mean_std_matches_batch_statistics_and_skips_zero_weight_rows():
    from rl_gpu.policy import RunningMeanStd

    g = torch.Generator().manual_seed(0)
    data = torch.randn(1000, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1]) + 2
    rms = RunningMeanStd(3)
    for chunk in data.split(137):
        rms.update(chunk)
    torch.testing.assert_close(rms.mean, data.mean(0))
    torch.testing.assert_close(rms.var, data.var(0, unbiased=False))
    weighted = RunningMeanStd(3)
    junk = torch.full((50, 3), 1e6, dtype=torch.float64)
    weighted.update(torch.cat([data, junk]), torch.cat([torch.ones(1000), torch.zeros(50)]))
    torch.testing.assert_close(weighted.mean, data.mean(0))
    torch.testing.assert_close(weighted.var, data.var(0, unbiased=False))


def test_normalizer_is_identity_until_first_update_and_travels_in_state_dict():
    policy = ActorCritic(normalize_obs=True)
    obs = torch.randn(4, 6)
    torch.testing.assert_close(policy.preprocess(obs), obs)
    policy.update_normalizer(torch.randn(100, 6) * 3 + 1)
    clone = ActorCritic(normalize_obs=True)
    clone.load_state_dict(policy.state_dict())
    torch.testing.assert_close(clone.preprocess(obs), policy.preprocess(obs))
    assert not torch.allclose(policy.preprocess(obs), obs)


def test_wilson_interval_and_z():
    from rl_gpu.training.evaluation import improvement_z, wilson_interval

    lo, hi = wilson_interval(50, 100)
    assert abs(lo - 0.4038) < 1e-3 and abs(hi - 0.5962) < 1e-3
    assert wilson_interval(0, 10)[0] < 1e-12 and wilson_interval(10, 10)[1] > 1 - 1e-12
    assert improvement_z(0.6, 10000, 0.5, 10000) > 14
    assert improvement_z(0.5, 10000, 0.5, 10000) == 0.0


@pytest.mark.parametrize("width", [2, 3])
def test_compiled_minibatch_gather_of_a_mask_is_plain_indexing(width):
    """Compiled, the minibatch gather takes a boolean mask through its flat view: the same rows."""
    from rl_gpu.algos.ppo.update import _rows

    g = torch.Generator().manual_seed(width)
    mask = torch.rand(500, width, generator=g) > 0.5
    values = torch.randn(500, 4, generator=g)
    idx = torch.randperm(500, generator=g)[:123]
    torch._dynamo.reset()
    got_mask, got_values = torch.compile(lambda i: (_rows(mask, i), _rows(values, i)), backend="inductor")(idx)
    assert got_mask.dtype == torch.bool and torch.equal(got_mask, mask[idx]) and torch.equal(got_values, values[idx])
