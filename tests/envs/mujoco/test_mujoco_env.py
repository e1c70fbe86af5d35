"""The MuJoCo task template and engine: domain randomisation, thread-count independence, reward terms in a
training run's metrics."""

import json

import pytest
import torch

pytest.importorskip("mujoco")

from rl_gpu.algos.ppo.config import PPOConfig  # noqa: E402
from rl_gpu.envs.mujoco.locomotion import HalfCheetahEnv  # noqa: E402
from rl_gpu.envs.mujoco.randomization import Randomization  # noqa: E402
from rl_gpu.training.config import TrainConfig  # noqa: E402
from rl_gpu.training.runner import train  # noqa: E402

WIDE = Randomization(friction=(0.3, 1.5), mass=(0.5, 1.5), motor_strength=(0.5, 1.5), damping=(0.5, 2.0),
                     num_variants=8)


def _same_start(env):
    """Every row at row 0's state (variants kept), so that only the physics differs between rows."""
    state = env.get_state()
    physics = state.inner.physics[:1].expand_as(state.inner.physics).clone()
    env.set_state(state._replace(inner=state.inner._replace(physics=physics)))


def _outcome(env, steps=10):
    _same_start(env)
    action = torch.full((env.num_envs, 6), 0.7)
    for _ in range(steps):
        result = env.step(action)
    return result.obs


def test_randomized_rows_get_different_physics_and_equal_variants_equal_physics():
    env = HalfCheetahEnv(32, seed=3, num_threads=1, randomization=WIDE)
    variant = env.state.inner.variant
    assert len(env.engine.models) == 8 and 1 < len(set(variant.tolist())) <= 8
    obs = _outcome(env)
    for i in range(env.num_envs):
        for j in range(i + 1, env.num_envs):
            same = torch.equal(obs[i], obs[j])
            assert same == bool(variant[i] == variant[j]), (i, j, variant[i], variant[j])
    nominal = HalfCheetahEnv(2, seed=3, num_threads=1)
    assert len(nominal.engine.models) == 1 and nominal.variant_scales is None
    nominal_obs = _outcome(nominal)
    assert torch.equal(nominal_obs[0], nominal_obs[1]) and not torch.equal(nominal_obs[0], obs[0])


def test_the_pool_applies_each_scale_to_its_model_fields():
    env = HalfCheetahEnv(4, seed=5, num_threads=1, randomization=WIDE)
    base, scales = env.model, env.variant_scales
    for k, m in enumerate(env.engine.models):
        assert torch.allclose(torch.tensor(m.geom_friction[:, 0]),
                              torch.tensor(base.geom_friction[:, 0] * scales["friction"][k, 0]))
        assert torch.allclose(torch.tensor(m.body_mass), torch.tensor(base.body_mass * scales["mass"][k]))
        assert torch.allclose(torch.tensor(m.actuator_gainprm[:, 0]),
                              torch.tensor(base.actuator_gainprm[:, 0] * scales["motor_strength"][k]))
        assert torch.allclose(torch.tensor(m.dof_damping), torch.tensor(base.dof_damping * scales["damping"][k]))
    low, high = WIDE.mass
    assert ((scales["mass"] >= low) & (scales["mass"] <= high)).all()


def test_the_same_seed_draws_the_same_pool_and_variants_and_another_seed_does_not():
    a = HalfCheetahEnv(16, seed=7, num_threads=1, randomization=WIDE)
    b = HalfCheetahEnv(16, seed=7, num_threads=1, randomization=WIDE)
    c = HalfCheetahEnv(16, seed=8, num_threads=1, randomization=WIDE)
    for name in a.variant_scales:
        assert (a.variant_scales[name] == b.variant_scales[name]).all()
    assert not (a.variant_scales["mass"] == c.variant_scales["mass"]).all()
    assert torch.equal(a.state.inner.variant, b.state.inner.variant)
    action = torch.full((16, 6), -0.4)
    for _ in range(5):
        ra, rb = a.step(action), b.step(action)
    assert torch.equal(ra.obs, rb.obs) and torch.equal(ra.reward, rb.reward)


def test_a_reset_draws_a_new_variant_for_its_row():
    env = HalfCheetahEnv(64, seed=1, num_threads=1, randomization=WIDE)
    before = env.state.inner.variant.clone()
    env.reset_rows(torch.ones(64, dtype=torch.bool))
    assert (env.state.inner.variant != before).any()


@pytest.mark.parametrize("bad, message", [
    ({"mass": (1.5, 0.5)}, "0 < low <= high"),
    ({"friction": (0.0, 1.0)}, "0 < low <= high"),
    ({"damping": (1.0, float("nan"))}, "pair of scales"),
    ({"num_variants": 0}, "num_variants must be a positive int"),
])
def test_bad_randomization_ranges_are_refused_in_one_line(bad, message):
    with pytest.raises(ValueError, match=message):
        Randomization(**bad)
    with pytest.raises(TypeError, match="Randomization or a dict"):
        HalfCheetahEnv(1, num_threads=1, randomization=[0.5, 1.5])


def test_results_do_not_depend_on_the_thread_count_or_the_batch():
    one = HalfCheetahEnv(8, seed=2, num_threads=1, randomization=WIDE)
    two = HalfCheetahEnv(8, seed=2, num_threads=2, randomization=WIDE)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        action = torch.rand(8, 6, generator=gen) * 2 - 1
        r1, r2 = one.step(action), two.step(action)
        assert torch.equal(r1.obs, r2.obs) and torch.equal(r1.reward, r2.reward)
    assert torch.equal(one.state.inner.physics, two.state.inner.physics)


@pytest.mark.parametrize("task", ["Ant-v5", "Humanoid-v5"])
def test_the_replay_without_resets_between_rows_reads_what_a_reset_scratch_reads(task):
    # The step's replay of the last substep (contact forces, Humanoid's cvel and inertias) skips mj_resetData
    # between rows with one model: bit for bit what a scratch reset before each row gives, contacts included.
    import numpy as np

    from rl_gpu.envs.registry import make

    env = make(task, num_envs=16, device="cpu", seed=3, num_threads=1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(15):
        env.step(torch.rand(16, env.spec.action_shape[0], generator=gen) * 2 - 1)
    engine, inner = env.engine, env.state.inner
    physics = inner.physics.numpy()
    ctrl = (torch.rand(16, env.spec.action_shape[0], generator=gen) * 2 - 1).double().numpy()
    models = engine.row_models(inner.variant)
    assert engine.reuse_scratch
    reused = engine.forward_fields(models, physics, ctrl, substep=True)
    engine.reuse_scratch = False
    reset = engine.forward_fields(models, physics, ctrl, substep=True)
    assert np.array_equal(reused, reset)
    assert np.abs(reset[:, engine.nsensordata:]).max() > 0  # contact forces are read


def test_reward_terms_sum_to_the_episode_return():
    env = HalfCheetahEnv(3, seed=0, num_threads=1)
    env.max_episode_steps = 40
    for _ in range(40):
        result = env.step(torch.rand(3, 6) * 2 - 1)
    returns = result.episode_return.double()
    assert bool(result.truncated.all())
    stats = env.reward_term_stats()
    assert set(stats) == {"forward", "ctrl"} and env.spec.reward_terms == ("forward", "ctrl")
    assert float(stats["forward"] + stats["ctrl"]) == pytest.approx(float(returns.mean()), rel=1e-5)
    assert float(stats["ctrl"]) < 0
    assert torch.isnan(env.reward_term_stats()["forward"])  # nothing finished since the last read


@pytest.mark.parametrize("restart", ["reset_rows", "set_rows"])
def test_a_row_restarted_by_hand_sums_only_its_new_episodes_terms(restart):
    env = HalfCheetahEnv(1, seed=1, num_threads=1)
    env.max_episode_steps = 10
    g = torch.Generator().manual_seed(0)
    for _ in range(5):  # half an episode, then the row starts again
        env.step(torch.rand(1, 6, generator=g) * 2 - 1)
    if restart == "reset_rows":
        env.reset_rows(torch.tensor([True]))
    else:
        env.set_rows([0], env.draw_starts(1))
    ctrl = 0.0
    for _ in range(10):
        result = env.step(torch.rand(1, 6, generator=g) * 2 - 1)
        ctrl += float(env._step_terms[0, 1])
    assert bool(result.truncated[0])
    # the finished episode's ctrl term sums its own 10 steps, not the 5 abandoned ones too
    assert float(env.reward_term_stats()["ctrl"]) == pytest.approx(ctrl, rel=1e-9)


class ShortCheetah(HalfCheetahEnv):
    max_episode_steps = 50


def test_a_training_run_logs_each_reward_term(tmp_path):
    config = TrainConfig(
        env=f"{__name__}:ShortCheetah", output=tmp_path / "run", num_envs=4, num_steps=25, max_updates=4, min_updates=1,
        eval_every=4, eval_episodes=4, final_eval_episodes=4, device="cpu", log_every=1, quiet=True,
        normalize_obs=True, solve_threshold=1e9, algo_params=PPOConfig(num_minibatches=4, update_epochs=1, norm_reward=True),
    )
    (result,) = train(config, display="off")
    lines = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    updates = [line for line in lines if "loss" in line]
    assert [("reward/forward" in line) for line in updates] == [False, True, False, True]
    last = updates[-1]
    assert last["reward/ctrl"] < 0
    assert last["reward/forward"] + last["reward/ctrl"] == pytest.approx(last["episode_return"], rel=1e-4)


def test_a_checkpointed_pool_is_restored_into_a_batch_built_with_another_seed():
    env = HalfCheetahEnv(6, seed=4, num_threads=1, randomization=WIDE)
    action = torch.full((6, 6), 0.3)
    env.step(action)
    saved = env.state_dict()
    expected = [env.step(action) for _ in range(5)]
    other = HalfCheetahEnv(6, seed=99, num_threads=1, randomization=WIDE)
    other.load_state_dict(saved)
    assert all((other.variant_scales[k] == env.variant_scales[k]).all() for k in env.variant_scales)
    for want in expected:
        got = other.step(action)
        assert torch.equal(got.obs, want.obs) and torch.equal(got.reward, want.reward)
    with pytest.raises(ValueError, match="same randomization"):
        HalfCheetahEnv(6, seed=4, num_threads=1).load_state_dict(saved)


@pytest.mark.parametrize("bad, message", [
    ({"forward_reward_weight": float("nan")}, "forward_reward_weight must be a number"),
    ({"ctrl_cost_weight": "0.1"}, "ctrl_cost_weight must be a number"),
    ({"reset_noise_scale": -0.1}, "reset_noise_scale must be >= 0"),
    ({"num_threads": 2**40}, "num_threads must be an int between 1 and"),
    ({"num_threads": 0}, "num_threads must be an int between 1 and"),
])
def test_bad_task_parameters_and_thread_counts_are_refused_in_one_line(bad, message):
    with pytest.raises(ValueError, match=message):
        HalfCheetahEnv(1, **{"num_threads": 1, **bad})
