"""Wall time to solve CartPoleNoVel-v1 (CartPole without its velocities; mean return >= 475 over 20 deterministic
episodes) with an LSTM policy: rl_gpu's recurrent PPO (the id's preset with ``--memory lstm``) against
SB3-contrib's RecurrentPPO with RL-Zoo's ``ppo_lstm`` hyper-parameters for that id, in one run, several seeds.

Protocol, identical for both libraries:

- each (library, seed) runs in its own fresh process, one torch thread; the libraries alternate seed by seed;
- the clock starts at the first environment step and stops when an evaluation first reaches 475; it includes
  every evaluation;
- an evaluation is 20 episodes with the deterministic action, the memory carried through each episode from its
  initial state, run at the first rollout boundary at or after every ``--eval-every`` environment steps;
- budget: rl_gpu ``--budget`` environment steps (its preset's 1M by default); SB3-contrib RL-Zoo's 100,000 (its
  ``n_timesteps``, whose learning-rate and clipping schedules run over them), or ``--sb3-budget``.

SB3's task is Gymnasium's CartPole-v1 with observation indices 1 and 3 removed (RL-Zoo's CartPoleNoVel-v1),
observations normalised (VecNormalize, as RL-Zoo's ``normalize: true``); rl_gpu's is its own CartPoleNoVel-v1
(checked step for step against the full task). Needs ``sb3-contrib`` (``pip install sb3-contrib``).

    OMP_NUM_THREADS=1 python benchmarks/recurrent_side_by_side.py --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from solve_rule import solve_callback, train_until_solved

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = 475.0
EVAL_EPISODES = 20

# RL-Zoo (rl-baselines3-zoo, hyperparams/ppo_lstm.yml) CartPoleNoVel-v1.
ZOO = {"n_envs": 8, "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20,
       "ent_coef": 0.0, "learning_rate": 0.001, "clip_range": 0.2, "lstm_hidden_size": 64, "net_arch": 64}


def worker_rl_gpu(seed: int, eval_every: int, budget: int) -> dict:
    import dataclasses

    import torch

    from rl_gpu.algos.base import Setup
    from rl_gpu.algos.registry import make_algorithm
    from rl_gpu.cli.presets import preset_config
    from rl_gpu.envs.registry import make

    torch.set_num_threads(1)
    config = dataclasses.replace(preset_config("CartPoleNoVel-v1"), memory="lstm", seeds=(seed,))
    torch.manual_seed(seed)
    env = make("CartPoleNoVel-v1", num_envs=config.num_envs, seed=seed, validate_actions=False)
    setup = Setup(env=env, seed=seed, learning_rate=config.learning_rate, anneal_lr=config.anneal_lr,
                  num_steps=config.num_steps, hidden_sizes=tuple(config.hidden_sizes), memory_size=config.memory_size,
                  lstm=True, normalize_obs=config.normalize_obs, compile="off")
    algo = make_algorithm("ppo", setup, config.algo_config())

    def evaluate(eval_seed: int) -> float:
        episodes = make("CartPoleNoVel-v1", num_envs=EVAL_EPISODES, seed=eval_seed, autoreset=False)
        policy, step = algo.policy, episodes.observe()
        state = policy.initial_state(EVAL_EPISODES)
        with torch.inference_mode():
            for _ in range(episodes.max_episode_steps):
                out, state = policy.act_with_state(step.obs, state, deterministic=True)
                step = episodes.step(out.action)
                if bool(episodes.state.done.all()):
                    break
        return float(episodes.state.episode_return.mean())

    per_iteration = config.num_envs * config.num_steps
    updates = 0

    def iterate() -> int:
        nonlocal updates
        algo.set_progress(min(updates / config.max_updates, 1.0))  # updates done, as rl-gpu train
        algo.iterate()
        updates += 1
        return per_iteration

    result = train_until_solved(iterate, lambda k: evaluate(10_000 * seed + k), eval_every, budget, THRESHOLD)
    return {"library": "rl_gpu", "seed": seed, **result}


def worker_sb3(seed: int, eval_every: int, budget: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    z = ZOO

    class NoVelocity(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            high = env.observation_space.high[[0, 2]]
            self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

        def observation(self, obs):
            return obs[[0, 2]].astype(np.float32)

    def env_fn():
        return NoVelocity(gym.make("CartPole-v1"))

    env = VecNormalize(make_vec_env(env_fn, n_envs=z["n_envs"], seed=seed), norm_obs=True, norm_reward=False)
    eval_env = VecNormalize(make_vec_env(env_fn, n_envs=1, seed=10_000 + seed), norm_obs=True, norm_reward=False,
                            training=False)

    def linear(initial):
        return lambda progress_remaining: progress_remaining * initial

    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=z["n_steps"], batch_size=z["batch_size"], gae_lambda=z["gae_lambda"],
        gamma=z["gamma"], n_epochs=z["n_epochs"], ent_coef=z["ent_coef"], learning_rate=linear(z["learning_rate"]),
        clip_range=linear(z["clip_range"]), seed=seed, device="cpu", verbose=0,
        policy_kwargs=dict(ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=z["lstm_hidden_size"],
                           enable_critic_lstm=True, net_arch=dict(pi=[z["net_arch"]], vf=[z["net_arch"]])))

    def evaluate(model) -> float:
        eval_env.obs_rms = env.obs_rms  # the training statistics, frozen
        return evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)[0]

    callback = solve_callback(evaluate, eval_every, THRESHOLD)
    start = time.perf_counter()
    model.learn(total_timesteps=budget, callback=callback)
    import sb3_contrib

    return {"library": "sb3_contrib", "seed": seed, "solved": callback.solved_at is not None,
            "env_steps": callback.solved_at or model.num_timesteps, "train_seconds": time.perf_counter() - start,
            "eval_seconds": callback.eval_seconds, "evaluations": callback.history,
            "version": sb3_contrib.__version__}


def run_worker(library: str, seed: int, args: argparse.Namespace) -> dict:
    budget = args.budget if library == "rl_gpu" else args.sb3_budget
    cmd = [sys.executable, __file__, "--worker", library, "--seed", str(seed), "--eval-every", str(args.eval_every),
           "--budget", str(budget)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{library} seed {seed} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--eval-every", type=int, default=8192, help="environment steps between evaluations")
    parser.add_argument("--budget", type=int, default=1_000_000, help="rl_gpu's environment steps at most")
    parser.add_argument("--sb3-budget", type=int, default=100_000, help="SB3-contrib's environment steps")
    parser.add_argument("--output", type=Path, default=ROOT / "artifacts" / "recurrent_side_by_side.json")
    parser.add_argument("--worker", choices=["rl_gpu", "sb3_contrib"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        work = worker_rl_gpu if args.worker == "rl_gpu" else worker_sb3
        print(json.dumps(work(args.seed, args.eval_every, args.budget)))
        return 0
    results = []
    for seed in args.seeds:
        for library in ("rl_gpu", "sb3_contrib"):
            r = run_worker(library, seed, args)
            results.append(r)
            print(f"{library:12s} seed {seed}: {'solved' if r['solved'] else 'NOT solved'} at {r['env_steps']:,} "
                  f"steps in {r['train_seconds']:.1f} s (evaluations {r['eval_seconds']:.1f} s)", flush=True)
    for library in ("rl_gpu", "sb3_contrib"):
        mine = [r for r in results if r["library"] == library]
        solved = [r["train_seconds"] for r in mine if r["solved"]]
        median = statistics.median(solved) if solved else float("nan")
        print(f"{library:12s}: solved {len(solved)}/{len(mine)}; median seconds to solve {median:.1f}")
    ours = [r["train_seconds"] for r in results if r["library"] == "rl_gpu" and r["solved"]]
    theirs = [r["train_seconds"] for r in results if r["library"] == "sb3_contrib" and r["solved"]]
    if ours and theirs:
        print(f"median time ratio rl_gpu / sb3_contrib: {statistics.median(ours) / statistics.median(theirs):.2f}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
