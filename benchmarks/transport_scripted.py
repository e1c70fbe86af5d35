"""A scripted pusher on ``vmas:transport``: what a policy that has learnt the task can at least reach.

Each agent heads for the point just behind the package (on the side away from the goal) and, once there, pushes
towards the goal. It reads only the agent's own observation (VMAS transport: the package's offset from its goal
and from the agent), so a shared actor could represent it. Prints the mean agent return of the first episode (100 steps at most)
over ``--episodes`` fresh worlds, next to a uniform random policy's.

    OMP_NUM_THREADS=1 python benchmarks/transport_scripted.py --episodes 256
"""

from __future__ import annotations

import argparse

import torch

from rl_gpu.envs.registry import make


def pusher(obs: torch.Tensor, behind: float = 0.12, reach: float = 0.05) -> torch.Tensor:
    """``[N, M, 2]`` forces from ``[N, M, 11]`` transport observations (pos, vel, package - goal, package - agent,
    package vel, on goal)."""
    away = torch.nn.functional.normalize(obs[..., 4:6], dim=-1)  # from the goal towards the package
    target = obs[..., 6:8] + behind * away  # the point behind the package, relative to the agent
    there = target.norm(dim=-1, keepdim=True) < reach
    return torch.where(there, -away, torch.nn.functional.normalize(target, dim=-1))


def mean_return(policy, episodes: int, seed: int) -> float:
    env = make("vmas:transport", num_envs=episodes, seed=seed, max_episode_steps=100)
    obs, total = env.reset().obs, 0.0
    running = torch.ones(episodes, 1, dtype=torch.bool)  # counts each world's first episode only
    generator = torch.Generator().manual_seed(seed)
    for _ in range(100):
        step = env.step(policy(obs, generator))
        obs, total = step.obs, total + step.reward * running
        running = running & ~(step.terminated | step.truncated)[:, None]
    return float(total.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    scripted = mean_return(lambda obs, g: pusher(obs), args.episodes, args.seed)
    uniform = mean_return(lambda obs, g: torch.rand(*obs.shape[:-1], 2, generator=g) * 2 - 1, args.episodes,
                          args.seed)
    print(f"vmas:transport, {args.episodes} episodes of 100 steps: mean agent return scripted pusher {scripted:.2f}, "
          f"uniform random {uniform:.2f}")


if __name__ == "__main__":
    main()
