"""Russian roulette: parity with the scalar reference, the rules by hand, and the contract's invariants."""

from __future__ import annotations

import functools
import random

import pytest
import torch

from rl_gpu.envs import RouletteState, RussianRouletteVectorized
from rl_gpu.envs import roulette as tensor_rules
from rl_gpu.envs.testing import (
    ParityError,
    check_autoreset,
    check_frozen_rows,
    check_reference_parity,
    inner_row,
    sample_actions,
    stack_rows,
)
from rl_gpu.envs.reference import roulette as reference_rules
from rl_gpu.envs.reference.roulette import (
    FIRE,
    MAX_GAME_LENGTH,
    PEEK,
    PEEK_BLANK,
    PEEK_LIVE,
    PEEK_UNKNOWN,
    SKIP,
    RouletteGame,
)


def game_key(game: RouletteGame) -> tuple:
    return (
        game.chamber,
        game.live,
        game.current_player,
        tuple(game.peek_available),
        tuple(game.skip_available),
        tuple(game.peek_result),
    )


@functools.cache
def reachable_games() -> tuple[tuple[RouletteGame, ...], int]:
    """Every unfinished state reachable from a fresh game, and the longest game, by exhaustive search."""
    seen: dict[tuple, RouletteGame] = {}
    longest = 0
    stack = [(RouletteGame(live=live), 0) for live in range(reference_rules.NUM_CHAMBERS)]
    while stack:
        game, depth = stack.pop()
        if game_key(game) in seen:
            continue
        seen[game_key(game)] = game
        for action, legal in enumerate(game.legal_actions()):
            if legal:
                child = game.get_state()
                _, terminated = child.step(action)
                if terminated:
                    longest = max(longest, depth + 1)
                else:
                    stack.append((child, depth + 1))
    return tuple(seen.values()), longest


def random_reachable_games(count: int, seed: int) -> list[RouletteGame]:
    """Unfinished games reached by random legal play from random fresh games."""
    rng = random.Random(seed)
    games = []
    while len(games) < count:
        game = RouletteGame.new(rng)
        for _ in range(rng.randrange(MAX_GAME_LENGTH)):
            child = game.get_state()
            action = rng.choice([a for a, ok in enumerate(child.legal_actions()) if ok])
            if child.step(action)[1]:
                break
            game = child
        games.append(game)
    return games


def roulette_parity(env: RussianRouletteVectorized, **kwargs) -> object:
    return check_reference_parity(
        env,
        reference_factory=lambda: RouletteGame(live=0),
        to_reference=RouletteGame.from_row,
        to_inner=RouletteGame.as_row,
        **kwargs,
    )


def inject(env: RussianRouletteVectorized, games: list[RouletteGame]) -> None:
    rows = torch.arange(len(games))
    env.set_rows(rows, stack_rows(env.state.inner, [g.as_row() for g in games]))


def test_reference_constants_match_the_tensor_module():
    assert (reference_rules.FIRE, reference_rules.PEEK, reference_rules.SKIP) == (
        tensor_rules.FIRE,
        tensor_rules.PEEK,
        tensor_rules.SKIP,
    )
    assert (PEEK_UNKNOWN, PEEK_BLANK, PEEK_LIVE) == (
        tensor_rules.PEEK_UNKNOWN,
        tensor_rules.PEEK_BLANK,
        tensor_rules.PEEK_LIVE,
    )
    assert reference_rules.NUM_CHAMBERS == tensor_rules.NUM_CHAMBERS
    assert MAX_GAME_LENGTH == tensor_rules.MAX_GAME_LENGTH == RussianRouletteVectorized.max_game_length
    assert reference_rules.NUM_ACTIONS == RussianRouletteVectorized.num_actions
    assert list(RouletteGame(live=0).as_row()) == list(RouletteState._fields)


def test_parity_over_thousands_of_random_games_with_autoreset():
    env = RussianRouletteVectorized(512, seed=1)
    report = roulette_parity(env, num_steps=40, seed=2)
    assert report.episodes >= 3000


def test_parity_from_random_midgame_states_without_autoreset():
    env = RussianRouletteVectorized(512, seed=3, autoreset=False)
    report = roulette_parity(env, initial_states=random_reachable_games(512, seed=4), num_steps=30, seed=5)
    assert report.episodes >= 1500


def test_parity_of_every_action_from_every_reachable_state():
    states, _ = reachable_games()
    pairs = [(g, a) for g in states for a, ok in enumerate(g.legal_actions()) if ok]
    env = RussianRouletteVectorized(len(pairs), seed=6)
    first = torch.tensor([a for _, a in pairs])
    calls = []

    def first_every_action_then_random(result, generator):
        calls.append(None)
        return first if len(calls) == 1 else sample_actions(env, result.action_mask, generator)

    report = roulette_parity(
        env,
        initial_states=[g for g, _ in pairs],
        num_steps=12,
        seed=7,
        action_fn=first_every_action_then_random,
    )
    assert len(states) > 400 and report.episodes >= len(pairs)


def test_every_transition_of_the_game_yields_the_reference_next_state():
    # With the observation tests below, equal next states from every reachable state under every legal
    # action make the two implementations equal on every game, by induction over the game length.
    states, _ = reachable_games()
    pairs = [(g, a) for g in states for a, ok in enumerate(g.legal_actions()) if ok]
    env = RussianRouletteVectorized(len(pairs), seed=0, autoreset=False)
    inject(env, [g for g, _ in pairs])
    result = env.step(torch.tensor([a for _, a in pairs]))
    for i, (game, action) in enumerate(pairs):
        expected = game.get_state()
        reward, terminated = expected.step(action)
        assert RouletteGame.from_row(inner_row(env.state.inner, i)) == RouletteGame.from_row(expected)
        assert (tuple(result.reward[i].tolist()), bool(result.terminated[i])) == (reward, terminated)


def test_parity_harness_reports_an_injected_disagreement():
    env = RussianRouletteVectorized(4, seed=0)

    class WrongReference(RouletteGame):
        def observation(self) -> list[float]:
            return [0.5] + super().observation()[1:]

    with pytest.raises(ParityError) as info:
        check_reference_parity(env, lambda: WrongReference(live=0), WrongReference.from_row, num_steps=1)
    assert info.value.field == "obs" and info.value.step == 0 and info.value.row == 0


class ScalarGame:
    """The rules exercised on the reference."""

    def __init__(self, game: RouletteGame) -> None:
        self.game = game.get_state()

    def step(self, action: int) -> tuple[tuple[float, float], bool]:
        return self.game.step(action)

    def obs(self) -> list[float]:
        return self.game.observation()

    def legal(self) -> list[bool]:
        return self.game.legal_actions()

    def state(self) -> RouletteGame:
        # Drops `finished`, which the tensor side tracks outside its game state, so both compare alike.
        return RouletteGame.from_row(self.game)


class TensorGame:
    """The same rules exercised on a one-row tensor environment."""

    def __init__(self, game: RouletteGame) -> None:
        self.env = RussianRouletteVectorized(1, seed=0, autoreset=False)
        inject(self.env, [game])

    def step(self, action: int) -> tuple[tuple[float, float], bool]:
        result = self.env.step(torch.tensor([action]))
        return tuple(result.reward[0].tolist()), bool(result.terminated[0])

    def obs(self) -> list[float]:
        return self.env.observe().obs[0].tolist()

    def legal(self) -> list[bool]:
        return self.env.observe().action_mask[0].tolist()

    def state(self) -> RouletteGame:
        return RouletteGame.from_row(inner_row(self.env.state.inner, 0))


@pytest.fixture(params=[ScalarGame, TensorGame], ids=["reference", "tensor"])
def play(request):
    return request.param


def test_blank_fire_advances_the_chamber_and_passes_the_turn(play):
    game = play(RouletteGame(live=3))
    assert game.step(FIRE) == ((0.0, 0.0), False)
    assert game.state() == RouletteGame(live=3, chamber=1, current_player=1)
    assert game.obs() == pytest.approx([0.2, 1, 1, 1, 1, 0])


@pytest.mark.parametrize("firer", [0, 1])
def test_live_fire_ends_the_game_and_the_firer_loses(play, firer):
    game = play(RouletteGame(live=firer))
    for _ in range(firer):
        assert game.step(FIRE) == ((0.0, 0.0), False)
    reward, terminated = game.step(FIRE)
    assert terminated
    assert reward[firer] == -1.0 and reward[1 - firer] == 1.0


@pytest.mark.parametrize(("live", "seen"), [(0, 1.0), (2, -1.0)])
def test_peek_reveals_into_the_peekers_observation_only(play, live, seen):
    game = play(RouletteGame(live=live))
    assert game.step(PEEK) == ((0.0, 0.0), False)
    assert game.state().current_player == 0
    assert game.obs() == pytest.approx([0, 0, 1, 1, 1, seen])
    assert game.legal() == [True, False, True]
    game.step(SKIP)
    assert game.obs() == pytest.approx([0, 1, 1, 0, 0, 0])
    game.step(SKIP)
    assert game.obs() == pytest.approx([0, 0, 0, 1, 0, seen])


def test_peek_can_be_used_once(play):
    game = play(RouletteGame(live=4))
    game.step(PEEK)
    before = game.state()
    with pytest.raises(ValueError):
        game.step(PEEK)
    assert game.state() == before


def test_skip_passes_the_turn_without_moving_the_chamber(play):
    game = play(RouletteGame(live=4))
    assert game.step(SKIP) == ((0.0, 0.0), False)
    state = game.state()
    assert (state.chamber, state.current_player, state.skip_available) == (0, 1, [False, True])
    assert game.legal() == [True, True, True]
    game.step(SKIP)
    assert game.state().current_player == 0
    assert game.legal() == [True, True, False]
    with pytest.raises(ValueError):
        game.step(SKIP)


def test_peek_result_is_forgotten_when_the_chamber_moves(play):
    game = play(RouletteGame(live=3))
    game.step(PEEK)
    assert game.obs()[5] == -1.0
    game.step(FIRE)
    game.step(SKIP)
    state = game.state()
    assert (state.chamber, state.current_player, state.peek_result) == (1, 0, [PEEK_UNKNOWN, PEEK_UNKNOWN])
    assert game.obs()[5] == 0.0


def test_the_longest_game_takes_exactly_max_game_length_actions(play):
    game = play(RouletteGame(live=5))
    actions = [PEEK, SKIP, PEEK, SKIP] + [FIRE] * 6
    outcomes = [game.step(a) for a in actions]
    assert [terminated for _, terminated in outcomes] == [False] * 9 + [True]
    assert len(actions) == MAX_GAME_LENGTH
    assert outcomes[-1][0] == (1.0, -1.0)


def test_exhaustive_search_finds_no_game_longer_than_max_game_length():
    _, longest = reachable_games()
    assert longest == MAX_GAME_LENGTH


def test_a_finished_reference_game_refuses_actions():
    game = RouletteGame(live=0)
    game.step(FIRE)
    with pytest.raises(ValueError, match="over"):
        game.step(FIRE)


def test_every_game_ends_within_max_game_length_under_random_play():
    env = RussianRouletteVectorized(4096, seed=8, autoreset=False)
    result = env.reset()
    generator = torch.Generator().manual_seed(9)
    lengths = torch.zeros(4096, dtype=torch.long)
    for _ in range(MAX_GAME_LENGTH):
        result = env.step(sample_actions(env, result.action_mask, generator))
        lengths = torch.where(result.done, result.episode_length, lengths)
    assert bool(env.state.done.all())
    assert int(lengths.max()) <= MAX_GAME_LENGTH and int(lengths.min()) >= 1


def test_finished_rows_never_move():
    check_frozen_rows(RussianRouletteVectorized, num_envs=64, num_steps=40, seed=10)
    env = RussianRouletteVectorized(256, seed=11, autoreset=False)
    result = env.reset()
    generator = torch.Generator().manual_seed(12)
    for _ in range(MAX_GAME_LENGTH):
        result = env.step(sample_actions(env, result.action_mask, generator))
    frozen = env.get_state()
    assert bool(frozen.done.all())
    for _ in range(20):
        any_action = torch.randint(0, 3, (256,), generator=generator)
        result = env.step(any_action)
        assert not bool(result.reward.any()) and not bool(result.done.any())
    for now, then in zip(env.state.inner, frozen.inner):
        assert torch.equal(now, then)


def test_only_finished_rows_reset():
    report = check_autoreset(RussianRouletteVectorized, num_envs=64, num_steps=60, seed=13)
    assert report.episodes > 300


@pytest.mark.parametrize("autoreset", [True, False])
def test_every_finished_game_pays_exactly_one_loss_and_one_win(autoreset):
    n = 1024
    env = RussianRouletteVectorized(n, seed=14, autoreset=autoreset)
    result = env.reset()
    generator = torch.Generator().manual_seed(15)
    paid = torch.zeros(n, 2)
    finished = 0
    for _ in range(40 if autoreset else 2 * MAX_GAME_LENGTH):
        mover = result.current_player
        result = env.step(sample_actions(env, result.action_mask, generator))
        assert torch.equal(result.reward.ne(0).any(1), result.terminated)
        loser = result.reward.gather(1, mover.unsqueeze(1)).squeeze(1)
        assert bool((loser[result.terminated] == -1).all())
        paid += result.reward
        done = result.done
        assert bool((paid[done].sum(1) == 0).all()) and bool((paid[done].abs() == 1).all())
        assert torch.equal(result.episode_return[done], paid[done])
        finished += int(done.sum())
        if autoreset:
            paid[done] = 0
    if autoreset:
        assert finished > 5000
    else:
        assert finished == n
        assert bool((paid.sum(1) == 0).all()) and bool((paid.abs() == 1).all())


def test_observation_never_reads_the_live_chamber():
    states, _ = reachable_games()
    games = [RouletteGame(**{**g.as_row(), "live": live}) for g in states for live in range(6)]
    env = RussianRouletteVectorized(len(games), seed=0)
    inject(env, games)
    view = env.observe()
    per_state = view.obs.reshape(len(states), 6, 6)
    assert torch.equal(per_state, per_state[:, :1].expand_as(per_state))
    assert torch.equal(
        view.action_mask.reshape(len(states), 6, 3)[:, 0].repeat_interleave(6, 0), view.action_mask
    )


def test_two_games_differing_only_in_live_look_the_same_until_someone_peeks():
    a, b = TensorGame(RouletteGame(live=1)), TensorGame(RouletteGame(live=3))
    for game in (a, b):
        game.step(FIRE)
    assert a.obs() == b.obs()
    for game in (a, b):
        game.step(PEEK)
    assert a.obs()[:5] == b.obs()[:5] and (a.obs()[5], b.obs()[5]) == (1.0, -1.0)
    for game in (a, b):
        game.step(SKIP)
    assert a.obs() == b.obs()


# Upper 1e-6 tail of the chi-square distribution with 1..5 degrees of freedom.
CHI2_CRITICAL = {1: 23.93, 2: 27.63, 3: 30.66, 4: 33.38, 5: 35.89}


def test_under_random_play_an_observation_tells_only_what_the_rules_reveal():
    # The players' actions ignore `live`, so given what a seat observes, `live` must be uniform over the
    # chambers still possible: chamber..5 without a peek result, chamber+1..5 after a blank, only chamber
    # after a live one.
    n = 16384
    env = RussianRouletteVectorized(n, seed=16, autoreset=False)
    result = env.reset()
    generator = torch.Generator().manual_seed(17)
    observations, lives = [], []
    for _ in range(MAX_GAME_LENGTH):
        active = ~env.state.done
        observations.append(result.obs[active])
        lives.append(env.state.inner.live[active])
        result = env.step(sample_actions(env, result.action_mask, generator))
    obs = torch.cat(observations)
    live = torch.cat(lives)
    groups, inverse, counts = torch.unique(obs, dim=0, return_inverse=True, return_counts=True)
    tested = 0
    for g, (view, count) in enumerate(zip(groups, counts.tolist())):
        chamber = round(float(view[0]) * 5)
        seen = float(view[5])
        possible = [chamber] if seen == 1 else list(range(chamber + (seen == -1), 6))
        sample = live[inverse == g]
        assert set(sample.unique().tolist()) <= set(possible)
        if len(possible) < 2 or count < 200:
            continue
        observed = torch.bincount(sample, minlength=6)[possible].double()
        expected = count / len(possible)
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        assert chi2 < CHI2_CRITICAL[len(possible) - 1], (view.tolist(), observed.tolist())
        tested += 1
    assert tested >= 20


def test_get_state_returns_an_independent_copy():
    env = RussianRouletteVectorized(8, seed=18)
    copy = env.get_state()
    copy.inner.chamber.fill_(4)
    copy.episode_step.fill_(7)
    assert not bool(env.state.inner.chamber.any()) and not bool(env.state.episode_step.any())


def test_set_state_round_trip_replays_the_same_trajectory():
    a = RussianRouletteVectorized(64, seed=19)
    b = RussianRouletteVectorized(64, seed=20)
    generator = torch.Generator().manual_seed(21)
    result = a.reset()
    for _ in range(3):
        result = a.step(sample_actions(a, result.action_mask, generator))
    b.set_state(a.get_state())
    b.generator.set_state(a.generator.get_state())
    for _ in range(12):
        action = sample_actions(a, result.action_mask, generator)
        result = a.step(action)
        other = b.step(action)
        for x, y in zip(result, other):
            assert (x is None and y is None) or torch.equal(x, y)


def test_set_rows_injects_games_and_restarts_only_their_counters():
    games = random_reachable_games(2, seed=22)
    env = RussianRouletteVectorized(8, seed=23)
    result = env.reset()
    generator = torch.Generator().manual_seed(24)
    result = env.step(sample_actions(env, result.action_mask, generator))
    before = env.get_state()
    rows = torch.tensor([3, 6])
    env.set_rows(rows, stack_rows(env.state.inner, [g.as_row() for g in games]))
    for row, game in zip(rows.tolist(), games):
        assert RouletteGame.from_row(inner_row(env.state.inner, row)) == game
    assert env.state.episode_step[rows].eq(0).all() and env.state.episode_return[rows].eq(0).all()
    others = torch.ones(8, dtype=torch.bool)
    others[rows] = False
    for now, then in zip((*env.state.inner, env.state.episode_step), (*before.inner, before.episode_step)):
        assert torch.equal(now[others], then[others])
    assert env.observe().obs[3].tolist() == pytest.approx(games[0].observation())


def test_row_mapping_round_trips_every_reachable_state():
    states, _ = reachable_games()
    env = RussianRouletteVectorized(1, seed=0)
    inner = stack_rows(env.state.inner, [g.as_row() for g in states])
    assert [RouletteGame.from_row(inner_row(inner, i)) for i in range(len(states))] == list(states)


def test_malformed_states_are_refused():
    env = RussianRouletteVectorized(4, seed=0)
    state = env.get_state()
    with pytest.raises(TypeError, match="EnvState"):
        env.set_state(state.inner)
    short = state._replace(inner=state.inner._replace(chamber=state.inner.chamber[:2]))
    with pytest.raises(ValueError, match="chamber"):
        env.set_state(short)
    one_row = RouletteState(*(t[:1] for t in state.inner))._replace(
        peek_result=torch.zeros(1, 3, dtype=torch.long)
    )
    with pytest.raises(ValueError, match="peek_result"):
        env.set_rows(torch.tensor([0]), one_row)
    with pytest.raises(ValueError, match="live"):
        RouletteGame(live=6)


@pytest.fixture
def peeked():
    """Four games; in row 2 the player to act has used PEEK."""
    env = RussianRouletteVectorized(4, seed=25)
    env.step(torch.tensor([SKIP, SKIP, PEEK, SKIP]))
    return env


def test_illegal_peek_is_refused_with_the_row_and_the_legal_actions(peeked):
    before = peeked.get_state()
    with pytest.raises(ValueError, match=r"illegal action 1 in env 2; legal there: \[0, 2\]"):
        peeked.step(torch.tensor([FIRE, FIRE, PEEK, FIRE]))
    for now, then in zip(peeked.state.inner, before.inner):
        assert torch.equal(now, then)


@pytest.mark.parametrize(
    ("action", "error", "message"),
    [
        (torch.tensor([0, 0, 0, 3]), ValueError, r"out of range in env 3: 3 \(allowed 0..2\)"),
        (torch.tensor([0, -1, 0, 0]), ValueError, r"out of range in env 1: -1"),
        (torch.tensor([0, 0, 0]), ValueError, r"shape \(4,\)"),
        (torch.zeros(4, 1, dtype=torch.long), ValueError, r"shape \(4,\)"),
        (torch.zeros(4), ValueError, "integer tensor"),
        ([0, 0, 0, 0], TypeError, "torch.Tensor"),
        (torch.zeros(4, dtype=torch.long, device="meta"), ValueError, "is on meta"),
    ],
    ids=["too-large", "negative", "short", "2-d", "float", "list", "device"],
)
def test_malformed_actions_are_refused_with_a_clear_message(peeked, action, error, message):
    with pytest.raises(error, match=message):
        peeked.step(action)


def test_without_validation_only_the_free_checks_remain(peeked):
    peeked.validate_actions = False
    peeked.step(torch.tensor([FIRE, FIRE, PEEK, FIRE]))
    with pytest.raises(ValueError, match="shape"):
        peeked.step(torch.zeros(3, dtype=torch.long))


def test_frozen_rows_ignore_even_illegal_actions():
    env = RussianRouletteVectorized(2, seed=26, autoreset=False)
    inject(env, [RouletteGame(live=0, peek_available=[False, True]), RouletteGame(live=5)])
    env.step(torch.tensor([FIRE, FIRE]))
    frozen = env.get_state()
    result = env.step(torch.tensor([PEEK, FIRE]))
    assert torch.equal(env.state.inner.peek_result[0], frozen.inner.peek_result[0])
    assert result.reward[0].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="out of range"):
        env.step(torch.tensor([3, FIRE]))
