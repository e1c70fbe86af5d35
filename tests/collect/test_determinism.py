"""Same seed => bit-identical training on CPU: 3 PPO updates through ``rl_gpu.rollout.collect`` and
``rl_gpu.optimization.PPO``, for a continuing single-player task (CartPole-v1) and an episodic two-player game
(RussianRoulette-v0 against the uniform random opponent)."""

from __future__ import annotations

import pytest
import torch

from rl_gpu.envs import make
from rl_gpu.algos.ppo import PPO, PPOConfig
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.collect.reference import collect, episode_horizon

NUM_UPDATES = 3
NUM_ENVS = 8
ROLLOUT_FIELDS = (
    "obs",
    "action",
    "log_prob",
    "value",
    "reward",
    "terminated",
    "truncated",
    "weight",
    "learner_seat",
)


def _train(
    env_id: str, seed: int, *, episodic: bool, scramble_global_rng: bool = False
) -> dict[str, torch.Tensor]:
    """Build env, policy and PPO from ``seed``, run NUM_UPDATES collect + update rounds, and return every
    metric, the rollouts' contents, the final parameters and the final environment state as tensors."""
    env = make(env_id, num_envs=NUM_ENVS, seed=seed, validate_actions=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # network initialisation is the only draw from the global generator
        policy = policy_for_env(env.spec, hidden_sizes=(16, 16), normalize_obs=True)
    algo = PPO(policy, PPOConfig(update_epochs=2, num_minibatches=4), learning_rate=3e-3, seed=seed)
    opponent_rng = torch.Generator().manual_seed(seed + 2)
    num_steps = episode_horizon(env) if episodic else 16
    out: dict[str, torch.Tensor] = {}
    with torch.random.fork_rng(devices=[]):
        if scramble_global_rng:
            # Every draw after initialisation must come from the explicit generators (env, policy, shuffle,
            # opponent): a different global generator state must not change anything.
            torch.manual_seed(seed + 12345)
            torch.rand(17)
        for update in range(NUM_UPDATES):
            rollout = collect(
                policy, env, num_steps, algo.policy_rng, episodic=episodic, opponent_rng=opponent_rng
            )
            metrics = algo.update(rollout)
            for name, value in vars(metrics).items():
                out[f"update{update}.{name}"] = value.detach().clone()
            for name in ROLLOUT_FIELDS:
                out[f"update{update}.rollout.{name}"] = getattr(rollout, name).clone()
            for name, value in rollout.episode_stats().items():
                out[f"update{update}.episodes.{name}"] = value.clone()
    for name, value in policy.state_dict().items():
        out[f"policy.{name}"] = value.detach().clone()
    for i, value in enumerate(env.state.inner):
        out[f"env.inner.{i}"] = value.clone()
    out["env.generator"] = env.generator.get_state()
    return out


def _differences(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    assert a.keys() == b.keys()
    return [
        k for k in a if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(a[k], b[k])
    ]


@pytest.mark.parametrize(("env_id", "episodic"), [("CartPole-v1", False), ("RussianRoulette-v0", True)])
def test_same_seed_gives_bitwise_identical_training(env_id, episodic):
    first = _train(env_id, seed=7, episodic=episodic)
    second = _train(env_id, seed=7, episodic=episodic)
    assert not _differences(first, second), f"same seed, different results: {_differences(first, second)}"

    # No hidden draws from torch's global generator after initialisation.
    scrambled = _train(env_id, seed=7, episodic=episodic, scramble_global_rng=True)
    assert not _differences(first, scrambled), f"depends on the global RNG: {_differences(first, scrambled)}"

    # Not vacuous: the updates did something, every metric is finite, and another seed changes them.
    for update in range(NUM_UPDATES):
        for name in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm"):
            assert bool(torch.isfinite(first[f"update{update}.{name}"])), (
                f"update {update}: {name} not finite"
            )
    assert float(first[f"update{NUM_UPDATES - 1}.approx_kl"]) > 0.0
    assert int(sum(first[f"update{u}.episodes.episodes"] for u in range(NUM_UPDATES))) > 0
    other = _train(env_id, seed=8, episodic=episodic)
    metric_keys = [
        k for k in first if k.startswith("update") and ".rollout." not in k and ".episodes." not in k
    ]
    assert set(_differences({k: first[k] for k in metric_keys}, {k: other[k] for k in metric_keys}))
