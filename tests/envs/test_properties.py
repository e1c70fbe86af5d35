"""Property-based tests (hypothesis) of the TensorEnv contract, over every registered environment id.

Batch sizes, seeds, time limits and action sequences are drawn by hypothesis. A short time limit
(``max_episode_steps`` 3..30) makes episodes end often, so the reset paths are exercised in every example.
Actions are legal (masked) discrete actions, or continuous actions in and slightly outside
``[action_low, action_high]`` (the environments clip them).

Checked on every step:

- auto-reset: only the rows that finished are reset (the others match an ``autoreset=False`` twin stepped from
  the same state), and they hold exactly the fresh start the environment's generator drew for this step,
- ``final_obs`` is ``_observe`` of the un-reset next state (the terminal observation of a finished row) and
  equals ``obs`` in the rows that did not finish; reward and flags are those of the raw transition,
- ``truncated`` is exactly the time limit, never together with ``terminated``,
- masks are never all False; obs, final_obs, reward and episode_return are finite; every field keeps its
  shape, dtype and device from step to step,
- episode_length / episode_return of a finished row are its steps and the sum of its rewards (per seat)
  since its last reset,
- without auto-reset, finished rows are frozen and ``reset_rows`` resets exactly the rows asked,
- same seed and same actions give bit-identical trajectories; different seeds give different starts,
- action validation: a wrong type, shape, dtype or device, an out-of-range, NaN/inf or illegal action is
  refused with a message naming the problem, and a refused action changes nothing (type, shape, dtype and
  device are checked with ``validate_actions=False`` too). The device check runs on CPU-only machines with a
  ``meta`` tensor (and with a CUDA tensor when a GPU is present).

The last section holds tests of bugs these properties found; they fail until the bugs are fixed.

``@settings(derandomize=True)``: every run tries the same examples, so CI is deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st
from torch import Tensor

from rl_gpu.envs import StepResult, TensorEnv, env_class, make, registered_ids
from rl_gpu.envs.base import EnvState

# MuJoCo tasks are slow to step at these batch sizes and have their own contract tests (tests/envs/mujoco):
# HalfCheetah-v5 stands for them here. The MinAtar games share one base class and each has its contract checks
# and transition-by-transition parity in tests/envs/test_minatar.py: Breakout stands for them.
# The NoVel ids are CartPole-v1 and Pendulum-v1 step for step with two observation entries left out
# (tests/envs/test_novel.py): the full tasks stand for them.
STANDS_FOR = {"rl_gpu.envs.mujoco": "HalfCheetah-v5", "rl_gpu.envs.minatar": "MinAtar-Breakout-v1"}
HIDDEN_VELOCITIES = ("CartPoleNoVel-v1", "PendulumNoVel-v1")
ENV_IDS = tuple(i for i in registered_ids() if not i.startswith("gym:") and i not in HIDDEN_VELOCITIES
                and all(not env_class(i).__module__.startswith(family) or i == kept
                        for family, kept in STANDS_FOR.items()))
CONTINUOUS_IDS = tuple(i for i in ENV_IDS if len(env_class(i).action_shape) > 0)
DISCRETE_IDS = tuple(i for i in ENV_IDS if i not in CONTINUOUS_IDS)
MASKED_IDS = tuple(i for i in DISCRETE_IDS if env_class(i)._legal_actions is not TensorEnv._legal_actions)
"""Environments that override ``_legal_actions`` (the only ones that can have illegal actions)."""

ACCEPTED_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
OTHER_DTYPES = (torch.bool, torch.complex64, torch.uint16, torch.uint32, torch.uint64)


def _settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


NUM_ENVS = st.integers(1, 6)
SEEDS = st.integers(0, 2**32 - 1)
"""torch's CPU generator only uses the low 32 bits of a seed (see test_seeds_alias_modulo_2_pow_32)."""
TIME_LIMITS = st.integers(3, 30)
EXTRA_STEPS = st.integers(0, 20)
"""Stepping tests play at least ``limit + extra`` steps, so that every row finishes at least once."""


# ---------------------------------------------------------------------------------------------- helpers


def _draw_actions(
    data: st.DataObject, env: TensorEnv, mask: Tensor, *, any_in_range: Tensor | None = None
) -> Tensor:
    """One action per row drawn by hypothesis: a legal discrete action (any in-range one in the rows of
    ``any_in_range``), or a continuous action within the bounds widened by 10% of their span on each side."""
    n = env.num_envs
    if env.is_continuous:
        columns = []
        for low, high in zip(env.action_low, env.action_high):
            if math.isfinite(low) and math.isfinite(high):
                pad = 0.1 * (high - low)
                low, high = low - pad, high + pad
            else:
                low, high = -10.0, 10.0
            low, high = float(np.float32(low)), float(np.float32(high))  # width=32 needs float32 bounds
            columns.append(st.floats(low, high, allow_nan=False, allow_infinity=False, width=32))
        rows = data.draw(st.lists(st.tuples(*columns), min_size=n, max_size=n), label="actions")
        return torch.tensor(rows, dtype=torch.float32).reshape(n, *env.action_shape).to(env.device)
    picks = torch.tensor(
        data.draw(st.lists(st.integers(0, env.num_actions - 1), min_size=n, max_size=n), label="actions")
    )
    legal = mask.detach().cpu().clone()
    if any_in_range is not None:
        legal[any_in_range.cpu()] = True
    # The (pick mod #legal)-th legal action of each row.
    choice = picks % legal.sum(1)
    nth = (legal.long().cumsum(1) == (choice + 1).unsqueeze(1)) & legal
    return nth.long().argmax(1).to(env.device)


def _env_action(env: TensorEnv, action: Tensor) -> Tensor:
    """The action as :meth:`TensorEnv.step` hands it to ``_transition``."""
    return action.float() if env.is_continuous else action.long()


def _meta(result: StepResult) -> dict[str, tuple]:
    return {name: (tuple(t.shape), t.dtype, t.device) for name, t in zip(StepResult._fields, result)
            if t is not None}


def _expected_meta(env: TensorEnv) -> dict[str, tuple]:
    n, dev = env.num_envs, env.device
    return {
        "obs": ((n, *env.obs_shape), env.obs_dtype, dev),
        "reward": (env.reward_shape, torch.float32, dev),
        "terminated": ((n,), torch.bool, dev),
        "truncated": ((n,), torch.bool, dev),
        "final_obs": ((n, *env.obs_shape), env.obs_dtype, dev),
        "action_mask": ((n, env.num_actions), torch.bool, dev),
        "current_player": ((n,), torch.int64, dev),
        "episode_return": (env.reward_shape, torch.float32, dev),
        "episode_length": ((n,), torch.int64, dev),
    }


def _check_result(env: TensorEnv, result: StepResult, meta: dict[str, tuple], where: str) -> None:
    """Shapes, dtypes, devices (as documented and as in the first result) and per-step invariants."""
    got = _meta(result)
    for name, spec in _expected_meta(env).items():
        assert got[name] == spec, f"{where}: {name} is {got[name]}, the contract says {spec}"
        assert got[name] == meta[name], f"{where}: {name} changed from {meta[name]} to {got[name]}"
    for name in ("obs", "final_obs", "reward", "episode_return"):
        t = getattr(result, name)
        assert bool(torch.isfinite(t).all()), f"{where}: {name} is not finite: {t.tolist()}"
    both = result.terminated & result.truncated
    assert not bool(both.any()), (
        f"{where}: terminated and truncated both True in rows {both.nonzero().flatten().tolist()}"
    )
    if not env.is_continuous:
        empty = ~result.action_mask.any(1)
        assert not bool(empty.any()), (
            f"{where}: all-False action mask in rows {empty.nonzero().flatten().tolist()}"
        )
    player = result.current_player
    assert bool(((player >= 0) & (player < env.num_players)).all()), (
        f"{where}: current_player {player.tolist()}"
    )
    keep = ~result.done
    assert torch.equal(result.final_obs[keep], result.obs[keep]), (
        f"{where}: final_obs != obs in an unfinished row"
    )


def _rows_differ(a: tuple, b: tuple, rows: Tensor) -> list[str]:
    """Names of the fields of two NamedTuples of ``[N, ...]`` tensors that differ in ``rows``."""
    return [name for name, x, y in zip(a._fields, a, b)
            if (x is None) != (y is None) or (x is not None and not torch.equal(x[rows], y[rows]))]


def _state_rows_differ(a: EnvState, b: EnvState, rows: Tensor) -> list[str]:
    """Fields of two full states (inner state and counters) that differ in ``rows``."""
    counters = ("episode_step", "episode_return", "done")
    differ = _rows_differ(a.inner, b.inner, rows)
    return differ + [name for name, x, y in zip(counters, a[1:], b[1:]) if not torch.equal(x[rows], y[rows])]


def _state_equal(a: EnvState, b: EnvState) -> bool:
    return all(torch.equal(x, y) for x, y in zip((*a.inner, *a[1:]), (*b.inner, *b[1:])))


def _results_equal(a: StepResult, b: StepResult) -> list[str]:
    return [name for name, x, y in zip(StepResult._fields, a, b)
            if (x is None) != (y is None) or (x is not None and not torch.equal(x, y))]


def _warm_up(data: st.DataObject, env: TensorEnv, max_steps: int = 6) -> StepResult:
    """Reset and play a few random legal steps, so checks see mid-episode states."""
    result = env.reset()
    for _ in range(data.draw(st.integers(0, max_steps), label="warm-up steps")):
        result = env.step(_draw_actions(data, env, result.action_mask))
    return result


# ----------------------------------------------------------------------------------- stepping properties


@pytest.mark.parametrize("env_id", ENV_IDS)
@_settings(16)
@given(n=NUM_ENVS, seed=SEEDS, limit=TIME_LIMITS, extra=EXTRA_STEPS, data=st.data())
def test_autoreset_resets_exactly_the_finished_rows(env_id, n, seed, limit, extra, data):
    env = make(env_id, n, seed=seed, max_episode_steps=limit)
    twin = make(env_id, n, seed=seed, max_episode_steps=limit, autoreset=False)
    result = env.reset()
    meta = _meta(result)
    _check_result(env, result, meta, "reset")
    assert not bool(result.reward.any()), "reset pays a reward"
    length = torch.zeros(n, dtype=torch.long)
    paid = torch.zeros(env.reward_shape)
    episodes = 0
    for t in range(1, limit + limit // 2 + extra + 1):
        where = f"step {t}"
        if t <= limit // 2 and data.draw(st.booleans(), label="reset_rows now"):
            # Restarting some rows early staggers the time limits, so rows do not all truncate together.
            rows = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="rows"))
            result = env.reset_rows(rows)
            _check_result(env, result, meta, f"{where} reset_rows")
            length[rows] = 0
            paid[rows] = 0.0
        before = env.get_state()
        twin.set_state(env.get_state())
        reset_draw = env.generator.get_state()
        action = _draw_actions(data, env, result.action_mask)
        result = env.step(action)
        expected = twin.step(action)
        _check_result(env, result, meta, where)
        done = result.done
        note(f"{where}: action {action.tolist()} done {done.tolist()}")

        # The transition itself does not depend on auto-reset: reward, flags and final_obs are those of the
        # raw transition of the state before the step, and final_obs is the un-reset next state's observation.
        next_inner, reward, terminated = env._transition(before.inner, _env_action(env, action))
        assert torch.equal(result.reward, reward), f"{where}: reward"
        assert torch.equal(result.terminated, terminated), f"{where}: terminated"
        assert torch.equal(result.final_obs, env._observe(next_inner)), (
            f"{where}: final_obs is not the pre-reset obs"
        )
        differ = _results_equal(result._replace(obs=expected.obs), expected)
        differ = [f for f in differ if f not in ("action_mask", "current_player")]
        assert not differ, f"{where}: {differ} differ from the autoreset=False twin"
        assert torch.equal(result.final_obs, expected.obs), f"{where}: final_obs differs from the twin's obs"
        truncated = (before.episode_step + 1 >= limit) & ~terminated
        assert torch.equal(result.truncated, truncated), f"{where}: truncated is not the time limit {limit}"

        # Rows that did not finish: not reset (same state as the twin), counters advanced.
        state = env.state
        keep = ~done
        assert not _rows_differ(state.inner, twin.state.inner, keep), f"{where}: an unfinished row was reset"
        assert torch.equal(state.episode_step[keep], before.episode_step[keep] + 1), f"{where}: episode_step"
        assert torch.equal(state.episode_return[keep], twin.state.episode_return[keep]), (
            f"{where}: episode_return"
        )
        assert not bool(state.done.any()), f"{where}: state.done set with auto-reset on"

        # Rows that finished: exactly the fresh start the generator drew for this step, zeroed counters.
        generator = torch.Generator(device=env.device)
        generator.set_state(reset_draw)
        fresh = env._sample_initial_state(n, generator)
        assert not _rows_differ(state.inner, fresh, done), f"{where}: a finished row is not a fresh start"
        assert not bool(state.episode_step[done].any()), f"{where}: episode_step not zeroed on reset"
        assert not bool(state.episode_return[done].any()), f"{where}: episode_return not zeroed on reset"

        # obs, mask and player describe the state after the reset.
        now = env.observe()
        for name in ("obs", "action_mask", "current_player"):
            assert torch.equal(getattr(result, name), getattr(now, name)), (
                f"{where}: {name} is not the post-reset one"
            )

        # Episode statistics: steps and summed rewards (per seat) since the row's last reset.
        length += 1
        paid += result.reward
        assert torch.equal(result.episode_length[done], length[done]), f"{where}: episode_length"
        torch.testing.assert_close(result.episode_return[done], paid[done], msg=f"{where}: episode_return")
        assert bool((result.episode_length[done] <= limit).all()), (
            f"{where}: an episode outlived the time limit"
        )
        length[done] = 0
        paid[done] = 0.0
        episodes += int(done.sum())
    event(f"episodes finished: {'0' if episodes == 0 else '1-4' if episodes < 5 else '5+'}")


@pytest.mark.parametrize("env_id", ENV_IDS)
@_settings(10)
@given(n=NUM_ENVS, seed=SEEDS, limit=TIME_LIMITS, extra=EXTRA_STEPS, data=st.data())
def test_without_autoreset_finished_rows_freeze_until_reset_rows(env_id, n, seed, limit, extra, data):
    env = make(env_id, n, seed=seed, max_episode_steps=limit, autoreset=False)
    result = env.reset()
    meta = _meta(result)
    zero = torch.zeros(env.reward_shape)
    length = torch.zeros(n, dtype=torch.long)
    paid = torch.zeros(env.reward_shape)
    for t in range(1, limit + extra + 1):
        where = f"step {t}"
        before = env.get_state()
        frozen = before.done
        # Frozen rows get any in-range action, legal or not: it must be ignored.
        action = _draw_actions(data, env, result.action_mask, any_in_range=frozen)
        previous = result
        result = env.step(action)
        _check_result(env, result, meta, where)
        moved = _state_rows_differ(env.state, before, frozen)
        assert not moved, f"{where}: a frozen row moved ({moved})"
        assert torch.equal(result.reward[frozen], zero[frozen]), f"{where}: a frozen row was paid"
        assert not bool(result.done[frozen].any()), f"{where}: a frozen row finished again"
        assert torch.equal(result.obs[frozen], previous.obs[frozen]), f"{where}: a frozen row's obs changed"
        assert torch.equal(env.state.done, frozen | result.done), f"{where}: state.done"
        # Without reset, obs is the pre-reset (terminal) observation itself.
        assert torch.equal(result.final_obs, result.obs), f"{where}: final_obs != obs without auto-reset"
        length += (~frozen).long()
        paid += result.reward
        done = result.done
        assert torch.equal(result.episode_length[done], length[done]), f"{where}: episode_length"
        torch.testing.assert_close(result.episode_return[done], paid[done], msg=f"{where}: episode_return")

        if data.draw(st.booleans(), label="reset_rows now"):
            rows = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="rows"))
            before = env.get_state()
            reset_draw = env.generator.get_state()
            result = env.reset_rows(rows)
            generator = torch.Generator(device=env.device)
            generator.set_state(reset_draw)
            fresh = env._sample_initial_state(n, generator)
            assert not _rows_differ(env.state.inner, fresh, rows), f"{where}: reset_rows did not reset a row"
            touched = _state_rows_differ(env.state, before, ~rows)
            assert not touched, f"{where}: reset_rows touched another row ({touched})"
            assert not bool(env.state.episode_step[rows].any() | env.state.done[rows].any()), (
                f"{where}: counters"
            )
            assert not bool(env.state.episode_return[rows].any()), f"{where}: episode_return not zeroed"
            assert not _results_equal(result, env.observe()), f"{where}: reset_rows result"
            _check_result(env, result, meta, f"{where} reset_rows")
            length[rows] = 0
            paid[rows] = 0.0


@pytest.mark.parametrize("env_id", ENV_IDS)
@_settings(8)
@given(n=NUM_ENVS, seed=SEEDS, other=SEEDS, limit=TIME_LIMITS, extra=EXTRA_STEPS, data=st.data())
def test_same_seed_same_trajectory(env_id, n, seed, other, limit, extra, data):
    a = make(env_id, n, seed=seed, max_episode_steps=limit)
    b = make(env_id, n, seed=seed, max_episode_steps=limit)
    c = make(env_id, n, seed=other, max_episode_steps=limit)
    result_c = c.reset(seed=seed)  # re-seeding then resetting == constructing with the seed
    result_a, result_b = a.observe(), b.observe()
    assert not _results_equal(result_a, result_b) and not _results_equal(result_a, result_c)
    for t in range(1, limit + extra + 1):
        action = _draw_actions(data, a, result_a.action_mask)
        result_a, result_b, result_c = a.step(action), b.step(action.clone()), c.step(action.clone())
        assert not _results_equal(result_a, result_b), f"step {t}: same seed, same actions, different results"
        assert not _results_equal(result_a, result_c), (
            f"step {t}: reset(seed=...) differs from make(seed=...)"
        )
        assert _state_equal(a.state, b.state) and _state_equal(a.state, c.state), f"step {t}: states differ"
        assert torch.equal(a.generator.get_state(), b.generator.get_state())


def _has_random_reset(env_id: str) -> bool:
    """Whether drawing a fresh start consumes the environment's generator."""
    env = make(env_id, 1, seed=0)
    before = env.generator.get_state()
    env._sample_initial_state(1, env.generator)
    return not torch.equal(before, env.generator.get_state())


@pytest.mark.parametrize("env_id", ENV_IDS)
@_settings(10)
@given(seeds=st.lists(SEEDS, min_size=2, max_size=2, unique=True))
def test_different_seeds_different_initial_states(env_id, seeds):
    if not _has_random_reset(env_id):
        pytest.skip(f"{env_id} has a deterministic reset")
    # 64 rows: even a reset with 6 outcomes (roulette's live chamber) coincides with probability 6**-64.
    a = make(env_id, 64, seed=seeds[0])
    b = make(env_id, 64, seed=seeds[1])
    assert any(not torch.equal(x, y) for x, y in zip(a.state.inner, b.state.inner)), (
        f"seeds {seeds}: same starts"
    )
    a.reset(seed=seeds[1])
    assert _state_equal(a.state, b.state), "reset(seed=s) does not reproduce make(seed=s)"


@pytest.mark.xfail(
    strict=True,
    reason="torch's CPU generator (mt19937) keeps only the low 32 bits of manual_seed, so TensorEnv.seed "
    "aliases seeds that differ by a multiple of 2**32 (seed(None) draws 62 bits but gets 32)",
)
@pytest.mark.parametrize("env_id", ["CartPole-v1"])
def test_seeds_alias_modulo_2_pow_32(env_id):
    a = make(env_id, 64, seed=1)
    b = make(env_id, 64, seed=1 + 2**32)
    assert any(not torch.equal(x, y) for x, y in zip(a.state.inner, b.state.inner))


# ----------------------------------------------------------------------------------------- action validation


def _expect_refusal(env: TensorEnv, action, errors, words: list[str]) -> str:
    """Step with ``action``: it must raise one of ``errors`` whose message contains every one of ``words``,
    and change neither the state nor the generator. Returns the message."""
    before = env.get_state()
    draws = env.generator.get_state()
    with pytest.raises(errors) as info:
        env.step(action)
    message = str(info.value)
    for word in words:
        assert word in message, f"{type(info.value).__name__}({message!r}) does not mention {word!r}"
    assert _state_equal(env.state, before), f"refusing ({message}) changed the state"
    assert torch.equal(env.generator.get_state(), draws), f"refusing ({message}) advanced the generator"
    return message


def _wrong_shape(data: st.DataObject, expected: tuple[int, ...]) -> tuple[int, ...]:
    shapes = st.lists(st.integers(0, expected[0] + 2), min_size=0, max_size=3).map(tuple)
    return data.draw(shapes.filter(lambda s: s != expected), label="wrong shape")


@pytest.mark.parametrize("env_id", ENV_IDS)
@_settings(30)
@given(n=NUM_ENVS, seed=SEEDS, validate=st.booleans(), data=st.data())
def test_malformed_actions_are_refused_and_change_nothing(env_id, n, seed, validate, data):
    """Wrong type, shape, dtype or device: refused whether or not ``validate_actions`` is on."""
    env = make(env_id, n, seed=seed, validate_actions=validate)
    twin = make(env_id, n, seed=seed, validate_actions=validate)
    result = _warm_up(data, env)
    twin.set_state(env.get_state())
    twin.generator.set_state(env.generator.get_state())
    good = _draw_actions(data, env, result.action_mask)
    expected_shape = (n, *env.action_shape)
    right_dtype = torch.float32 if env.is_continuous else torch.int64
    kind = data.draw(st.sampled_from(["type", "shape", "dtype", "device"]), label="kind")
    if kind == "type":
        bad = data.draw(
            st.sampled_from([good.tolist(), good.numpy(), 0, None, tuple(good.tolist())]), label="bad"
        )
        _expect_refusal(env, bad, TypeError, ["torch.Tensor"])
    elif kind == "shape":
        shape = _wrong_shape(data, expected_shape)
        _expect_refusal(
            env, torch.zeros(shape, dtype=right_dtype), ValueError, ["shape", str(expected_shape), str(shape)]
        )
    elif kind == "dtype":
        refused = (
            (*ACCEPTED_INT_DTYPES, *OTHER_DTYPES) if env.is_continuous else (*FLOAT_DTYPES, *OTHER_DTYPES)
        )
        dtype = data.draw(st.sampled_from(refused), label="dtype")
        _expect_refusal(env, torch.zeros(expected_shape, dtype=dtype), ValueError, [str(dtype)])
    else:
        devices = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])
        device = torch.device(data.draw(st.sampled_from(devices), label="device"))
        bad = good.to(device) if device.type != "meta" else torch.empty_like(good, device="meta")
        _expect_refusal(env, bad, ValueError, [str(bad.device), str(env.device)])
        if device.type == "cuda":
            # And the other way round: environments on the GPU refuse a CPU action.
            gpu_env = make(env_id, n, device="cuda", seed=seed, validate_actions=validate)
            _expect_refusal(gpu_env, good, ValueError, [str(good.device), str(gpu_env.device)])
    # The refused action left no trace: the next step matches a twin that never saw it.
    assert not _results_equal(env.step(good), twin.step(good))
    assert _state_equal(env.state, twin.state)


@pytest.mark.parametrize("env_id", DISCRETE_IDS)
@_settings(15)
@given(n=NUM_ENVS, seed=SEEDS, data=st.data())
def test_out_of_range_discrete_actions_are_refused(env_id, n, seed, data):
    env = make(env_id, n, seed=seed)
    result = _warm_up(data, env)
    action = _draw_actions(data, env, result.action_mask)
    out_of_range = st.one_of(st.integers(-(2**31), -1), st.integers(env.num_actions, 2**31 - 1))
    rows = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True), label="bad rows")
    for row in rows:
        action[row] = data.draw(out_of_range, label=f"value in row {row}")
    first = min(rows)
    _expect_refusal(env, action, ValueError, ["out of range", f"env {first}", str(int(action[first]))])
    # int32 too: the range check is not a side effect of int64 indexing.
    _expect_refusal(env, action.int(), ValueError, ["out of range", f"env {first}"])


@pytest.mark.parametrize("env_id", MASKED_IDS)
@_settings(30)
@given(n=NUM_ENVS, seed=SEEDS, data=st.data())
def test_illegal_actions_are_refused(env_id, n, seed, data):
    env = make(env_id, n, seed=seed)
    result = _warm_up(data, env, max_steps=8)
    mask = result.action_mask.cpu()
    has_illegal = (~mask).any(1)
    event(f"rows with an illegal action: {bool(has_illegal.any())}")
    if not bool(has_illegal.any()):
        return  # every action is legal in every row here; nothing to refuse
    action = _draw_actions(data, env, result.action_mask)
    candidates = has_illegal.nonzero().flatten().tolist()
    rows = data.draw(st.lists(st.sampled_from(candidates), min_size=1, unique=True), label="illegal rows")
    for row in rows:
        illegal = (~mask[row]).nonzero().flatten().tolist()
        action[row] = data.draw(st.sampled_from(illegal), label=f"illegal action in row {row}")
    first = min(rows)
    legal_there = mask[first].nonzero().flatten().tolist()
    _expect_refusal(
        env, action, ValueError, ["illegal", f"env {first}", str(int(action[first])), str(legal_there)]
    )
    # The same actions with the illegal ones replaced by legal ones are accepted.
    for row in rows:
        action[row] = legal_there[0] if row == first else int(mask[row].long().argmax())
    env.step(action)


@pytest.mark.parametrize("env_id", CONTINUOUS_IDS)
@_settings(15)
@given(n=NUM_ENVS, seed=SEEDS, data=st.data())
def test_non_finite_continuous_actions_are_refused(env_id, n, seed, data):
    env = make(env_id, n, seed=seed)
    result = _warm_up(data, env)
    action = _draw_actions(data, env, result.action_mask)
    cells = st.tuples(st.integers(0, n - 1), st.integers(0, env.action_shape[0] - 1))
    for row, col in data.draw(st.lists(cells, min_size=1, max_size=3), label="bad cells"):
        action[row, col] = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]), label="bad value")
    _expect_refusal(env, action, ValueError, ["NaN or inf"])


@pytest.mark.parametrize("env_id", ENV_IDS)
@_settings(12)
@given(n=NUM_ENVS, seed=SEEDS, data=st.data())
def test_accepted_action_dtypes_step_like_the_canonical_one(env_id, n, seed, data):
    """Other integer dtypes (discrete) and float64 (continuous) act exactly like int64 / float32."""
    env = make(env_id, n, seed=seed)
    twin = make(env_id, n, seed=seed)
    result = _warm_up(data, env)
    twin.set_state(env.get_state())
    twin.generator.set_state(env.generator.get_state())
    action = _draw_actions(data, env, result.action_mask)
    dtypes = (torch.float64,) if env.is_continuous else ACCEPTED_INT_DTYPES
    dtype = data.draw(st.sampled_from(dtypes), label="dtype")
    assert not _results_equal(env.step(action.to(dtype)), twin.step(action))


# ------------------------------------------------------------------ bugs found by these properties (failing)


@pytest.mark.parametrize("env_id", CONTINUOUS_IDS)
@_settings(6)
@given(
    value=st.floats(float(np.finfo(np.float32).max) * 2, 1e308)
    | st.floats(-1e308, float(np.finfo(np.float32).min) * 2)
)
def test_validation_refuses_a_float64_action_that_overflows_float32(env_id, value):
    """BUG (rl_gpu/envs/base.py, TensorEnv.check_action/step): NaN/inf are refused when validating, but the
    check runs on the action as given, before ``step`` casts it to float32. A finite float64 action beyond
    float32's range passes validation and reaches ``_transition`` as +-inf (MountainCarContinuous-v0 then pays
    a -inf reward)."""
    env = make(env_id, 1, seed=0)
    action = torch.full((1, *env.action_shape), value, dtype=torch.float64)
    _expect_refusal(env, action, ValueError, ["NaN or inf"])


@pytest.mark.parametrize("env_id", CONTINUOUS_IDS)
@_settings(6)
@given(value=st.floats(-float(np.finfo(np.float32).max), float(np.finfo(np.float32).max), width=32))
@example(value=1e20)
def test_any_accepted_float32_action_gives_a_finite_reward(env_id, value):
    """BUG (rl_gpu/envs/mountain_car.py, MountainCarContinuousEnv._transition, the ``reward = ...`` line): the
    unclipped action's cost ``0.1 * a**2`` is computed in float64 and cast to float32, which overflows to -inf
    for |a| > ~5.8e19. Validation accepts such finite actions (out-of-bounds values are documented as allowed)
    and the contract requires a finite reward."""
    env = make(env_id, 1, seed=0)
    result = env.step(torch.full((1, *env.action_shape), value, dtype=torch.float32))
    assert bool(torch.isfinite(result.reward).all()), f"action {value}: reward {result.reward.tolist()}"
    assert bool(torch.isfinite(result.obs).all()), f"action {value}: obs {result.obs.tolist()}"
