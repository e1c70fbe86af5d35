"""The environment protocol (``rl_gpu.core.types.VecEnv``) as both kinds of environment implement it: what the
spec declares, resetting chosen rows, and restoring state."""

import pytest
import torch

from rl_gpu.core.types import EnvSpec
from rl_gpu.envs.registry import PROTOCOL_MEMBERS, make


@pytest.mark.parametrize("env_id, masks, players, continuous", [
    ("CartPole-v1", False, 1, False), ("RussianRoulette-v0", True, 2, False), ("Pendulum-v1", False, 1, True),
])
def test_tensor_env_spec_declares_what_the_layers_above_read(env_id, masks, players, continuous):
    env = make(env_id, num_envs=3, seed=0)
    spec = env.spec
    assert isinstance(spec, EnvSpec)
    assert (spec.has_action_mask, spec.num_players, spec.is_continuous) == (masks, players, continuous)
    assert spec.functional and spec.exact_resume
    assert spec.obs_groups == {"policy": tuple(env.obs_shape)}
    assert spec.episode_horizon == (env.max_game_length or env.max_episode_steps)
    assert all(m in dir(type(env)) for m in PROTOCOL_MEMBERS)


def test_tensor_env_state_dict_restores_the_exact_future():
    env = make("CartPole-v1", num_envs=5, seed=3)
    actions = torch.randint(0, 2, (20, 5), generator=torch.Generator().manual_seed(0))
    for a in actions[:7]:
        env.step(a)
    saved = {k: (v.clone() if torch.is_tensor(v) else [t.clone() for t in v]) for k, v in env.state_dict().items()}
    first = [env.step(a).obs.clone() for a in actions[7:]]
    other = make("CartPole-v1", num_envs=5, seed=99)
    other.load_state_dict(saved)
    second = [other.step(a).obs.clone() for a in actions[7:]]
    assert all(torch.equal(x, y) for x, y in zip(first, second))


def test_gymnasium_env_resets_only_the_chosen_rows():
    pytest.importorskip("gymnasium")
    env = make("gym:CartPole-v1", num_envs=4, seed=0)
    assert not env.spec.functional and not env.spec.exact_resume
    assert all(m in dir(type(env)) for m in PROTOCOL_MEMBERS)
    for _ in range(5):
        step = env.step(torch.zeros(4, dtype=torch.long))
    before = step.obs.clone()
    after = env.reset_rows(torch.tensor([True, False, True, False]))
    changed = (after.obs != before).any(1)
    assert changed.tolist() == [True, False, True, False]
    nxt = env.step(torch.zeros(4, dtype=torch.long))
    ended = nxt.terminated | nxt.truncated
    lengths = torch.where(ended, torch.zeros_like(nxt.episode_length), nxt.episode_length)
    assert lengths[~ended].tolist() == [1 if r else 6 for r, e in zip([True, False, True, False], ended) if not e]
