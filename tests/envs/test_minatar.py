"""MinAtar's Breakout, Space Invaders, Freeway, Asterix and Seaquest as tensor environments: every transition equals
``minatar``'s own game fed the same state and the same random draws (sticky actions, Freeway's car speeds, Asterix's
and Seaquest's spawns; from resets, and from injected states chosen to reach what random play rarely does: cleared
walls, cleared waves, difficulty ramps, scoring, full lanes, crowded seas, rescues and surfacing), and the generic
contract checks."""

import importlib.util

import numpy as np
import pytest
import torch

if importlib.util.find_spec("minatar") is None:  # found, not imported: minatar loads seaborn for its rendering
    pytest.skip("needs minatar (pip install 'rl-gpu[games]')", allow_module_level=True)

from rl_gpu import make  # noqa: E402
from rl_gpu.envs.minatar.asterix import AsterixEnv  # noqa: E402
from rl_gpu.envs.minatar.breakout import BreakoutEnv  # noqa: E402
from rl_gpu.envs.minatar.freeway import FreewayEnv  # noqa: E402
from rl_gpu.envs.minatar.seaquest import SeaquestEnv  # noqa: E402
from rl_gpu.envs.minatar.space_invaders import SpaceInvadersEnv  # noqa: E402
from rl_gpu.envs.random_draws import hash_uniform  # noqa: E402
from rl_gpu.envs.testing import check_env, check_reference_parity, stack_rows  # noqa: E402
from rl_gpu.envs.testing.minatar_reference import reference_for, row_uniforms  # noqa: E402

GAMES = [BreakoutEnv, SpaceInvadersEnv, FreewayEnv, AsterixEnv, SeaquestEnv]


@pytest.mark.parametrize("cls, params", [(BreakoutEnv, {}), (SpaceInvadersEnv, {}), (FreewayEnv, {}), (AsterixEnv, {}),
                                         (SeaquestEnv, {}),
                                         (SpaceInvadersEnv, {"sticky_action_prob": 0.5, "difficulty_ramping": False})])
def test_every_transition_from_resets_equals_minatars(cls, params):
    env = cls(16 if params else 32, seed=1, **params)  # the settings' variant: the same rules, fewer rows
    report = check_reference_parity(env, *reference_for(env), num_steps=160)
    assert report.episodes > 10 or cls is FreewayEnv  # a game of Freeway lasts 2,500 steps (injected below)


def _grid(rng: np.random.Generator, count: int, rows: tuple[int, int]) -> np.ndarray:
    grid = np.zeros((10, 10), dtype=bool)
    for _ in range(count):
        grid[rng.integers(*rows), rng.integers(10)] = True
    return grid


def _breakout_states(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    states = []
    for i in range(n):
        x, y = int(rng.integers(10)), int(rng.integers(9))
        states.append(dict(ball_x=x, ball_y=y, ball_dir=int(rng.integers(4)), pos=int(rng.integers(10)),
                           last_x=x, last_y=y, bricks=_grid(rng, int(rng.integers(4)), (1, 9)),
                           strike=bool(rng.integers(2)), last_action=int(rng.choice([0, 1, 3])),
                           key=int(rng.integers(2**32)), t=int(rng.integers(500))))
    # Crafted: no brick left and the ball about to land on the paddle (a new wall), or to miss it.
    states[0].update(ball_x=4, ball_y=8, ball_dir=2, pos=5, bricks=np.zeros((10, 10), dtype=bool))
    states[1].update(ball_x=4, ball_y=8, ball_dir=3, pos=7, bricks=np.zeros((10, 10), dtype=bool))
    # The paddle under the ball's new column: it bounces back up the way it came.
    states[2].update(ball_x=0, ball_y=8, ball_dir=2, pos=1)
    return states


def _invaders_states(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    states = []
    for i in range(n):
        interval = int(rng.integers(6, 13))
        states.append(dict(pos=int(rng.integers(10)), f_bullets=_grid(rng, int(rng.integers(3)), (0, 9)),
                           e_bullets=_grid(rng, int(rng.integers(3)), (1, 9)),
                           aliens=_grid(rng, int(rng.integers(1, 4)), (0, 9)), alien_dir=int(rng.choice([-1, 1])),
                           move_interval=interval, move_timer=int(rng.integers(interval + 1)),
                           shot_timer=int(rng.integers(11)), ramp_index=int(rng.integers(7)),
                           cool_down=int(rng.integers(6)), last_action=int(rng.choice([0, 1, 3, 5])),
                           key=int(rng.integers(2**32)), t=int(rng.integers(500))))
    # Crafted: the last alien right above a bullet (the wave is cleared, and the next one moves sooner).
    aliens, bullets = np.zeros((10, 10), dtype=bool), np.zeros((10, 10), dtype=bool)
    aliens[5, 4], bullets[6, 4] = True, True
    states[0].update(aliens=aliens, f_bullets=bullets, move_timer=3, move_interval=9, shot_timer=4)
    return states


def _freeway_states(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    states = []
    for i in range(n):
        speed = rng.integers(1, 6, 8) * rng.choice([-1, 1], 8)
        states.append(dict(pos=int(rng.integers(1, 10)), move_timer=int(rng.integers(4)),
                           terminate_timer=int(rng.integers(0, 2501)), car_x=rng.integers(0, 10, 8),
                           car_timer=np.array([rng.integers(abs(v) + 1) for v in speed]), car_speed=speed,
                           last_action=int(rng.choice([0, 2, 4])), key=int(rng.integers(2**32)),
                           t=int(rng.integers(500))))
    # Crafted: one step from the top (it scores, and the speeds are redrawn); a car about to drive onto the
    # chicken (sent back to the bottom); the last step of a game.
    states[0].update(pos=1, move_timer=0)
    states[1].update(pos=3, car_x=np.array([0, 0, 3, 0, 0, 0, 0, 0]), car_timer=np.zeros(8, dtype=int),
                     car_speed=np.array([1, 1, 1, 1, 1, 1, 1, 1]), move_timer=2)
    states[2].update(terminate_timer=0)
    return states


def _asterix_states(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    states = []
    for i in range(n):
        alive = rng.random(8) < (0.5 if i % 2 else 1.0)  # every other row: all lanes taken, no spawn possible
        spawn_speed, move_speed = int(rng.integers(1, 11)), int(rng.integers(1, 6))
        states.append(dict(player_x=int(rng.integers(10)), player_y=int(rng.integers(1, 9)), alive=alive,
                           thing_x=np.where(alive, rng.integers(0, 10, 8), 0),
                           rightward=alive & (rng.random(8) < 0.5), gold=alive & (rng.random(8) < 0.4),
                           spawn_speed=spawn_speed, spawn_timer=int(rng.integers(spawn_speed + 1)),
                           move_speed=move_speed, move_timer=int(rng.integers(move_speed + 1)),
                           ramp_timer=int(rng.integers(-1, 101)), ramp_index=int(rng.integers(10)),
                           last_action=int(rng.integers(5)), key=int(rng.integers(2**32)), t=int(rng.integers(500))))
    # Crafted: treasure driving onto the standing player (+1); an enemy on the player's cell (the end); a ramp
    # step due (both speeds drop: the ramp index is odd).
    lane = np.zeros(8, dtype=bool)
    lane[2] = True
    states[0].update(player_x=4, player_y=3, alive=lane, thing_x=np.where(lane, 3, 0), rightward=lane.copy(),
                     gold=lane.copy(), move_timer=0, spawn_timer=3)
    states[1].update(player_x=6, player_y=3, alive=lane, thing_x=np.where(lane, 6, 0), rightward=lane.copy(),
                     gold=np.zeros(8, dtype=bool), move_timer=2, spawn_timer=3)
    states[2].update(ramp_timer=-1, ramp_index=3, spawn_speed=7, move_speed=4)
    return states


def _seaquest_states(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)

    def objects(count: int, size: int, timers: dict[str, int], rows: tuple[int, int] = (1, 9)) -> dict:
        on = np.arange(size) < count
        out = {"on": on, "x": np.where(on, rng.integers(0, 10, size), 0),
               "y": np.where(on, rng.integers(*rows, size), 0), "right": on & (rng.random(size) < 0.5)}
        out.update({name: np.where(on, rng.integers(0, top + 1, size), 0) for name, top in timers.items()})
        return out

    states = []
    for i in range(n):
        x, right = int(rng.integers(10)), bool(rng.integers(2))
        right = right if 0 < x < 9 else x == 9  # the back of the submarine inside the grid, as play keeps it
        move_speed, spawn_speed = int(rng.integers(2, 6)), int(rng.integers(1, 21))
        lists = {"fb": objects(int(rng.integers(0, 3)), 3, {}, (0, 9)),
                 "eb": objects(int(rng.integers(0, 12)), 32, {}),
                 "fish": objects(int(rng.integers(0, 12)), 32, {"timer": move_speed}),
                 "subs": objects(int(rng.integers(0, 8)), 32, {"timer": move_speed, "shot": 10}),
                 "div": objects(int(rng.integers(0, 4)), 4, {"timer": 5})}
        state = dict(sub_x=x, sub_y=int(rng.integers(0, 9)), sub_right=right, oxygen=int(rng.integers(0, 201)),
                     diver_count=int(rng.integers(-1, 7)), e_spawn_speed=spawn_speed,
                     e_spawn_timer=int(rng.integers(0, spawn_speed + 1)), d_spawn_timer=int(rng.integers(0, 31)),
                     move_speed=move_speed, ramp_index=int(rng.integers(0, 10)), shot_timer=int(rng.integers(0, 6)),
                     surface=bool(rng.integers(2)), last_action=int(rng.integers(6)), key=int(rng.integers(2**32)),
                     t=int(rng.integers(500)))
        state.update({f"{prefix}_{name}": value for prefix, fields in lists.items() for name, value in fields.items()})
        states.append(state)
    empty = {k: np.zeros_like(v) for k, v in states[0].items() if isinstance(v, np.ndarray)}
    # Crafted: reaching the surface with six divers (7 points for 150 oxygen; the count is left at -1, and the
    # ramp speeds enemies up); a bullet moving onto a fish (+1); out of oxygen under water (the end); an enemy
    # submarine leaving the grid as its shot is due (its bullet is dropped with it).
    states[0].update(empty, sub_x=5, sub_y=0, sub_right=False, surface=False, diver_count=6, oxygen=150,
                     e_spawn_speed=9, move_speed=4, ramp_index=1, e_spawn_timer=5, d_spawn_timer=5)
    states[1].update(empty, sub_x=2, sub_y=4, sub_right=True, e_spawn_timer=5, d_spawn_timer=5, surface=False,
                     oxygen=100, fb_on=np.arange(3) < 1, fb_x=np.array([3, 0, 0]), fb_y=np.array([4, 0, 0]),
                     fb_right=np.array([True, False, False]), fish_on=np.arange(32) < 1,
                     fish_x=np.eye(32, dtype=np.int64)[0] * 4, fish_y=np.eye(32, dtype=np.int64)[0] * 4,
                     fish_timer=np.eye(32, dtype=np.int64)[0] * 3)
    states[2].update(empty, sub_x=5, sub_y=3, sub_right=False, oxygen=0, surface=False, e_spawn_timer=5,
                     d_spawn_timer=5, diver_count=2)
    states[3].update(empty, sub_x=5, sub_y=3, sub_right=False, oxygen=100, surface=False, e_spawn_timer=5,
                     d_spawn_timer=5, subs_on=np.arange(32) < 1, subs_x=np.eye(32, dtype=np.int64)[0] * 9,
                     subs_y=np.eye(32, dtype=np.int64)[0] * 6, subs_right=np.arange(32) < 1)
    return states


@pytest.mark.parametrize("cls, states", [(BreakoutEnv, _breakout_states), (SpaceInvadersEnv, _invaders_states),
                                         (FreewayEnv, _freeway_states), (AsterixEnv, _asterix_states),
                                         (SeaquestEnv, _seaquest_states)])
def test_every_transition_from_injected_states_equals_minatars(cls, states):
    env = cls(64, seed=2, sticky_action_prob=0.25)
    start = states(64, seed=3)
    report = check_reference_parity(env, *reference_for(env), to_inner=lambda s: s, initial_states=start,
                                    num_steps=80)
    assert report.transitions == 64 * 80
    # The crafted rows do what they were made for (the reference agreed above).
    env = cls(64, seed=2, sticky_action_prob=0.0)
    env.set_rows(torch.arange(64), stack_rows(env.state.inner, start))
    # Freeway's chicken is told to go up (its minimal action 1); the other games' rows take no-ops.
    step = env.step(torch.full((64,), int(cls is FreewayEnv), dtype=torch.long))
    inner = env.state.inner
    if cls is BreakoutEnv:
        assert int(inner.bricks[0].sum()) == 30 and not bool(step.terminated[0])   # a new wall
        assert bool(step.terminated[1])                                            # missed
        assert (int(inner.ball_x[2]), int(inner.ball_y[2]), int(inner.ball_dir[2])) == (1, 8, 0)
    elif cls is AsterixEnv:
        assert float(step.reward[0]) == 1.0 and not bool(inner.alive[0].any())   # the treasure was taken
        assert bool(step.terminated[1])                                            # caught by the enemy
        assert (int(inner.spawn_speed[2]), int(inner.move_speed[2]), int(inner.ramp_index[2])) == (6, 3, 4)
    elif cls is SeaquestEnv:
        assert float(step.reward[0]) == 7.0 and int(inner.diver_count[0]) == -1 and int(inner.oxygen[0]) == 200
        assert (int(inner.e_spawn_speed[0]), int(inner.move_speed[0]), int(inner.ramp_index[0])) == (8, 3, 2)
        assert float(step.reward[1]) == 1.0 and not bool(inner.fish_on[1].any()) and not bool(inner.fb_on[1].any())
        assert bool(step.terminated[2]) and not bool(step.terminated[[0, 1, 3]].any())
        assert not bool(inner.subs_on[3].any()) and not bool(inner.eb_on[3].any())
    elif cls is FreewayEnv:
        assert float(step.reward[0]) == 1.0 and int(inner.pos[0]) == 9       # scored, back at the bottom
        assert int(inner.pos[1]) == 9 and float(step.reward[1]) == 0.0       # run over
        assert bool(step.terminated[2]) and not bool(step.terminated[3:].any())
    else:
        assert float(step.reward[0]) == 1.0 and int(inner.aliens[0].sum()) == 24
        assert int(inner.move_interval[0]) == 8 and int(inner.ramp_index[0]) == start[0]["ramp_index"] + 1


@pytest.mark.parametrize("env_id, cls, channels, actions, limit", [
    ("MinAtar-Breakout-v1", BreakoutEnv, 4, 3, 1000), ("MinAtar-SpaceInvaders-v1", SpaceInvadersEnv, 6, 4, 1000),
    ("MinAtar-Freeway-v1", FreewayEnv, 7, 3, 2501), ("MinAtar-Asterix-v1", AsterixEnv, 4, 5, 1000),
    ("MinAtar-Seaquest-v1", SeaquestEnv, 10, 6, 1000)])
def test_registered_ids_frames_and_the_contract(env_id, cls, channels, actions, limit):
    env = make(env_id, num_envs=4, seed=0)
    assert isinstance(env, cls) and env.spec.num_actions == actions
    obs = env.observe().obs
    assert obs.dtype == torch.bool and tuple(obs.shape) == (4, 10, 10, channels)
    assert env.spec.obs_dtypes == {"policy": "bool"} and env.spec.max_episode_steps == limit
    # Seaquest's eager step costs several times another game's (its lists' fields are separate tensors): half the
    # steps, its transitions checked against minatar's below all the same.
    reports = check_env(cls, num_envs=6, num_steps=20 if cls is SeaquestEnv else 40, seed=3)
    assert all(r.transitions > 0 for r in reports.values())


def test_the_references_row_draws_are_hash_uniforms():
    """The reference computes our draws one row at a time in plain integers: the same numbers as the tensor hash."""
    g = torch.Generator().manual_seed(0)
    keys = torch.cat([torch.randint(0, 2**32, (200,), generator=g), torch.tensor([0, 2**32 - 1])])
    counters = torch.cat([torch.randint(0, 5000, (200,), generator=g), torch.tensor([2**32 - 1, 0])])
    for stream, size in ((0, 1), (1, 3), (2, 16), (7, 2)):
        rows = np.stack([row_uniforms(int(k), int(c), stream, size) for k, c in zip(keys, counters)])
        assert np.array_equal(rows, hash_uniform(keys, counters, stream, size).numpy())
    # numpy integers (a reference state's fields) give the same numbers: no int64 overflow in the products
    assert np.array_equal(row_uniforms(np.int64(2**32 - 1), np.int64(7), 1, 3),
                          hash_uniform(torch.tensor([2**32 - 1]), torch.tensor([7]), 1, 3)[0].numpy())


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="sticky_action_prob must be in"):
        BreakoutEnv(2, sticky_action_prob=1.5)
    with pytest.raises((ValueError, TypeError), match="difficulty_ramping"):
        SpaceInvadersEnv(2, difficulty_ramping="yes")


def test_an_episode_films_as_coloured_cells(tmp_path):
    pytest.importorskip("imageio")
    from rl_gpu.interop.video import record_episode
    from rl_gpu.nn.actor_critic import UniformRandomPolicy

    env = BreakoutEnv(2, seed=0)
    frame = env.render_frame(0)
    assert frame.shape == (160, 160, 3) and frame.dtype == np.uint8
    assert (frame[9 * 16 + 8, int(env.state.inner.pos[0]) * 16 + 8] != 0).any()   # the paddle is drawn
    result = record_episode(UniformRandomPolicy(), env, tmp_path / "b.mp4", max_steps=30)
    assert result.frames == result.steps + 1 and (tmp_path / "b.mp4").stat().st_size > 0
