"""SAC's maths: the squashed Gaussian's log-density is the change of variables of the Gaussian's (checked
numerically, and it integrates to 1), the soft TD target bootstraps through a time limit but not through a
terminal state (a hand-computed case), the entropy coefficient moves towards its target, and each update's
single backward equals separate critic, actor and temperature steps."""

import copy
import math

import pytest
import torch

from rl_gpu.algos.sac.config import SACConfig
from rl_gpu.algos.sac.loss import make_log_alpha, sac_loss, soft_target
from rl_gpu.data.replay import ReplayBuffer
from rl_gpu.nn import distributions as D
from rl_gpu.nn.ensemble import EnsembleMLP
from rl_gpu.nn.squashed import LOG_STD_MAX, LOG_STD_MIN, SquashedGaussianActor


def _normal_cdf(z):
    return 0.5 * (1 + torch.erf(z / math.sqrt(2)))


@pytest.mark.parametrize("mean, log_std", [(0.0, 0.0), (0.7, -1.2), (-1.5, 0.8), (3.0, 0.3)])
def test_squashed_log_prob_is_the_change_of_variables(mean, log_std):
    # The density of y = tanh(u), u ~ N(mean, std), is the derivative of its CDF P(tanh(u) <= y) =
    # Phi((atanh(y) - mean) / std): a central difference of the CDF, with no Jacobian written by hand.
    std = math.exp(log_std)
    y = torch.linspace(-0.999, 0.999, 4001, dtype=torch.float64)
    h = 1e-6

    def cdf(v):
        return _normal_cdf((torch.atanh(v) - mean) / std)

    numerical = (cdf(y + h) - cdf(y - h)) / (2 * h)
    u = torch.atanh(y)[:, None]
    m = torch.full_like(u, mean)
    s = torch.full_like(u, log_std)
    density = D.squashed_gaussian_log_prob(m, s, u).exp()
    torch.testing.assert_close(density, numerical, rtol=1e-5, atol=1e-7)
    # It integrates to the probability of its interval: trapezoids over y on a grid dense where y bunches up
    # near +-1 (y = tanh of an even grid of u), against the Gaussian's CDF.
    ug = torch.linspace(-6, 6, 200_001, dtype=torch.float64)[:, None]
    yg = torch.tanh(ug[:, 0])
    dens = D.squashed_gaussian_log_prob(torch.full_like(ug, mean), torch.full_like(ug, log_std), ug).exp()
    mass = torch.trapezoid(dens, yg)
    expected = _normal_cdf(torch.tensor((6.0 - mean) / std)) - _normal_cdf(torch.tensor((-6.0 - mean) / std))
    assert float(mass) == pytest.approx(float(expected), rel=1e-6)


def test_squashed_log_prob_sums_dimensions_and_stays_finite_when_saturated():
    mean = torch.tensor([[0.3, -2.0, 0.0]])
    log_std = torch.tensor([[-0.5, 0.1, 0.0]])
    noise = torch.tensor([[0.4, -1.0, 10.0]])  # the last dimension's tanh rounds to exactly 1 in float32
    y, log_prob = D.squashed_gaussian_sample(mean, log_std, noise)
    assert y[0, 2] == 1.0 and torch.isfinite(log_prob).all()
    u = mean + log_std.exp() * noise
    per_dim = [D.squashed_gaussian_log_prob(mean[:, i:i + 1], log_std[:, i:i + 1], u[:, i:i + 1]) for i in range(3)]
    torch.testing.assert_close(log_prob, sum(per_dim))
    # float64 reference of the direct form, where it is still representable.
    u64 = u.double()
    direct = (D.gaussian_log_prob(mean.double(), log_std.double(), u64)
              - torch.log(1 - torch.tanh(u64) ** 2).sum(-1))
    torch.testing.assert_close(log_prob.double(), direct, rtol=1e-4, atol=1e-3)


def test_actor_acts_inside_the_bounds_and_its_mean_is_deterministic():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, (16,), action_low=[-2.0, 0.0], action_high=[2.0, 1.0])
    obs = torch.randn(512, 3) * 5
    sampled = actor.act(obs, generator=torch.Generator().manual_seed(1)).action
    assert (sampled[:, 0].abs() <= 2).all() and (sampled[:, 1] >= 0).all() and (sampled[:, 1] <= 1).all()
    mean, log_std = actor.heads(actor.preprocess(obs))
    assert ((log_std >= LOG_STD_MIN) & (log_std <= LOG_STD_MAX)).all()
    det = actor.act(obs, deterministic=True).action
    torch.testing.assert_close(det, actor.to_env(torch.tanh(mean)))
    torch.testing.assert_close(actor.from_env(det), torch.tanh(mean))


def _constant_networks(q_values, action_dim=1):
    """An actor whose mean is 0 and log std -1.5 everywhere (zero weights), and target critics that output
    ``q_values[e]`` everywhere."""
    actor = SquashedGaussianActor(2, action_dim, (4,))
    critic = EnsembleMLP(len(q_values), 2 + action_dim, (4,))
    with torch.no_grad():
        for p in [*actor.parameters(), *critic.parameters()]:
            p.zero_()
        critic.layers[-1].bias.copy_(torch.tensor(q_values, dtype=torch.float32).view(-1, 1, 1))
    return actor, critic


def test_soft_target_bootstraps_through_truncation_not_termination():
    gamma, alpha = 0.99, 0.5
    actor, target_critic = _constant_networks([5.0, 3.0])
    buf = ReplayBuffer(8, 2, (2,), (1,), "cpu", gamma=gamma)
    obs = torch.zeros(1, 2, 2)
    # Environment 0 terminates, environment 1 is truncated by its time limit; both get reward 1.
    buf.add(obs, torch.zeros(1, 2, 1), torch.ones(1, 2), obs, torch.tensor([[True, False]]),
            torch.tensor([[False, True]]))
    batch = buf.sample(torch.tensor([0, 1]))
    target = soft_target(actor, target_critic, batch, torch.tensor(alpha), torch.zeros(2, 1))
    # Zero noise: u = mean = 0, y = 0, log pi = log N(0; 0, e^-1.5) - log(1 - 0) = 1.5 - log(sqrt(2 pi)).
    log_pi = 1.5 - 0.5 * math.log(2 * math.pi)
    assert target.tolist() == pytest.approx([1.0, 1.0 + gamma * (3.0 - alpha * log_pi)])


def test_soft_target_with_n_step_returns():
    gamma, alpha = 0.9, 0.2
    actor, target_critic = _constant_networks([2.0, 4.0])
    buf = ReplayBuffer(8, 1, (2,), (1,), "cpu", n_step=3, gamma=gamma)
    obs = torch.zeros(4, 1, 2)
    rewards = torch.tensor([[1.0], [2.0], [4.0], [8.0]])
    buf.add(obs, torch.zeros(4, 1, 1), rewards, obs, torch.zeros(4, 1, dtype=torch.bool),
            torch.zeros(4, 1, dtype=torch.bool))
    batch = buf.sample(torch.tensor([0, 3]))
    target = soft_target(actor, target_critic, batch, torch.tensor(alpha), torch.zeros(2, 1))
    log_pi = 1.5 - 0.5 * math.log(2 * math.pi)
    soft_v = 2.0 - alpha * log_pi
    assert target.tolist() == pytest.approx([1 + gamma * 2 + gamma**2 * 4 + gamma**3 * soft_v,
                                             8 + gamma * soft_v])


def _sac_parts(seed=0, autotune=True):
    torch.manual_seed(seed)
    actor = SquashedGaussianActor(3, 2, (32, 32), action_low=[-2.0, -1.0], action_high=[2.0, 1.0])
    critic = EnsembleMLP(2, 5, (32, 32))
    target = copy.deepcopy(critic).requires_grad_(False)
    log_alpha = make_log_alpha(0.3, autotune, torch.device("cpu"))
    buf = ReplayBuffer(64, 4, (3,), (2,), "cpu")
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(8, 4, 3, generator=g)
    action = torch.rand(8, 4, 2, generator=g) * 2 - 1
    buf.add(obs, action, torch.randn(8, 4, generator=g), obs + 0.1, torch.rand(8, 4, generator=g) < 0.1,
            torch.zeros(8, 4, dtype=torch.bool))
    return actor, critic, target, log_alpha, buf


def test_one_backward_equals_separate_critic_actor_and_temperature_steps():
    actor, critic, target, log_alpha, buf = _sac_parts()
    bits = torch.randint(0, 2**62, (16,), generator=torch.Generator().manual_seed(4))
    noise = torch.randn(2, 16, 2, generator=torch.Generator().manual_seed(5))
    loss, stats = sac_loss(actor, critic, target, log_alpha, -2.0, True, buf, bits, noise)
    params = [*actor.parameters(), *critic.parameters(), log_alpha]
    combined = torch.autograd.grad(loss, params)
    # Separately, as three losses with their own parameters (critic first, all with the parameters before any
    # step): the TD loss for the critics, the actor's objective, the temperature's.
    batch = buf.sample(bits)
    alpha = log_alpha.detach().exp()
    y_target = soft_target(actor, target, batch, alpha, noise[0])
    x = actor.preprocess(batch.obs)
    q = critic(torch.cat([x, actor.from_env(batch.action)], -1))
    q_loss = ((q[0] - y_target) ** 2).mean() + ((q[1] - y_target) ** 2).mean()
    grads_q = torch.autograd.grad(q_loss, list(critic.parameters()))
    y, log_pi = actor.sample(x, noise[1])
    frozen = copy.deepcopy(critic).requires_grad_(False)
    actor_loss = (alpha * log_pi - frozen(torch.cat([x, y], -1)).min(0).values).mean()
    grads_pi = torch.autograd.grad(actor_loss, list(actor.parameters()))
    alpha_loss = -(log_alpha * (log_pi.detach() - 2.0)).mean()
    (grad_alpha,) = torch.autograd.grad(alpha_loss, [log_alpha])
    for got, want in zip(combined, [*grads_pi, *grads_q, grad_alpha]):
        torch.testing.assert_close(got, want)
    assert stats[0].item() == pytest.approx(q_loss.item(), rel=1e-6)
    assert stats[1].item() == pytest.approx(actor_loss.item(), rel=1e-6)


@pytest.mark.parametrize("target_entropy, direction", [(-10.0, -1), (10.0, 1)])
def test_the_temperature_moves_towards_its_entropy_target(target_entropy, direction):
    actor, critic, target, log_alpha, buf = _sac_parts()
    bits = torch.randint(0, 2**62, (16,), generator=torch.Generator().manual_seed(4))
    noise = torch.randn(2, 16, 2, generator=torch.Generator().manual_seed(5))
    loss, _ = sac_loss(actor, critic, target, log_alpha, target_entropy, True, buf, bits, noise)
    (grad,) = torch.autograd.grad(loss, [log_alpha])
    # Entropy above a low target: lower alpha (gradient descent on log alpha goes down); below a high one: up.
    assert -grad.item() * direction > 0
    # Without autotune alpha is a constant that no loss trains.
    fixed = make_log_alpha(0.3, False, torch.device("cpu"))
    assert not fixed.requires_grad
    loss, stats = sac_loss(actor, critic, target, fixed, target_entropy, False, buf, bits, noise)
    assert stats[2].item() == 0.0 and stats[3].item() == pytest.approx(0.3)


def test_config_refuses_bad_values_with_the_allowed_ranges():
    with pytest.raises(ValueError, match="tau=0.0.*tau in \\(0, 1\\]"):
        SACConfig(tau=0.0)
    with pytest.raises(ValueError, match="alpha=-1.0"):
        SACConfig(alpha=-1.0)
    with pytest.raises(ValueError, match="whole number"):
        SACConfig(updates_per_step=0.5).updates_per_iteration(3)
    assert SACConfig(updates_per_step=0.5).updates_per_iteration(4) == 2

