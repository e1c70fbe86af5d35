"""Eager, compiled and graph-captured hot loops give the same results for the same inputs and generator states;
the rollout engine is :func:`collect`; ``target_kl`` as a device flag is exactly stopping the update."""

import copy
from collections.abc import Mapping
import math
from dataclasses import fields

import pytest
import torch
from torch import nn

from rl_gpu.runtime.compile import guards_checked_once, resolve_compile
from rl_gpu.envs.random_draws import starts_drawn_at_once
from rl_gpu.envs.registry import make
from rl_gpu.data.advantages import compute_gae
from rl_gpu.algos.ppo.algorithm import UPDATE_METRICS
from rl_gpu.algos.ppo import PPO, PPOConfig, update_policy
from rl_gpu.algos.ppo.loss import ppo_loss
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.collect import engine as engine_module
from rl_gpu.collect.engine import RolloutEngine
from rl_gpu.collect.reference import collect
from rl_gpu.collect.stepper import EnvStepper, step_chunk

CASES = [("CartPole-v1", False), ("RussianRoulette-v0", True), ("Pendulum-v1", False)]


def _env_policy(env_id, n=16, device="cpu", normalize_obs=False):
    env = make(env_id, num_envs=n, seed=3, device=device, validate_actions=False)
    torch.manual_seed(0)
    return env, policy_for_env(env.spec, normalize_obs=normalize_obs).to(device)


def _assert_rollouts(a, b, exact=True):
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if not isinstance(x, torch.Tensor):
            continue  # all_weights_one: how the rollout was collected, not what it holds
        if exact or not x.is_floating_point():
            assert torch.equal(x, y), f.name
        else:
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4, msg=f.name)


def test_resolve_compile():
    assert resolve_compile("auto", "cpu") == "off"
    assert resolve_compile("inductor", "cpu") == "inductor"
    with pytest.raises(ValueError, match="CUDA"):
        resolve_compile("cudagraphs", "cpu")
    with pytest.raises(ValueError, match="one of"):
        resolve_compile("fast", "cpu")


@pytest.mark.parametrize("env_id, episodic", CASES)
def test_engine_is_collect_bit_for_bit(env_id, episodic):
    results = []
    for use_engine in (False, True):
        env, policy = _env_policy(env_id)
        g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
        engine = RolloutEngine(policy, env, 12, episodic=episodic)
        results.append([engine.collect(g1, g2) if use_engine else
                        collect(policy, env, 12, g1, episodic=episodic, opponent_rng=g2) for _ in range(2)])
        results[-1].append(env.state)
    for a, b in zip(results[0][:2], results[1][:2]):
        _assert_rollouts(a, b)
    for x, y in zip(results[0][2][1:], results[1][2][1:]):
        assert torch.equal(x, y)


def test_a_rollout_checks_its_guards_once_and_keeps_another_stance():
    """The context a compiled rollout enters after its second step: the units skip their guard checks (the rest of
    the rollout has the second step's inputs); a stance the user set is kept; the guards run again after it."""
    stance = lambda: torch._dynamo.eval_frame._stance  # noqa: E731
    with guards_checked_once():
        assert stance().stance == "default" and stance().skip_guard_eval_unsafe
    assert not stance().skip_guard_eval_unsafe
    with torch.compiler.set_stance("force_eager"), guards_checked_once():
        assert stance().stance == "force_eager" and not stance().skip_guard_eval_unsafe
    assert stance().stance == "default" and not stance().skip_guard_eval_unsafe


@pytest.mark.parametrize("env_id, episodic", [CASES[0], CASES[1]])
def test_a_rollout_into_storage_stacked_or_copied_per_step_is_the_rollout_without(env_id, episodic, monkeypatch):
    """A small rollout into storage keeps its steps and stacks each field at the end; a large one (here: every
    one, ``STACK_BYTES`` 0) copies each step in as it is taken. Both are the rollout without storage."""
    env, policy = _env_policy(env_id)
    engine = RolloutEngine(policy, env, 12, episodic=episodic)
    noise, state = engine.draw(torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)), env.state
    plain, _ = engine.run(noise, state)
    stacked, _ = engine.run(noise, state, out=engine.empty_rollout())
    monkeypatch.setattr(engine_module, "STACK_BYTES", 0)
    copied, _ = engine.run(noise, state, out=engine.empty_rollout())
    _assert_rollouts(plain, stacked)
    _assert_rollouts(plain, copied)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_final_values_taken_after_the_rollout_are_each_steps_own(env_id, monkeypatch):
    """A CPU rollout that keeps its records values the final observations after its last step, only at the steps
    where a row was truncated (here a 5-step time limit: most of the 12 steps have one). The same rollout as the
    step's own V(final_obs) (bit for bit eager) and as :func:`collect`, with storage or without. (Compiled: the
    next test, whose rollouts are this one's.)"""
    def env_policy():
        env = make(env_id, num_envs=16, seed=3, max_episode_steps=5, validate_actions=False)
        torch.manual_seed(0)
        return env, policy_for_env(env.spec)

    env, policy = env_policy()
    reference = collect(policy, env, 12, torch.Generator().manual_seed(1),
                        opponent_rng=torch.Generator().manual_seed(2))
    env, policy = env_policy()
    engine = RolloutEngine(policy, env, 12)
    assert engine.final_values_after
    noise, state = engine.draw(torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)), env.state
    after, _ = engine.run(noise, state)
    stored, _ = engine.run(noise, state, out=engine.empty_rollout())
    truncated = after.truncated
    assert 2 <= truncated.any(1).sum() < 12
    assert (after.final_value[truncated] != 0).all() and (after.final_value[~truncated] == 0).all()
    _assert_rollouts(after, stored)
    _assert_rollouts(reference, after)
    monkeypatch.setattr(engine_module, "FINAL_VALUES_AFTER", False)
    _assert_rollouts(engine.run(noise, state)[0], after)


def test_a_compiled_rollout_of_two_steps_a_call_is_the_rollout_of_one(monkeypatch):
    """A compiled CPU rollout runs ``STEPS_PER_CALL`` steps in each call of its unit (T a multiple of it): the
    same rollout as one step a call (the guards checked at its first two calls, truncations valued after), and T
    that is not a multiple runs one step a call. Both value the final observations after the last step, as the
    previous test checks eagerly: only where a row was truncated, with storage or without, as :func:`collect`."""
    monkeypatch.setattr(engine_module, "STEPS_PER_CALL", 2)  # the default (tests/conftest.py sets 1)
    env = make("CartPole-v1", num_envs=16, seed=3, max_episode_steps=5, validate_actions=False)
    torch.manual_seed(0)
    engine = RolloutEngine(policy_for_env(env.spec), env, 12, compile="inductor")
    assert engine.steps_per_call() == 2
    assert RolloutEngine(engine.policy, env, 11, compile="inductor").steps_per_call() == 1
    assert RolloutEngine(engine.policy, env, 12).steps_per_call() == 1
    noise, state = engine.draw(torch.Generator().manual_seed(1)), env.state
    two, _ = engine.run(noise, state)
    monkeypatch.setattr(engine_module, "STEPS_PER_CALL", 1)
    assert engine.steps_per_call() == 1
    one, _ = engine.run(noise, state)
    assert sorted(engine._units) == [(1, True), (2, True)] and two.truncated.any()
    _assert_rollouts(one, two, exact=True)
    truncated = one.truncated
    assert 2 <= truncated.any(1).sum() < 12
    assert (one.final_value[truncated] != 0).all() and (one.final_value[~truncated] == 0).all()
    _assert_rollouts(one, engine.run(noise, state, out=engine.empty_rollout())[0])
    reference_env = make("CartPole-v1", num_envs=16, seed=3, max_episode_steps=5, validate_actions=False)
    _assert_rollouts(collect(engine.policy, reference_env, 12, torch.Generator().manual_seed(1)), one, exact=False)


@pytest.mark.parametrize("env_id, at_once", [("MinAtar-Breakout-v1", True), ("MinAtar-SpaceInvaders-v1", True),
                                             ("MountainCar-v0", True), ("CartPole-v1", False)])
def test_a_rollouts_starts_drawn_at_once_are_those_drawn_step_by_step(env_id, at_once):
    """Where one call of the start sampler for T N rows gives what T calls for N give one after another, the
    engine makes that one call (the same starts, bit for bit); the check leaves the generator as it found it."""
    env = make(env_id, num_envs=8, seed=5)
    before = env.generator.get_state()
    if env_id == "CartPole-v1":  # also: a sampler that refuses another row count (a multi-task batch's)
        multi = make("multitask:CartPole-v1|CartPole-v1?length=1.0", num_envs=8, seed=5)
        assert not starts_drawn_at_once(multi)
    assert starts_drawn_at_once(env) is at_once
    assert torch.equal(env.generator.get_state(), before)
    engine = RolloutEngine(policy_for_env(env.spec), env, 6)
    drawn = engine.draw(torch.Generator().manual_seed(1)).reset
    assert engine._starts_at_once is at_once
    env.generator.set_state(before)
    stepwise = [env.draw_starts(8) for _ in range(6)]
    for t, start in enumerate(stepwise):
        for x, y in zip(start, drawn):
            assert torch.equal(x, y[t])


def _reference_update(policy, optimizer, batch, config, generator):
    """The former update: host-checked target_kl that breaks out of the epoch loop."""
    adv, ret = compute_gae(batch.reward * config.reward_scale, batch.value, batch.terminated, batch.truncated,
                           batch.final_value, batch.bootstrap_value, config.gamma, config.gae_lambda, batch.weight)
    flat = {"obs": batch.obs.flatten(0, 1), "action": batch.action.flatten(0, 1),
            "action_mask": batch.action_mask.flatten(0, 1), "log_prob": batch.log_prob.flatten(0, 1),
            "value": batch.value.flatten(0, 1), "advantage": adv.flatten(0, 1), "returns": ret.flatten(0, 1),
            "weight": batch.weight.flatten(0, 1)}
    size = flat["weight"].shape[0]
    mb = size // config.num_minibatches
    totals, count, epochs = {}, 0, 0
    for _ in range(config.update_epochs):
        order = torch.randperm(size, generator=generator)
        for start in range(0, size, mb):
            idx = order[start:start + mb]
            loss, stats = ppo_loss(policy, {k: v[idx] for k, v in flat.items()}, config)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            gn = nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
            optimizer.step()
            for k, v in {"loss": loss.detach(), "grad_norm": gn, **stats}.items():
                totals[k] = totals.get(k, 0) + v.detach()
            count += 1
        epochs += 1
        if config.target_kl is not None and bool(stats["approx_kl"] > config.target_kl):
            break
    return {k: float(v / count) for k, v in totals.items()}, epochs


@pytest.mark.parametrize("target_kl, epochs_run", [(None, 4), (1e-9, 1), (0.012, 2)])
def test_target_kl_device_flag_is_exactly_stopping(target_kl, epochs_run):
    env, policy = _env_policy("CartPole-v1", n=64)
    batch = collect(policy, env, 16, torch.Generator().manual_seed(1))
    config = PPOConfig(target_kl=target_kl, update_epochs=4, num_minibatches=4)
    p1, p2 = copy.deepcopy(policy), copy.deepcopy(policy)
    o1 = torch.optim.Adam(p1.parameters(), lr=1e-2, eps=1e-5)
    o2 = torch.optim.Adam(p2.parameters(), lr=1e-2, eps=1e-5)
    expected, epochs = _reference_update(p1, o1, batch, config, torch.Generator().manual_seed(5))
    assert epochs == epochs_run
    got = update_policy(p2, o2, batch, config, torch.Generator().manual_seed(5)).as_floats()
    for a, b in zip(p1.parameters(), p2.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(p1.parameters(), p2.parameters()):
        for name in o1.state[a]:
            assert torch.equal(o1.state[a][name], o2.state[b][name]), name
    for k, v in expected.items():
        assert math.isclose(v, got[k], rel_tol=1e-5, abs_tol=1e-7), k


def update_floats(metrics) -> dict[str, float]:
    """The update's metrics as floats, from ``PPO.update`` (UpdateMetrics) or ``PPO.iterate`` (an Iteration)."""
    if isinstance(metrics, Mapping):
        return {k: float(metrics[k]) for k in UPDATE_METRICS}
    return metrics.as_floats()


@pytest.mark.parametrize("env_id, episodic", CASES[:2])
def test_iterate_is_collect_then_update(env_id, episodic):
    runs = []
    for use_iterate in (True, False):
        env, policy = _env_policy(env_id, normalize_obs=True)
        algo = PPO(policy, PPOConfig(num_minibatches=2, update_epochs=2, target_kl=0.01), 1e-3, seed=4)
        g = torch.Generator().manual_seed(2)
        out = []
        for _ in range(2):
            if use_iterate:
                metrics = algo.iterate(env, 10, episodic=episodic, opponent_rng=g)
                rollout = algo.last_rollout
                # PPO reuses its rollout storage: keep a copy of each.
                out.append((copy.deepcopy(rollout), metrics))
            else:
                rollout = collect(policy, env, 10, algo.policy_rng, episodic=episodic, opponent_rng=g)
                out.append((rollout, algo.update(rollout)))
        runs.append((out, [p.detach().clone() for p in policy.parameters()], policy.obs_rms.mean.clone()))
    (a, pa, ma), (b, pb, mb) = runs
    for (ra, ua), (rb, ub) in zip(a, b):
        _assert_rollouts(ra, rb)
        assert update_floats(ua) == update_floats(ub)
    assert all(torch.equal(x, y) for x, y in zip(pa, pb)) and torch.equal(ma, mb)


def test_learning_rate_tensor_and_flags_survive_load_state_dict():
    env, policy = _env_policy("CartPole-v1")
    algo = PPO(policy, PPOConfig(num_minibatches=2), 1e-3, seed=1)
    algo.iterate(env, 8)
    algo.set_learning_rate(4e-4)
    saved = copy.deepcopy(algo.state_dict())
    other = PPO(copy.deepcopy(policy), PPOConfig(num_minibatches=2), 1e-3, seed=2)
    other.iterate(env, 8)
    state_tensors = [t for s in other.optimizer.state.values() for t in s.values()]
    other.load_state_dict(saved)
    group = other.optimizer.param_groups[0]
    assert group["lr"] is other.lr and float(other.lr) == pytest.approx(4e-4) and group["fused"]
    assert all(any(t is u for u in state_tensors) for s in other.optimizer.state.values() for t in s.values())
    for p, q in zip(algo.policy.parameters(), other.policy.parameters()):
        for name, value in algo.optimizer.state[p].items():
            assert torch.equal(value, other.optimizer.state[q][name])
    # A state dict written by a plain optimiser (float learning rate, no fused flag) loads into the tensor one.
    plain = torch.optim.Adam(policy.parameters(), lr=2e-4, eps=1e-5)
    plain.zero_grad()
    sum(p.sum() for p in policy.parameters()).backward()
    plain.step()
    other.load_state_dict({**saved, "optimizer": plain.state_dict()})
    assert other.optimizer.param_groups[0]["lr"] is other.lr and float(other.lr) == pytest.approx(2e-4)
    other.iterate(env, 8)


def test_step_chunk_counts_reused_starts_and_uses_each_slot_once():
    env = make("CartPole-v1", num_envs=6, seed=0, validate_actions=False)
    stepper = EnvStepper(env, "off", chunk=32, slots=1)
    actions = torch.ones(32, 6, dtype=torch.long)
    state = env.state
    pool = stepper.draw_pool()
    final, reused = step_chunk(env, state, actions, pool)
    # Always pushing right ends an episode in about 9 steps: some rows end twice, and the second end reuses.
    replay, ends = state, torch.zeros(6, dtype=torch.long)
    for i in range(32):
        replay, result = env.step_state(replay, actions[i], type(pool)(*(x[0] for x in pool)))
        ends += (result.terminated | result.truncated).long()
    assert int(reused) == int((ends - 1).clamp(min=0).sum()) > 0
    assert all(torch.equal(x, y) for x, y in zip(final.inner, replay.inner))


@pytest.mark.parametrize("env_id, episodic", [CASES[0]])
def test_inductor_matches_eager_on_cpu(env_id, episodic):
    # Minibatches of 32 slots as two micro-batches: the CPU default for large minibatches, compiled.
    _compiled_matches_eager(env_id, episodic, "cpu", ("off", "inductor"), micro_batch_size=16)


@pytest.mark.slow
@pytest.mark.parametrize("env_id, episodic", CASES[1:])
def test_inductor_matches_eager_on_cpu_other_envs(env_id, episodic):
    _compiled_matches_eager(env_id, episodic, "cpu", ("off", "inductor"))


@pytest.mark.slow
def test_compiled_env_stepper_matches_eager():
    states = []
    for mode in ("off", "inductor"):
        env = make("CartPole-v1", num_envs=64, seed=0, validate_actions=False)
        stepper = EnvStepper(env, mode)
        actions = torch.randint(0, 2, (16, 64), generator=torch.Generator().manual_seed(0))
        for _ in range(3):
            stepper.step(actions)
        states.append((env.state, int(stepper.reused)))
    (a, ra), (b, rb) = states
    assert ra == rb == 0
    for x, y in zip(a.inner, b.inner):
        torch.testing.assert_close(x, y, atol=1e-12, rtol=1e-12)
    assert torch.equal(a.episode_step, b.episode_step)


def _compiled_matches_eager(env_id, episodic, device, modes, micro_batch_size=None):
    runs = {}
    for mode in modes:
        env, policy = _env_policy(env_id, n=8, device=device, normalize_obs=True)
        config = PPOConfig(num_minibatches=2, update_epochs=2, target_kl=0.02, micro_batch_size=micro_batch_size)
        algo = PPO(policy, config, 1e-3, seed=4, compile=mode)
        g = torch.Generator(device=device).manual_seed(2)
        out = []
        for i in range(3):
            if i == 1:
                rollout = algo.collect(env, 8, episodic=episodic, opponent_rng=g)
                metrics = algo.update(rollout)
            else:
                metrics = algo.iterate(env, 8, episodic=episodic, opponent_rng=g)
                rollout = algo.last_rollout
            out.append((copy.deepcopy(rollout), update_floats(metrics)))
        runs[mode] = (out, [p.detach().clone() for p in policy.parameters()])
    base_out, base_params = runs[modes[0]]
    for mode in modes[1:]:
        out, params = runs[mode]
        for (ra, ma), (rb, mb) in zip(base_out, out):
            _assert_rollouts(ra, rb, exact=False)
            for k in ma:
                assert math.isclose(ma[k], mb[k], rel_tol=1e-3, abs_tol=1e-5), (mode, k)
        for x, y in zip(base_params, params):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_id, episodic", CASES)
def test_cuda_modes_match_eager(env_id, episodic):
    _compiled_matches_eager(env_id, episodic, "cuda", ("off", "inductor", "cudagraphs"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_id, episodic", CASES)
def test_cuda_engine_is_collect(env_id, episodic):
    results = []
    for use_engine in (False, True):
        env, policy = _env_policy(env_id, device="cuda")
        g1 = torch.Generator(device="cuda").manual_seed(1)
        g2 = torch.Generator(device="cuda").manual_seed(2)
        engine = RolloutEngine(policy, env, 12, episodic=episodic)
        results.append([engine.collect(g1, g2) if use_engine else
                        collect(policy, env, 12, g1, episodic=episodic, opponent_rng=g2) for _ in range(2)])
    for a, b in zip(*results):
        _assert_rollouts(a, b)
