"""The deployment API validates like the command line: ``rl_gpu.load(ckpt).act`` refuses non-finite observations
(naming the rows; ``check_inputs=False`` skips the check), masks that are not bool, a ``deterministic`` that is
not a bool; devices are checked; ``make`` checks parameters by type and range, takes numpy integers and refuses
sizes that cannot fit before allocating."""

import numpy as np
import pytest
import torch

import rl_gpu
from rl_gpu.nn.actor_critic import ActorCritic, GaussianActorCritic
from rl_gpu.runtime.checkpoint import save_checkpoint


def _saved(tmp_path, policy):
    path = tmp_path / "best.pt"
    save_checkpoint(path, {"env_id": "CartPole-v1", "policy_config": policy.config(),
                           "algorithm": {"policy": policy.state_dict()}})
    return path


def test_act_refuses_what_a_deployment_should_not_act_on(tmp_path):
    loaded = rl_gpu.load(_saved(tmp_path, ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(8,))))
    obs = torch.zeros(5, 4)
    obs[1, 2], obs[3, 0] = float("nan"), float("inf")
    with pytest.raises(ValueError, match="NaN or infinite values in rows 1, 3"):
        loaded.act(obs)
    with pytest.raises(ValueError, match="deterministic must be True or False, got 'no'"):
        loaded.act(torch.zeros(2, 4), deterministic="no")
    with pytest.raises(ValueError, match="mask must be bool"):
        loaded.act(torch.zeros(2, 4), mask=torch.ones(2, 2))
    fast = rl_gpu.load(_saved(tmp_path, ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(8,))),
                       check_inputs=False)
    assert fast.act(obs).shape == (5,)  # the opt-out
    assert loaded.act(np.zeros((3, 4), dtype=np.float64)).shape == (3,)


def test_continuous_actions_are_never_nan_from_nan_observations(tmp_path):
    loaded = rl_gpu.load(_saved(tmp_path, GaussianActorCritic(obs_dim=3, action_dim=2, hidden_sizes=(8,))))
    with pytest.raises(ValueError, match="row 0"):
        loaded.act(torch.tensor([[float("nan"), 0.0, 0.0]]))


@pytest.mark.parametrize("device", ["meta", "cuda:7", "nonsense"] + ([] if torch.cuda.is_available() else ["cuda"]))
def test_devices_are_checked(tmp_path, device):
    path = _saved(tmp_path, ActorCritic(obs_dim=4, num_actions=2, hidden_sizes=(8,)))
    with pytest.raises(ValueError, match="visible|not a device"):
        rl_gpu.load(path, device=device)
    with pytest.raises(ValueError, match="visible|not a device"):
        rl_gpu.make("CartPole-v1", device=device)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"g": "abc"}, "PendulumEnv parameter g must be a finite number, got 'abc'"),
    ({"g": float("nan")}, "PendulumEnv parameter g must be a finite number, got nan"),
    ({"max_speed": -1}, "PendulumEnv parameter max_speed must be above 0, got -1"),
    ({"num_envs": 0}, "num_envs must be between 1"),
    ({"num_envs": 2.5}, "num_envs must be a positive integer"),
    ({"num_envs": True}, "num_envs must be a positive integer"),
])
def test_make_checks_parameters_and_sizes(kwargs, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        rl_gpu.make("Pendulum-v1", **kwargs)


def test_make_takes_numpy_integers_and_refuses_what_cannot_fit():
    assert rl_gpu.make("CartPole-v1", num_envs=np.int64(3)).num_envs == 3
    pytest.importorskip("mujoco")
    pytest.importorskip("gymnasium.envs.mujoco")
    with pytest.raises(ValueError, match="GiB of MuJoCo buffers"):
        rl_gpu.make("HalfCheetah-v5", num_envs=10**9)
    with pytest.raises(ValueError, match="num_variants must be a positive int, at most 65,536"):
        rl_gpu.make("HalfCheetah-v5", num_envs=2, randomization={"num_variants": 10**9})
