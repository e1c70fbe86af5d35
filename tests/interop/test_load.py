"""``rl_gpu.load``: a checkpoint's policy ready to act, and every weight checked against its architecture."""

import numpy as np
import pytest
import torch

import rl_gpu
from rl_gpu.nn.actor_critic import ActorCritic, GaussianActorCritic
from rl_gpu.runtime.checkpoint import CheckpointError, save_checkpoint


def _save(path, policy, env_id="CartPole-v1", config=None, state=None):
    save_checkpoint(path, {"env_id": env_id, "policy_config": config or policy.config(), "update": 1,
                           "global_step": 8, "algorithm": {"policy": state or policy.state_dict()}})
    return path


def _discrete():
    torch.manual_seed(0)
    policy = ActorCritic(obs_dim=4, num_actions=3, hidden_sizes=(8,), normalize_obs=True)
    torch.nn.init.normal_(policy.actor[-1].weight, std=1.0)
    policy.update_normalizer(torch.randn(64, 4) * 2 + 1)
    return policy.eval()


def test_load_acts_like_the_saved_policy(tmp_path):
    policy = _discrete()
    loaded = rl_gpu.load(_save(tmp_path / "best.pt", policy))
    assert loaded.env_id == "CartPole-v1" and isinstance(loaded.policy, ActorCritic)
    assert loaded.obs_dim == 4 and loaded.num_actions == 3 and not loaded.is_continuous
    obs = torch.randn(32, 4, generator=torch.Generator().manual_seed(1)) * 3
    expected = policy.act(obs, deterministic=True).action
    assert torch.equal(loaded.act(obs), expected)
    as_numpy = loaded.act(obs.numpy().astype(np.float64))
    assert isinstance(as_numpy, np.ndarray) and (as_numpy == expected.numpy()).all()
    assert int(loaded.act(obs[0])) == int(expected[0]) and loaded.act(obs[0]).shape == ()
    mask = torch.zeros(32, 3, dtype=torch.bool)
    mask[:, 1] = True
    assert (loaded.act(obs, mask) == 1).all()
    assert (loaded(obs.numpy(), mask=np.array([True, False, False])) == 0).all()
    sampled = loaded.act(obs, deterministic=False, generator=torch.Generator().manual_seed(0))
    assert sampled.shape == (32,) and int(sampled.max()) < 3


def test_probabilities_are_what_act_samples_from(tmp_path):
    policy = _discrete()
    loaded = rl_gpu.load(_save(tmp_path / "best.pt", policy))
    obs = torch.randn(256, 4, generator=torch.Generator().manual_seed(2)) * 3
    probs = loaded.probabilities(obs)
    assert probs.shape == (256, 3) and torch.allclose(probs.sum(1), torch.ones(256))
    assert torch.equal(probs.argmax(1), loaded.act(obs))  # the most probable action is the deterministic one
    # sampled frequencies over many draws of one observation follow them
    one = obs[:1].expand(20000, 4)
    draws = loaded.act(one, deterministic=False, generator=torch.Generator().manual_seed(3))
    frequency = torch.bincount(draws, minlength=3).float() / 20000
    assert torch.allclose(frequency, probs[0], atol=0.015), (frequency, probs[0])
    mask = torch.tensor([True, False, True])
    masked = loaded.probabilities(obs[0].numpy(), mask.numpy())
    assert masked.shape == (3,) and masked[1] == 0 and abs(masked.sum() - 1) < 1e-6
    with pytest.raises(ValueError, match="density"):
        rl_gpu.load(_save(tmp_path / "c.pt", GaussianActorCritic(obs_dim=3, action_dim=2, hidden_sizes=(8,)),
                          "Pendulum-v1")).probabilities(np.ones(3))


def test_load_continuous(tmp_path):
    torch.manual_seed(0)
    policy = GaussianActorCritic(obs_dim=3, action_dim=2, hidden_sizes=(8,))
    loaded = rl_gpu.load(_save(tmp_path / "p.pt", policy, "Pendulum-v1"))
    obs = np.ones((5, 3), dtype=np.float32)
    assert loaded.act(obs).shape == (5, 2) and loaded.action_dim == 2
    torch.testing.assert_close(torch.from_numpy(loaded.act(obs)),
                               policy.act(torch.from_numpy(obs), deterministic=True).action)


def test_bad_inputs_to_act_are_one_line_value_errors(tmp_path):
    loaded = rl_gpu.load(_save(tmp_path / "best.pt", _discrete()))
    for obs, mask, needle in [(np.ones((2, 5)), None, r"shape \[N, 4\]"), ("abc", None, "numbers"),
                              (np.ones((2, 4)), np.zeros((2, 3), dtype=bool), "allows no action"),
                              (np.ones((2, 4)), np.ones((3, 3), dtype=bool), "mask has 3 rows")]:
        with pytest.raises(ValueError, match=needle):
            loaded.act(obs, mask)


def _refused(path, needle):
    with pytest.raises(CheckpointError) as info:
        rl_gpu.load(path)
    message = str(info.value)
    assert str(path) in message and needle in message and "\n" not in message, message


def test_weights_of_another_env_or_architecture_are_refused(tmp_path):
    policy = _discrete()
    other_env = ActorCritic(obs_dim=6, num_actions=3, hidden_sizes=(8,), normalize_obs=True)
    _refused(_save(tmp_path / "env.pt", policy, state=other_env.state_dict()), "obs_rms.mean has shape [6]")
    wider = dict(policy.config(), hidden_sizes=[16])
    _refused(_save(tmp_path / "arch.pt", policy, config=wider), "the architecture in policy_config needs")
    deeper = dict(policy.config(), hidden_sizes=[8, 8])
    _refused(_save(tmp_path / "deep.pt", policy, config=deeper), "missing")
    no_norm = dict(policy.config(), normalize_obs=False)
    _refused(_save(tmp_path / "norm.pt", policy, config=no_norm), "unexpected 'obs_rms.count'")
    doubled = {k: v.double() if k == "actor.0.bias" else v for k, v in policy.state_dict().items()}
    _refused(_save(tmp_path / "dtype.pt", policy, state=doubled), "actor.0.bias is torch.float64")


@pytest.mark.parametrize("change, needle", [
    ({"kind": "perceiver"}, "unknown policy kind"),
    ({"obs_dim": "4"}, "obs_dim is '4'"),
    ({"num_actions": 0}, "num_actions is 0"),
    ({"normalize_obs": 1}, "normalize_obs is 1"),
    ({"hidden_sizes": [10**12] * 10**4}, "hidden_sizes"),
    ({"hidden_sizes": [10**12]}, "has shape"),
    ({"extra": 1}, "unknown entries"),
])
def test_a_malformed_policy_config_is_refused(tmp_path, change, needle):
    policy = _discrete()
    _refused(_save(tmp_path / "c.pt", policy, config={**policy.config(), **change}), needle)


def test_non_finite_weights_are_refused(tmp_path):
    policy = _discrete()
    for name, value in [("actor.0.weight", float("nan")), ("critic.0.bias", float("inf"))]:
        state = {k: v.clone() for k, v in policy.state_dict().items()}
        state[name][0] = value
        _refused(_save(tmp_path / "nan.pt", policy, state=state), f"NaN or infinite values ({name})")
    state = {k: v.clone() for k, v in policy.state_dict().items()}
    state["obs_rms.var"][0] = -1.0
    _refused(_save(tmp_path / "var.pt", policy, state=state), "negative")


def test_load_is_lazy_and_listed():
    assert "load" in rl_gpu.__all__ and "load" in dir(rl_gpu)
    with pytest.raises(AttributeError):
        rl_gpu.no_such_name  # noqa: B018


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error for a machine without CUDA")
def test_cuda_without_a_gpu_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="no CUDA device"):
        rl_gpu.load(_save(tmp_path / "best.pt", _discrete()), device="cuda")
    with pytest.raises(ValueError, match="device 'tpu:x'"):
        rl_gpu.load(tmp_path / "best.pt", device="tpu:x")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_load_on_cuda_acts_on_the_device(tmp_path):
    policy = _discrete()
    loaded = rl_gpu.load(_save(tmp_path / "best.pt", policy), device="cuda")
    obs = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))
    action = loaded.act(obs.cuda())
    assert action.is_cuda and torch.equal(action.cpu(), policy.act(obs, deterministic=True).action)
    assert isinstance(loaded.act(obs.numpy()), np.ndarray)
