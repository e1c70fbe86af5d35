"""The eager step's cheaper forms give exactly what the forms they replace gave: CartPole's fresh starts drawn
in place, its push as one ``where``, the counters reset with ``masked_fill``, and action validation by one
``aminmax`` (with the legality check skipped where every action in range is legal)."""

from typing import NamedTuple

import pytest
import torch

from rl_gpu.core.pytree import tree_where
from rl_gpu.envs.base import select_rows, stack_float32
from rl_gpu.envs.cartpole import CartPoleEnv
from rl_gpu.envs.registry import make


class _Mixed(NamedTuple):
    position: torch.Tensor
    physics: torch.Tensor
    variant: torch.Tensor


def test_cartpole_fresh_starts_round_as_low_plus_span_times_u():
    env = CartPoleEnv(3, seed=0)
    env.generator.manual_seed(11)
    starts = env.draw_starts(1000)
    u = torch.rand(4, 1000, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    expected = env.reset_low + (env.reset_high - env.reset_low) * u
    assert all(torch.equal(field, row) for field, row in zip(starts, expected))


@pytest.mark.parametrize("force_mag", [10.0, 7.3])
def test_cartpole_push_is_plus_or_minus_force_mag(force_mag):
    env = CartPoleEnv(4, seed=0, force_mag=force_mag)
    state = env.state.inner
    action = torch.tensor([0, 1, 1, 0])
    nxt, _, _ = env._transition(state, action)
    # One step from the same state with the push written out as Gymnasium's sign(action - 0.5) * force_mag.
    p = env.params
    force = torch.tensor([-force_mag, force_mag, force_mag, -force_mag], dtype=torch.float64)
    cos, sin = torch.cos(state.theta), torch.sin(state.theta)
    temp = (force + p.polemass_length * state.theta_dot.square() * sin) / p.total_mass
    thetaacc = (p.gravity * sin - cos * temp) / (
        p.length * (4.0 / 3.0 - p.masspole * cos.square() / p.total_mass))
    xacc = temp - p.polemass_length * thetaacc * cos / p.total_mass
    assert torch.equal(nxt.x_dot, state.x_dot + p.tau * xacc)
    assert torch.equal(nxt.theta_dot, state.theta_dot + p.tau * thetaacc)


def test_finished_rows_restart_their_counters_and_others_keep_counting():
    env = CartPoleEnv(64, seed=1, validate_actions=False)
    push_right = torch.ones(64, dtype=torch.long)
    finished = 0
    for _ in range(30):
        before = env.state
        result = env.step(push_right)
        done = result.terminated | result.truncated
        assert torch.equal(env.state.episode_step, torch.where(done, 0, before.episode_step + 1))
        assert torch.equal(env.state.episode_return, torch.where(done, 0.0, before.episode_return + 1.0))
        assert torch.equal(result.episode_length, before.episode_step + 1)
        finished += int(done.sum())
    assert finished >= 64  # always pushing right ends every episode within about 10 steps


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_out_of_range_action_names_its_row_for_every_integer_dtype(dtype):
    env = make("CartPole-v1", num_envs=6, seed=0)
    env.step(torch.tensor([0, 1, 1, 0, 1, 0], dtype=dtype))
    bad = [2, 5] if dtype == torch.uint8 else [2, 5, -1]
    for value in bad:
        action = torch.tensor([0, 1, 1, value, 1, 0], dtype=dtype)
        with pytest.raises(ValueError, match=rf"out of range in env 3: {value} \(allowed 0..1\)"):
            env.step(action)


def test_stack_float32_rounds_as_stack_then_float():
    g = torch.Generator().manual_seed(0)
    # Magnitudes from 1e-50 to 1e50: float32's rounding, its underflow to 0 and its overflow to inf.
    scales = [10.0 ** torch.randint(-50, 50, (1000,), generator=g).double() for _ in range(3)]
    columns = [torch.randn(1000, dtype=torch.float64, generator=g) * scale for scale in scales]
    columns[0][:4] = torch.tensor([float("nan"), float("inf"), 1e300, 5e-324], dtype=torch.float64)
    expected = torch.stack(columns, dim=1).float()
    got = stack_float32(tuple(columns))
    assert got.dtype == torch.float32 and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


def test_select_rows_is_tree_where_for_fields_of_any_rank():
    g = torch.Generator().manual_seed(1)
    a = _Mixed(torch.rand(7, generator=g), torch.rand(7, 3, 2, generator=g), torch.arange(7))
    b = _Mixed(torch.rand(7, generator=g), torch.rand(7, 3, 2, generator=g), -torch.arange(7))
    rows = torch.tensor([True, False, False, True, True, False, True])
    got, expected = select_rows(rows, a, b), tree_where(rows, a, b)
    assert type(got) is _Mixed and all(torch.equal(x, y) for x, y in zip(got, expected))
