"""The pixel door (issue 30, change 1): an environment declares the dtype of its observations; uint8 observations
stay uint8 in the spec, in rollouts (reference and compiled collector alike) and in replay, and networks, exports
and the trainer take them as float32 at their input."""

import json
import sys
from typing import NamedTuple

import pytest
import torch

from rl_gpu.collect.engine import RolloutEngine
from rl_gpu.collect.reference import collect
from rl_gpu.core.types import EnvSpec
from rl_gpu.data.replay import ReplayBuffer
from rl_gpu.envs.base import TensorEnv
from rl_gpu.envs.testing.preflight import check_run_env
from rl_gpu.nn.actor_critic import policy_for_env


class Number(NamedTuple):
    value: torch.Tensor
    """[N] int64 in 0..15."""


class ParityEnv(TensorEnv[Number]):
    """A number's 4 bits shown as uint8 pixels (0 or 255); the action guesses its parity (reward 1 if right);
    the number moves on deterministically; episodes of 8 steps."""

    obs_shape = (4,)
    num_actions = 2
    max_episode_steps = 8
    obs_dtype = torch.uint8

    def _sample_initial_state(self, n, g):
        return Number(torch.randint(0, 16, (n,), generator=g, device=self.device))

    def _bits(self, s):
        return (s.value[:, None] >> torch.arange(4, device=self.device)) & 1

    def _transition(self, s, a):
        reward = (a == self._bits(s).sum(1) % 2).float()
        return Number((s.value * 5 + 3) % 16), reward, torch.zeros_like(a, dtype=torch.bool)

    def _observe(self, s):
        return (self._bits(s) * 255).to(torch.uint8)


def test_the_spec_and_the_contract_carry_the_dtype():
    env = ParityEnv(4, seed=0)
    assert env.spec.obs_dtype() == torch.uint8 and env.spec.obs_dtypes == {"policy": "uint8"}
    check_run_env(env)
    assert EnvSpec(obs_shape=(3,)).obs_dtype() == torch.float32
    with pytest.raises(ValueError, match="not a torch dtype name"):
        EnvSpec(obs_shape=(3,), obs_dtypes={"policy": "pixels"})
    with pytest.raises(ValueError, match="groups the spec does not have: \\['critic'\\]"):
        EnvSpec(obs_shape=(3,), obs_dtypes={"critic": "uint8"})


def test_rollouts_keep_uint8_and_the_compiled_collector_equals_the_reference():
    torch.manual_seed(0)
    ref_env, eng_env = ParityEnv(16, seed=1), ParityEnv(16, seed=1)
    policy = policy_for_env(ref_env.spec, hidden_sizes=(8,), normalize_obs=True)
    reference = collect(policy, ref_env, 12, torch.Generator().manual_seed(2))
    engine = RolloutEngine(policy, eng_env, 12)
    fast = engine.run(engine.draw(torch.Generator().manual_seed(2)), out=engine.empty_rollout())[0]
    assert reference.obs.dtype == fast.obs.dtype == torch.uint8
    for name in ("obs", "action", "log_prob", "value", "reward", "truncated"):
        assert torch.equal(getattr(reference, name), getattr(fast, name)), name
    policy.update_normalizer(reference.obs)  # statistics of the pixels as floats
    out = policy.act(reference.obs[0], deterministic=True)
    same = policy.act(reference.obs[0].float(), deterministic=True)
    assert torch.equal(out.action, same.action) and torch.equal(out.value, same.value)
    exported = policy.export_module()
    assert torch.equal(exported(reference.obs[0]), exported(reference.obs[0].float()))


def test_replay_keeps_the_dtype():
    buffer = ReplayBuffer(64, 4, (4,), (1,), "cpu", obs_dtype=torch.uint8)
    assert buffer.obs.dtype == buffer.next_obs.dtype == torch.uint8
    assert buffer.obs.element_size() * 4 == torch.zeros(1).element_size()


def test_a_uint8_environment_trains(call_main, tmp_path, monkeypatch):
    from rl_gpu.cli.train import main

    monkeypatch.setitem(sys.modules, "parity_pixels", sys.modules[__name__])
    code, out, err = call_main(main, "--env", "parity_pixels:ParityEnv", "--output", tmp_path / "run",
                               "--num-envs", 16, "--num-steps", 16, "--max-updates", 3, "--eval-episodes", 8,
                               "--final-eval-episodes", 8, "--solve-threshold", 7.5, "--normalize-obs")
    assert code in (0, 1), err
    summary = json.loads((tmp_path / "run" / "seed-11" / "summary.json").read_text())
    assert summary["updates"] >= 1 and "final_evaluation" in summary


def test_the_gymnasium_bridge_keeps_the_dtype():
    pytest.importorskip("gymnasium")
    import numpy as np

    from rl_gpu.interop.gymnasium import to_gymnasium

    vec = to_gymnasium(ParityEnv(3, seed=1))
    space = vec.single_observation_space
    assert space.dtype == np.uint8 and int(space.low.min()) == 0 and int(space.high.max()) == 255
    obs, _ = vec.reset(seed=0)
    assert obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 255}
    obs, *_ = vec.step(np.zeros(3, dtype=np.int64))
    assert obs.dtype == np.uint8 and vec.observation_space.contains(obs)
