"""What Go1-Rough-v0's curriculum rule does to a robot that follows every command exactly.

A perfect tracker's episode is drawn from the task's own command distribution (``Go1RoughParams``: ranges, the
share of zero commands, the resampling interval, the episode's length) and integrated in the plane: its
displacement is the commanded path's. Two measures of "the distance its commands asked for" are compared (the
rule moves a robot down when it walked less than half of it, and up when it walked farther than half a tile):

- ``last x duration``: the norm of the last planar command times the episode's duration (legged_gym's measure,
  which assumes a straight path, as its heading commands give);
- ``commanded path``: the straight-line displacement of the path the commands trace, turns included (the rule
  Go1-Rough-v0 uses).

For each, the chances to move up and down per episode, and the share of robots in the top third of the levels once
the levels settle (the stationary distribution of the level's Markov chain; a robot that moves up from the top
restarts at a uniformly drawn level, as in legged_gym)::

    python benchmarks/terrain_rule.py [--robots 200000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from rl_gpu.envs.mujoco.quadruped import Go1VelocityEnv
from rl_gpu.envs.mujoco.rough import Go1RoughParams
from rl_gpu.envs.mujoco.terrain import TerrainGrid


def perfect_episodes(p: Go1RoughParams, robots: int, steps: int, dt: float, rng: np.random.Generator):
    """``(walked [R], last_times_duration [R], path [R])``: a perfect tracker's distance from its start, and the two
    measures of the distance asked for, over episodes of ``steps`` steps."""
    low = np.array([p.lin_vel_x[0], p.lin_vel_y[0], p.ang_vel_z[0]])
    high = np.array([p.lin_vel_x[1], p.lin_vel_y[1], p.ang_vel_z[1]])
    position, heading = np.zeros((robots, 2)), np.zeros(robots)
    command = None
    for step in range(steps):
        if step % p.command_resample_steps == 0:
            command = low + (high - low) * rng.uniform(size=(robots, 3))
            command[rng.uniform(size=robots) < p.zero_command_probability] = 0.0
        c, s = np.cos(heading), np.sin(heading)
        position += dt * np.stack((c * command[:, 0] - s * command[:, 1], s * command[:, 0] + c * command[:, 1]), 1)
        heading += dt * command[:, 2]
    walked = np.linalg.norm(position, axis=1)
    return walked, np.linalg.norm(command[:, :2], axis=1) * steps * dt, walked


def stationary_top_share(levels: int, up: float, down: float) -> tuple[float, float]:
    """(mean level, share in the top third) of the level's stationary distribution when every robot moves up with
    chance ``up`` and down with chance ``down`` per episode, at every level."""
    move = np.zeros((levels, levels))
    for level in range(levels):
        if level + 1 < levels:
            move[level, level + 1] += up
        else:
            move[level] += up / levels  # past the top: a uniformly drawn level
        move[level, max(level - 1, 0)] += down
        move[level, level] += 1.0 - up - down
    values, vectors = np.linalg.eig(move.T)
    pi = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
    pi /= pi.sum()
    return float(pi @ np.arange(levels)), float(pi[math.ceil(2 * levels / 3):].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robots", type=int, default=200_000, help="simulated episodes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 1 <= args.robots <= 10_000_000:
        parser.error(f"--robots must be in [1, 10,000,000] (about 100 bytes of state each), got {args.robots}")
    p, grid = Go1RoughParams(), TerrainGrid(levels=Go1RoughParams().terrain_levels)
    steps, dt = Go1VelocityEnv.max_episode_steps, Go1VelocityEnv.frame_skip * 0.004  # scene.xml's 4 ms timestep
    walked, last, path = perfect_episodes(p, args.robots, steps, dt, np.random.default_rng(args.seed))
    print(f"perfect tracker, {args.robots:,} episodes of {steps * dt:.0f} s; up if walked > {grid.tile_size / 2} m, "
          f"down if walked < half the distance asked for; {grid.levels} levels")
    print("| distance asked for | P(up) | P(down) | stationary mean level | stationary share in the top third |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, asked in (("last x duration", last), ("commanded path", path)):
        up = walked > grid.tile_size / 2
        down = (walked < 0.5 * asked - 1e-9) & ~up
        mean, top = stationary_top_share(grid.levels, float(up.mean()), float(down.mean()))
        print(f"| {name} | {up.mean():.3f} | {down.mean():.3f} | {mean:.2f} | {top:.3f} |")


if __name__ == "__main__":
    main()
