"""The generic checks of rl_gpu.envs.testing: they pass on correct environments and catch broken ones."""

from __future__ import annotations

import functools
from typing import NamedTuple

import pytest
import torch
from torch import Tensor

from rl_gpu.envs import RouletteState, RussianRouletteVectorized, TensorEnv, tree_where
from rl_gpu.envs.testing import (
    EnvCheckError,
    ParityError,
    check_action_masks,
    check_autoreset,
    check_batch_vs_single,
    check_determinism,
    check_env,
    check_frozen_rows,
    check_reference_parity,
    inner_row,
    sample_actions,
    stack_rows,
)
from rl_gpu.envs.reference import RouletteGame


class DriftState(NamedTuple):
    position: Tensor
    velocity: Tensor


class Drift(TensorEnv[DriftState]):
    """A single-player, continuous-action toy: push a point; leaving [-1, 1] terminates; 25-step limit."""

    obs_shape = (2,)
    action_shape = (1,)
    action_low = (-1.0,)
    action_high = (1.0,)
    max_episode_steps = 25

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> DriftState:
        position = torch.rand(num_envs, generator=generator, device=self.device) - 0.5
        return DriftState(position, torch.zeros(num_envs, device=self.device))

    def _transition(self, s: DriftState, action: Tensor) -> tuple[DriftState, Tensor, Tensor]:
        push = action[:, 0].clamp(-1.0, 1.0)
        velocity = 0.9 * s.velocity + 0.1 * push
        position = s.position + velocity
        return DriftState(position, velocity), 1.0 - position.abs(), position.abs() > 1.0

    def _observe(self, s: DriftState) -> Tensor:
        return torch.stack((s.position, s.velocity), dim=1)


class DriftReference:
    current_player = 0

    def __init__(self) -> None:
        self.position = self.velocity = 0.0

    def get_state(self) -> tuple[float, float]:
        return self.position, self.velocity

    def set_state(self, state: tuple[float, float]) -> None:
        self.position, self.velocity = state

    def step(self, action: list[float]) -> tuple[float, bool]:
        push = min(max(action[0], -1.0), 1.0)
        self.velocity = 0.9 * self.velocity + 0.1 * push
        self.position += self.velocity
        return 1.0 - abs(self.position), abs(self.position) > 1.0

    def observation(self) -> list[float]:
        return [self.position, self.velocity]

    def legal_actions(self) -> list[bool]:
        return []


def drift_to_reference(row: DriftState) -> tuple[float, float]:
    return float(row.position), float(row.velocity)


def roulette_parity(env: TensorEnv, **kwargs) -> object:
    return check_reference_parity(
        env, lambda: RouletteGame(live=0), RouletteGame.from_row, RouletteGame.as_row, **kwargs
    )


def test_roulette_passes_every_generic_check():
    reports = check_env(RussianRouletteVectorized, num_envs=16, num_steps=80, seed=1)
    assert set(reports) == {
        "action_masks",
        "determinism",
        "batch_vs_single",
        "batch_vs_single_no_autoreset",
        "autoreset",
        "frozen_rows",
    }
    assert all(r.episodes > 0 for r in reports.values())
    assert reports["action_masks"].details["illegal_rejected"] > 50
    assert (
        reports["frozen_rows"].details["frozen_steps"] > 0
        and reports["frozen_rows"].details["rows_reset"] > 0
    )


@pytest.mark.parametrize("seed", [2, 3])
@pytest.mark.parametrize("autoreset", [True, False])
def test_roulette_row_does_not_depend_on_the_batch(seed, autoreset):
    report = check_batch_vs_single(
        RussianRouletteVectorized, num_envs=6, num_steps=50, seed=seed, autoreset=autoreset
    )
    assert report.episodes >= 6


def test_roulette_is_deterministic_across_seeds():
    for seed in (0, 7, 2**40):
        check_determinism(RussianRouletteVectorized, seed, num_envs=32, num_steps=30)


def test_drift_passes_every_generic_check():
    reports = check_env(Drift, num_envs=16, num_steps=60, seed=4)
    assert reports["autoreset"].episodes > 16
    assert reports["action_masks"].details["illegal_rejected"] == 0


def test_drift_matches_its_reference_with_truncation_and_termination():
    env = Drift(64, seed=5)
    whole = check_reference_parity(env, DriftReference, drift_to_reference, num_steps=60, atol=1e-5)
    stepwise = check_reference_parity(
        env, DriftReference, drift_to_reference, num_steps=60, resync_every_step=True
    )
    assert whole.episodes > 64 and stepwise.episodes > 64


def test_drift_parity_harness_applies_the_time_limit():
    env = Drift(8, seed=6, autoreset=False)
    env.set_rows(torch.arange(8), DriftState(torch.zeros(8), torch.zeros(8)))

    def hold_still(result, generator):
        return torch.zeros(8, 1)

    report = check_reference_parity(
        env, DriftReference, drift_to_reference, num_steps=Drift.max_episode_steps, action_fn=hold_still
    )
    assert report.episodes == 8


def test_tree_where_selects_rows_of_every_field():
    a = RouletteState(
        *(torch.full((3,) + shape, 1, dtype=torch.long) for shape in [(), (), (), (2,), (2,), (2,)])
    )
    b = RouletteState(*(torch.full_like(t, 2) for t in a))
    picked = tree_where(torch.tensor([True, False, True]), a, b)
    assert type(picked) is RouletteState
    for t in picked:
        assert t.tolist() == [[1, 1], [2, 2], [1, 1]] if t.dim() == 2 else t.tolist() == [1, 2, 1]


def test_tree_where_keeps_plain_tuples_and_higher_rank_fields():
    a = (torch.zeros(2, 3, 4), torch.zeros(2, dtype=torch.bool))
    b = (torch.ones(2, 3, 4), torch.ones(2, dtype=torch.bool))
    picked = tree_where(torch.tensor([False, True]), a, b)
    assert type(picked) is tuple
    assert picked[0][0].eq(1).all() and picked[0][1].eq(0).all()
    assert picked[1].tolist() == [True, False]
    assert tree_where(torch.ones(2, dtype=torch.bool), a, b)[0].eq(0).all()


def test_sample_actions_draws_legal_actions_reproducibly_and_uniformly():
    env = RussianRouletteVectorized(4000, seed=0)
    mask = torch.tensor([[True, False, True]]).expand(4000, 3)
    first = sample_actions(env, mask, torch.Generator().manual_seed(1))
    again = sample_actions(env, mask, torch.Generator().manual_seed(1))
    assert torch.equal(first, again) and first.dtype == torch.int64
    counts = torch.bincount(first, minlength=3)
    assert counts[1] == 0 and abs(int(counts[0]) - 2000) < 200


def test_sample_actions_stays_within_continuous_bounds():
    env = Drift(1000, seed=0)
    action = sample_actions(env, torch.zeros(1000, 0, dtype=torch.bool), torch.Generator().manual_seed(2))
    assert action.shape == (1000, 1) and action.dtype == torch.float32
    assert float(action.min()) >= -1.0 and float(action.max()) <= 1.0 and float(action.std()) > 0.5


def test_stack_rows_accepts_mappings_tuples_and_checks_shapes():
    template = RussianRouletteVectorized(1, seed=0).state.inner
    game = RouletteGame(live=2, chamber=1, current_player=1, peek_available=[False, True])
    as_tuple = tuple(game.as_row().values())
    inner = stack_rows(template, [game.as_row(), as_tuple])
    assert RouletteGame.from_row(inner_row(inner, 0)) == RouletteGame.from_row(inner_row(inner, 1)) == game
    with pytest.raises(ValueError, match="peek_result"):
        stack_rows(template, [{**game.as_row(), "peek_result": [0, 0, 0]}])
    with pytest.raises(ValueError, match="misses"):
        stack_rows(template, [{"chamber": 0}])


class PaysFrozenRowsAgain(RussianRouletteVectorized):
    def step_state(self, state, action, reset_inner):
        new_state, result = super().step_state(state, action, reset_inner)
        again = torch.where(state.done.unsqueeze(1), torch.tensor([1.0, -1.0]), torch.zeros(2))
        return new_state, result._replace(reward=result.reward + again)


class FrozenRowsMove(RussianRouletteVectorized):
    def step_state(self, state, action, reset_inner):
        return super().step_state(state._replace(done=torch.zeros_like(state.done)), action, reset_inner)


class ResetRowsResetsEveryRow(RussianRouletteVectorized):
    def reset_rows(self, rows):
        return super().reset_rows(torch.ones_like(rows))


class ResetsToThePreviousState(RussianRouletteVectorized):
    def step_state(self, state, action, reset_inner):
        return super().step_state(state, action, state.inner)


class LosesFinalObs(RussianRouletteVectorized):
    def step_state(self, state, action, reset_inner):
        new_state, result = super().step_state(state, action, reset_inner)
        return new_state, result._replace(final_obs=result.obs)


class ResetsWithTheGlobalGenerator(RussianRouletteVectorized):
    def _sample_initial_state(self, num_envs, generator):
        inner = super()._sample_initial_state(num_envs, generator)
        return inner._replace(live=torch.randint(0, 6, (num_envs,)))


class DependsOnTheNextRow(RussianRouletteVectorized):
    def _observe(self, s):
        obs = super()._observe(s)
        return torch.cat((obs[:, :5], obs[:, 5:].roll(1, 0)), dim=1)


class AcceptsAnything(RussianRouletteVectorized):
    def check_action(self, action):
        pass


class NoLegalActionForSeatOne(RussianRouletteVectorized):
    def _legal_actions(self, s):
        return super()._legal_actions(s) & (s.current_player == 0).unsqueeze(1)


class PaysTheWrongSeat(RussianRouletteVectorized):
    def _transition(self, s, action):
        next_state, reward, terminated = super()._transition(s, action)
        return next_state, -reward, terminated


class RemembersPeekAfterTheChamberMoves(RussianRouletteVectorized):
    def _transition(self, s, action):
        next_state, reward, terminated = super()._transition(s, action)
        moved = (next_state.chamber != s.chamber).unsqueeze(1)
        return (
            next_state._replace(peek_result=torch.where(moved, s.peek_result, next_state.peek_result)),
            reward,
            terminated,
        )


CHECKS = {
    "frozen": functools.partial(check_frozen_rows, num_envs=16, num_steps=40),
    "autoreset": functools.partial(check_autoreset, num_envs=16, num_steps=40),
    "determinism": functools.partial(check_determinism, num_envs=16, num_steps=20),
    "batch": functools.partial(check_batch_vs_single, num_envs=4, num_steps=20),
    "masks": functools.partial(check_action_masks, num_envs=16, num_steps=20),
}


@pytest.mark.parametrize(
    ("broken", "check", "field"),
    [
        (PaysFrozenRowsAgain, "frozen", "frozen reward"),
        (FrozenRowsMove, "frozen", "frozen state"),
        (ResetRowsResetsEveryRow, "frozen", "untouched state"),
        (ResetsToThePreviousState, "autoreset", "reset state.inner"),
        (LosesFinalObs, "autoreset", "final_obs"),
        (ResetsWithTheGlobalGenerator, "determinism", "state after construction.inner.live"),
        (DependsOnTheNextRow, "batch", "obs"),
        (AcceptsAnything, "masks", None),
        (NoLegalActionForSeatOne, "masks", "action_mask"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)
def test_a_generic_check_catches_a_broken_env(broken, check, field):
    with pytest.raises(EnvCheckError) as info:
        CHECKS[check](broken)
    assert info.value.check == CHECKS[check].func.__name__
    if field is not None:
        assert info.value.field is not None and info.value.field.startswith(field)


@pytest.mark.parametrize(
    ("broken", "field"),
    [
        (PaysTheWrongSeat, "reward"),
        (RemembersPeekAfterTheChamberMoves, "final_obs"),
        (NoLegalActionForSeatOne, None),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)
def test_reference_parity_catches_what_generic_checks_cannot(broken, field):
    if broken is not NoLegalActionForSeatOne:
        check_env(broken, num_envs=8, num_steps=20)
    with pytest.raises(ParityError) as info:
        roulette_parity(broken(64, seed=0), num_steps=20)
    if field is not None:
        assert info.value.field == field
    assert "env row" in str(info.value) and "expected" in str(info.value)


def test_parity_error_names_row_step_action_and_state():
    with pytest.raises(ParityError) as info:
        roulette_parity(PaysTheWrongSeat(32, seed=0), num_steps=20)
    error = info.value
    assert error.step >= 1 and 0 <= error.row < 32
    assert sorted(error.expected) == sorted(error.got) == [-1.0, 1.0] and error.expected != error.got
    message = str(error)
    assert f"env row {error.row}" in message and f"step {error.step}" in message
    assert "action 0" in message and "chamber=" in message


def test_parity_refuses_injected_states_without_a_mapping():
    env = RussianRouletteVectorized(2, seed=0)
    with pytest.raises(ValueError, match="to_inner"):
        check_reference_parity(
            env,
            lambda: RouletteGame(live=0),
            RouletteGame.from_row,
            initial_states=[RouletteGame(live=0)] * 2,
        )
    with pytest.raises(ValueError, match="2 rows"):
        roulette_parity(env, initial_states=[RouletteGame(live=0)])
