"""Hundreds of agents per world, with and without normalisation (the seed's warning: a reward that works for one
agent, summed over thousands, blows the returns up).

VMAS's ``dropout`` pays every agent the team's energy penalty summed over all agents, so each agent's reward grows
with their number. This trains MAPPO there with ``--n-agents`` agents per world under four settings, reward
normalisation (per agent row) and value normalisation on or off, and prints per setting: the largest absolute
reward of a step, the value loss of the first and last update, whether any metric went non-finite, and the mean
agent return of the first and last updates.

    OMP_NUM_THREADS=1 python benchmarks/marl_scaling.py --n-agents 200 --num-envs 8 --updates 20
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from rl_gpu.algos.base import Setup
from rl_gpu.algos.mappo.algorithm import MAPPO
from rl_gpu.algos.mappo.config import MAPPOConfig
from rl_gpu.envs.registry import make

SETTINGS = {
    "both on": {"norm_reward": True, "value_norm": True},
    "reward norm only": {"norm_reward": True, "value_norm": False},
    "value norm only": {"norm_reward": False, "value_norm": True},
    "both off": {"norm_reward": False, "value_norm": False},
}


def run(name: str, args: argparse.Namespace) -> dict:
    env = make(f"vmas:dropout?n_agents={args.n_agents}", num_envs=args.num_envs, seed=args.seed,
               max_episode_steps=args.num_steps)
    config = MAPPOConfig(ent_coef=0.0, update_epochs=4, num_minibatches=4, **SETTINGS[name])
    setup = Setup(env=env, seed=args.seed, learning_rate=3e-4, num_steps=args.num_steps, hidden_sizes=(64, 64))
    algo = MAPPO.from_setup(setup, config)
    rows, start = [], time.perf_counter()
    for _ in range(args.updates):
        out = algo.iterate()
        rollout = algo.last_rollout
        rows.append({"value_loss": float(out["value_loss"]), "return": float(out["episode_return"]),
                     "max_reward": float(rollout.reward.abs().max()),
                     "finite": all(math.isfinite(float(v)) for v in out.values())})
    return {"name": name, "rows": rows, "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-agents", type=int, default=200)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=50, help="steps per update (= the episode's length)")
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"vmas:dropout, {args.n_agents} agents x {args.num_envs} worlds x {args.num_steps} steps, "
          f"{args.updates} MAPPO updates per setting, seed {args.seed}")
    print("| setting | max abs reward | value loss first -> last | all finite | mean agent return first -> last "
          "| s |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    for name in SETTINGS:
        result = run(name, args)
        rows = result["rows"]
        print(f"| {name} | {max(r['max_reward'] for r in rows):.3g} | {rows[0]['value_loss']:.3g} -> "
              f"{rows[-1]['value_loss']:.3g} | {all(r['finite'] for r in rows)} | {rows[0]['return']:.3g} -> "
              f"{rows[-1]['return']:.3g} | {result['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
