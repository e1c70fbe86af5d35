"""MAPPO and IPPO: PPO on the agent rows of worlds of several agents. The rows view keeps each agent's decisions
with its world's episode ends; the update on a two-agent rollout is PPO's on the same rows built by hand; and
on a world whose shared reward depends on what each agent alone cannot see, only the centralised critic
explains the returns."""

import copy
import dataclasses

import pytest
import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.mappo.algorithm import IPPO, MAPPO
from rl_gpu.algos.mappo.config import MAPPOConfig
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.collect.reference import collect
from rl_gpu.data.rollout import Rollout
from rl_gpu.envs.testing.xor import HiddenXorEnv
from rl_gpu.envs.cartpole import CartPoleEnv


def _setup(env, seed=0, **kw):
    return Setup(env=env, seed=seed, learning_rate=3e-3, num_steps=8, hidden_sizes=(32, 32), **kw)


def test_the_rows_view_keeps_agents_and_their_worlds():
    env = HiddenXorEnv(5, seed=0)
    algo = MAPPO.from_setup(_setup(env), MAPPOConfig())
    rollout = collect(algo.policy, env, 4, torch.Generator().manual_seed(0))
    rows = rollout.agents_as_rows()
    t, n, m = 4, 5, 2
    assert rows.obs.shape == (t, n * m, 1) and rows.reward.shape == (t, n * m)
    assert torch.equal(rows.obs.view(t, n, m, 1), rollout.obs)
    assert torch.equal(rows.terminated.view(t, n, m), rollout.terminated[:, :, None].expand(t, n, m))
    assert torch.equal(rows.critic_obs.view(t, n, m, 2), rollout.critic_obs[:, :, None].expand(t, n, m, 2))
    assert torch.equal(rows.bootstrap_value.view(n, m), rollout.bootstrap_value)
    assert rollout.agents_as_rows(critic=False).critic_obs is None


def test_the_update_is_ppos_on_the_agent_rows():
    env = HiddenXorEnv(8, seed=1)
    config = MAPPOConfig(num_minibatches=2, update_epochs=2, value_norm=False)
    algo = MAPPO.from_setup(_setup(env), config)
    twin = PPO(copy.deepcopy(algo.policy), config, 3e-3, seed=5)
    twin.shuffle_rng.set_state(algo.shuffle_rng.get_state())
    rollout = algo.collect()
    assert rollout.acting is not None
    by_hand = rollout.agents_as_rows()
    ours, theirs = algo.update(rollout), twin.update(by_hand)
    assert torch.equal(ours.loss, theirs.loss)
    for a, b in zip(algo.policy.parameters(), twin.policy.parameters()):
        assert torch.equal(a, b)


def _explained_variance(cls, updates=40):
    torch.manual_seed(0)
    env = HiddenXorEnv(64, seed=3)
    algo = cls.from_setup(_setup(env, seed=4), MAPPOConfig(num_minibatches=4, update_epochs=4, ent_coef=0.0))
    values = [float(algo.iterate()["explained_variance"]) for _ in range(updates)]
    return sum(values[-5:]) / 5


def test_only_a_centralised_critic_explains_a_reward_no_agent_sees():
    centralised, independent = _explained_variance(MAPPO), _explained_variance(IPPO)
    assert centralised > 0.9, centralised
    assert abs(independent) < 0.1, independent


class ScaledXorEnv(HiddenXorEnv):
    """Rewards of 1000 where HiddenXorEnv pays 1."""

    def _transition(self, s, action):
        s, reward, done = super()._transition(s, action)
        return s, reward * 1000, done


@pytest.mark.parametrize("value_norm", [True, False])
def test_value_normalisation_keeps_the_critic_at_unit_scale(value_norm):
    torch.manual_seed(0)
    algo = MAPPO.from_setup(_setup(ScaledXorEnv(32, seed=0)), MAPPOConfig(value_norm=value_norm, clip_vloss=False))
    losses = [float(algo.iterate()["value_loss"]) for _ in range(6)]
    if value_norm:
        # Targets of mean 500 and std 500 are learnt as (G - 500) / 500: a loss of order 1 from the second update.
        assert max(losses[1:]) < 5, losses
        stats = algo.value_normalizer.stats
        assert abs(float(stats.mean[0]) - 500) < 100 and abs(float(stats.var[0]) ** 0.5 - 500) < 100
        saved = algo.state_dict()
        again = MAPPO.from_setup(_setup(ScaledXorEnv(32, seed=0)), MAPPOConfig())
        again.load_state_dict(saved)
        assert torch.equal(again.value_normalizer.stats.mean, stats.mean)
    else:
        assert min(losses) > 1e4, losses


def test_what_mappo_and_ippo_refuse():
    with pytest.raises(ValueError, match="use --algo ppo"):
        MAPPO.from_setup(_setup(CartPoleEnv(4, seed=0)), MAPPOConfig())
    env = HiddenXorEnv(4, seed=0)
    no_critic = dataclasses.replace(env.spec, obs_groups={"policy": (1,)})
    env2 = HiddenXorEnv(4, seed=0)
    env2.critic_obs_shape = None
    assert "critic" not in env2.spec.obs_groups and no_critic.num_agents == 2
    with pytest.raises(ValueError, match="use --algo ippo"):
        MAPPO.from_setup(_setup(env2), MAPPOConfig())
    IPPO.from_setup(_setup(env2), MAPPOConfig())  # IPPO needs no critic group
    with pytest.raises(ValueError, match=r"num_envs \* agents"):
        MAPPO.from_setup(_setup(HiddenXorEnv(3, seed=0)), MAPPOConfig(num_minibatches=5))


def test_rollout_rows_of_one_agent_are_the_rollout():
    env = CartPoleEnv(3, seed=0)
    algo = PPO.from_setup(_setup(env), MAPPOConfig())
    rollout = algo.collect().clone()
    assert isinstance(rollout, Rollout) and rollout.agents_as_rows() is rollout


def test_team_and_per_agent_returns_of_the_episodes_that_ended():
    from rl_gpu.data.episodes import agent_metrics

    ended = torch.tensor([[True, False], [False, True]])                    # [T=2, N=2]
    ret = torch.tensor([[[1.0, 3.0, 9.0], [7.0, 7.0, 7.0]],                # [T, N, M=3]; 7s: not ended there
                        [[5.0, 5.0, 5.0], [2.0, 6.0, -4.0]]])
    everyone = torch.ones(2, 3, dtype=torch.bool)
    out = agent_metrics(ended, ret, everyone)
    assert float(out["team_return"]) == pytest.approx((13 + 4) / 2)           # agents summed, over 2 episodes
    assert float(out["agent_return_min"]) == pytest.approx(1.5)              # agent 0: (1 + 2) / 2
    assert float(out["agent_return_max"]) == pytest.approx(4.5)              # agent 1: (3 + 6) / 2
    first_two = torch.tensor([[True, True, False]] * 2)
    out = agent_metrics(ended, ret, first_two)
    assert float(out["team_return"]) == pytest.approx((4 + 8) / 2) and float(out["agent_return_max"]) == 4.5
    none = agent_metrics(torch.zeros(2, 2, dtype=torch.bool), ret, everyone)
    assert all(float(v) == 0.0 for v in none.values())


def test_an_iteration_reports_team_and_agent_returns():
    algo = MAPPO.from_setup(_setup(HiddenXorEnv(16, seed=0)), MAPPOConfig())
    out = algo.iterate()
    assert set(algo.metric_names) <= set(out)
    # One-step episodes, both agents paid alike: the team's return is twice an agent's, the agents equal.
    assert float(out["team_return"]) == pytest.approx(2 * float(out["episode_return"]))
    assert float(out["agent_return_min"]) == pytest.approx(float(out["agent_return_max"]))


def test_multi_agent_presets_keep_the_scenario_with_its_parameters():
    from rl_gpu.cli.presets import has_preset, preset_config

    config = preset_config("vmas:navigation?n_agents=3", "mappo")
    assert config.num_envs == 128 and config.num_steps == 100 and config.algo_params.update_epochs == 8
    assert isinstance(config.algo_params, MAPPOConfig) and config.algo_params.ent_coef == 0.0
    assert has_preset("vmas:balance") and not has_preset("vmas:wheel")
    assert preset_config("vmas:wheel", "ippo").num_envs == 256  # the generic defaults of a custom task


def test_the_agents_shared_network_may_be_another_policy_kind(call_main, tmp_path):
    pytest.importorskip("vmas")
    import rl_gpu
    from rl_gpu.cli.train import main as train
    from rl_gpu.nn.tanh_gaussian import TanhGaussianActorCritic

    small = ["--env", "vmas:navigation", "--algo", "mappo", "--policy", "tanh_gaussian", "--num-envs", "4",
             "--num-steps", "8", "--max-updates", "1", "--eval-every", "1", "--eval-episodes", "2",
             "--final-eval-episodes", "2", "--device", "cpu", "--quiet"]
    code, _, err = call_main(train, *small, "--output", tmp_path / "run")
    assert code in (0, 1), err
    policy = rl_gpu.load(tmp_path / "run" / "seed-11" / "best.pt").policy
    assert isinstance(policy, TanhGaussianActorCritic) and policy.critic_obs_dim > 0  # the centralised critic
    code, _, err = call_main(train, *small, "--no-share-params", "--output", tmp_path / "never")
    assert code == 2 and "one network the agents share" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "never").exists()
