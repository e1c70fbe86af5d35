"""Learning while collecting (rl_gpu.algos.ppo.asynchronous): the same random streams as the synchronous loop
(with a learning rate of 0 both loops give the same rollouts bit for bit), rollouts acted by the previous policy
version and logged as lag 1, V-trace ratios measured for that lag, exact resume with the rollout in flight saved,
refusals."""

import copy

import pytest
import torch

from rl_gpu import make
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.vtrace.algorithm import APPO
from rl_gpu.algos.vtrace.config import APPOConfig
from rl_gpu.nn.actor_critic import policy_for_env

FIELDS = ("obs", "action", "log_prob", "value", "reward", "terminated", "truncated", "final_value")


def _pair(lr, cls=PPO, config=None, env_id="CartPole-v1", normalize_obs=False, loops=(False, True)):
    torch.manual_seed(0)
    envs = [make(env_id, num_envs=8, seed=2, max_episode_steps=20) for _ in range(2)]
    policy = policy_for_env(envs[0].spec, hidden_sizes=(16,), normalize_obs=normalize_obs)
    config = config or PPOConfig(update_epochs=2, num_minibatches=2)
    return [cls(copy.deepcopy(policy), config, lr, seed=5, env=env, num_steps=12, async_collect=on)
            for env, on in zip(envs, loops)]


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_with_a_frozen_policy_the_loops_collect_the_same_rollouts(normalize_obs):
    # With observation statistics, the collecting copy normalises with the statistics the learner will have when
    # it learns from the rollout: as the synchronous loop's, step for step.
    sync, asyn = _pair(lr=0.0, normalize_obs=normalize_obs)
    for _ in range(4):
        a, b = sync.iterate(), asyn.iterate()
        for name in FIELDS:
            assert torch.equal(getattr(sync.last_rollout, name), getattr(asyn.last_rollout, name)), name
        assert torch.equal(a.collected.episode_return, b.collected.episode_return)


def test_rollouts_are_acted_by_the_previous_version_and_the_lag_is_logged():
    _, asyn = _pair(lr=1e-2)
    lags, snapshots = [], []
    for _ in range(3):
        snapshots.append(copy.deepcopy(asyn.policy))
        learner = asyn.iterate().learner
        lags.append(tuple(float(learner[k]) for k in ("policy_lag_min", "policy_lag", "policy_lag_max")))
    # Lags in optimizer steps (2 epochs x 2 minibatches per update): the first rollout is fresh, every later one
    # was collected an update (4 steps) before its first step.
    assert lags == [(0, 1.5, 3), (4, 5.5, 7), (4, 5.5, 7)] and asyn.version == 3
    r = asyn.last_rollout  # the third rollout: acted by the policy as it was before the second update
    for version, expect in ((1, True), (2, False)):
        log_prob, _, _ = snapshots[version].evaluate(r.obs.flatten(0, 1), r.action.flatten(0, 1),
                                                     r.action_mask.flatten(0, 1))
        assert torch.allclose(log_prob.view_as(r.log_prob), r.log_prob, atol=1e-6) is expect


def test_appo_measures_the_ratios_of_a_stale_rollout():
    _, appo = _pair(lr=1e-2, cls=APPO, config=APPOConfig(update_epochs=2, num_minibatches=2))
    appo.iterate()
    assert appo.policy_lag == 0
    appo.iterate()
    rollout, _ = appo._async.next
    appo.policy_lag = 1
    log_rho, value = appo.behaviour_gap(rollout)
    assert log_rho.abs().max() > 0 and not torch.equal(value, rollout.value)
    appo.policy_lag = 0
    log_rho, value = appo.behaviour_gap(rollout)
    assert not log_rho.any() and value is rollout.value


def test_resume_continues_exactly():
    _, straight = _pair(lr=1e-2)
    _, first = _pair(lr=1e-2)
    for _ in range(2):
        straight.iterate()
        first.iterate()
    saved, env_state = first.state_dict(), first.env.state_dict()
    _, resumed = _pair(lr=1e-2)
    resumed.load_state_dict(saved)
    resumed.env.load_state_dict(env_state)
    for _ in range(2):
        a, b = straight.iterate(), resumed.iterate()
        assert torch.equal(a.learner["loss"], b.learner["loss"])
    for p, q in zip(straight.policy.parameters(), resumed.policy.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("argv, says", [
    (["--algo", "sac", "--env", "Pendulum-v1", "--async"], "--async-collect does not apply to --algo sac"),
    (["--env", "LeducHoldem-v0", "--async"], "single-player tasks"),
    (["--async", "--memory", "gru"], "--async-collect with --parallel, --self-play or --memory"),
    (["--async", "--compile", "cudagraphs"], None),
])
def test_what_cannot_learn_while_collecting_is_refused(argv, says, call_main, tmp_path):
    from rl_gpu.cli.train import main as train_main

    code, out, err = call_main(train_main, *argv, "--output", tmp_path / "run")
    assert code == 2 and "\n" not in err.strip() and not (tmp_path / "run").exists(), err
    assert says is None or says in err, err


def test_max_policy_lag_drops_the_stale_steps():
    # Synchronous: lags 0..3; a bound of 1 keeps the first epoch's two steps, which is the update of one epoch.
    sync, = _pair(lr=1e-2, config=PPOConfig(update_epochs=2, num_minibatches=2, max_policy_lag=1), loops=(False,))
    one_epoch, = _pair(lr=1e-2, config=PPOConfig(update_epochs=1, num_minibatches=2), loops=(False,))
    learner = sync.iterate().learner
    one_epoch.iterate()
    assert float(learner["stale_steps_dropped"]) == 2 and float(learner["policy_lag_max"]) == 1
    for a, b in zip(sync.policy.parameters(), one_epoch.policy.parameters()):
        assert torch.equal(a, b)
    # While collecting: every rollout after the first starts 4 steps old; a bound of 5 keeps 2 of its 4 steps.
    asyn, = _pair(lr=1e-2, config=PPOConfig(update_epochs=2, num_minibatches=2, max_policy_lag=5), loops=(True,))
    dropped = [float(asyn.iterate().learner["stale_steps_dropped"]) for _ in range(3)]
    assert dropped == [0, 2, 2]
    with pytest.raises(ValueError, match="max_policy_lag >= 4"):
        _pair(lr=1e-2, config=PPOConfig(update_epochs=2, num_minibatches=2, max_policy_lag=3), loops=(True,))


def test_decoupled_clip_measures_the_ratio_to_the_learner_as_the_update_starts():
    # One step per update: its ratio is the learner's own at the step (1 everywhere) when decoupled, the learner's
    # to the collecting policy one update older otherwise.
    kl = {}
    for decoupled in (False, True):
        config = APPOConfig(update_epochs=1, num_minibatches=1, decoupled_clip=decoupled)
        appo, = _pair(lr=3e-2, cls=APPO, config=config, loops=(True,))
        kl[decoupled] = [float(appo.iterate().learner["approx_kl"]) for _ in range(3)]
    assert kl[True][0] == kl[False][0]  # the first rollout is not lagged: the same update
    assert all(abs(k) < 1e-6 for k in kl[True][1:]) and all(k > 1e-5 for k in kl[False][1:])
    with pytest.raises(ValueError, match="only with --async"):
        _pair(lr=1e-2, cls=APPO, config=APPOConfig(decoupled_clip=True), loops=(False,))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_lag_bound_holds_inside_a_captured_iteration():
    # The whole-iteration CUDA graph takes its step count from the bound as the eager update does.
    results = {}
    for mode in ("off", "cudagraphs"):
        torch.manual_seed(0)
        env = make("CartPole-v1", num_envs=8, seed=2, device="cuda")
        policy = policy_for_env(env.spec, hidden_sizes=(16,)).cuda()
        algo = PPO(policy, PPOConfig(update_epochs=2, num_minibatches=2, max_policy_lag=1), 1e-2, seed=5,
                   compile=mode, env=env, num_steps=12)
        learner = [algo.iterate().learner for _ in range(3)][-1]
        results[mode] = (float(learner["stale_steps_dropped"]), torch.cat([p.flatten() for p in algo.policy.parameters()]))
    assert results["off"][0] == results["cudagraphs"][0] == 2
    assert torch.allclose(results["off"][1], results["cudagraphs"][1], atol=1e-5)
