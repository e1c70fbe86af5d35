"""Wall time to solve a task without its velocities with an LSTM policy: rl_gpu's recurrent PPO (the id's preset with
``--memory lstm``) against SB3-contrib's RecurrentPPO with RL-Zoo's ``ppo_lstm`` hyper-parameters for that id, in
one run, several seeds. ``--env CartPoleNoVel-v1`` (solved: a mean return >= 475 over 20 deterministic episodes)
or ``PendulumNoVel-v1`` (>= -200).

Protocol, identical for both libraries:

- each (library, seed) runs in its own fresh process, one torch thread; the libraries alternate seed by seed;
- the clock starts at the first environment step and stops when an evaluation first reaches the threshold; it
  includes every evaluation;
- an evaluation is 20 episodes with the deterministic action, the memory carried through each episode from its
  initial state, run at the first rollout boundary at or after every ``--eval-every`` environment steps;
- budget: rl_gpu ``--budget`` environment steps (1M by default); SB3-contrib RL-Zoo's 100,000 (its
  ``n_timesteps``, over which CartPole's learning-rate and clipping schedules run), or ``--sb3-budget``.

SB3's task is Gymnasium's CartPole-v1 with observation indices 1 and 3 removed (RL-Zoo's CartPoleNoVel-v1),
observations normalised (VecNormalize, as RL-Zoo's ``normalize: true``), or Pendulum-v1 with index 2 removed
(PendulumNoVel-v1, not normalised; gSDE as RL-Zoo's settings); rl_gpu's are its own ids (checked step for step
against the full tasks). SB3's LSTM and layers are 64 wide, as rl_gpu's. Needs ``sb3-contrib``.

    OMP_NUM_THREADS=1 python benchmarks/recurrent_side_by_side.py --seeds 1 2 3
    OMP_NUM_THREADS=1 python benchmarks/recurrent_side_by_side.py --env PendulumNoVel-v1 --seeds 1 2 3
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
EVAL_EPISODES = 20

# RL-Zoo (rl-baselines3-zoo, hyperparams/ppo_lstm.yml): each id's settings ("linear": the learning rate and the
# clipping decay to 0 over SB3's budget; RecurrentPPO's default minibatch of 128 where the file sets none), the
# Gymnasium task and the observation indices RL-Zoo's NoVel wrapper keeps.
TASKS = {
    "CartPoleNoVel-v1": {
        "threshold": 475.0, "gym_id": "CartPole-v1", "keep": [0, 2], "normalize": True,
        "zoo": {"n_envs": 8, "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20,
                "ent_coef": 0.0, "learning_rate": 0.001, "clip_range": 0.2, "linear": True}},
    "PendulumNoVel-v1": {
        "threshold": -200.0, "gym_id": "Pendulum-v1", "keep": [0, 1], "normalize": False,
        "zoo": {"n_envs": 4, "n_steps": 1024, "batch_size": 128, "gae_lambda": 0.95, "gamma": 0.9, "n_epochs": 10,
                "ent_coef": 0.0, "learning_rate": 0.001, "clip_range": 0.2, "linear": False,
                "sde": {"use_sde": True, "sde_sample_freq": 4}}},
}
WIDTH = 64  # both libraries' LSTM and layer width


def worker_rl_gpu(env_id: str, seed: int, eval_every: int, budget: int) -> dict:
    import dataclasses

    import torch

    from rl_gpu.algos.base import Setup
    from rl_gpu.algos.registry import make_algorithm
    from rl_gpu.cli.presets import preset_config
    from rl_gpu.envs.registry import make

    torch.set_num_threads(1)
    config = dataclasses.replace(preset_config(env_id), memory="lstm", seeds=(seed,))
    torch.manual_seed(seed)
    env = make(env_id, num_envs=config.num_envs, seed=seed, validate_actions=False)
    setup = Setup(env=env, seed=seed, learning_rate=config.learning_rate, anneal_lr=config.anneal_lr,
                  num_steps=config.num_steps, hidden_sizes=tuple(config.hidden_sizes), memory_size=config.memory_size,
                  lstm=True, normalize_obs=config.normalize_obs, compile="off")
    algo = make_algorithm("ppo", setup, config.algo_config())

    def evaluate(eval_seed: int) -> float:
        episodes = make(env_id, num_envs=EVAL_EPISODES, seed=eval_seed, autoreset=False)
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

    result = train_until_solved(iterate, lambda k: evaluate(10_000 * seed + k), eval_every, budget,
                                TASKS[env_id]["threshold"])
    return {"library": "rl_gpu", "seed": seed, **result}


def worker_sb3(env_id: str, seed: int, eval_every: int, budget: int) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    task = TASKS[env_id]
    z, keep = task["zoo"], task["keep"]

    class NoVelocity(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            space = env.observation_space
            self.observation_space = gym.spaces.Box(space.low[keep], space.high[keep], dtype=np.float32)

        def observation(self, obs):
            return obs[keep].astype(np.float32)

    def env_fn():
        return NoVelocity(gym.make(task["gym_id"]))

    env = make_vec_env(env_fn, n_envs=z["n_envs"], seed=seed)
    eval_env = make_vec_env(env_fn, n_envs=1, seed=10_000 + seed)
    if task["normalize"]:
        env = VecNormalize(env, norm_obs=True, norm_reward=False)
        eval_env = VecNormalize(eval_env, norm_obs=True, norm_reward=False, training=False)

    def schedule(initial):
        return (lambda progress_remaining: progress_remaining * initial) if z["linear"] else initial

    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=z["n_steps"], batch_size=z["batch_size"], gae_lambda=z["gae_lambda"],
        gamma=z["gamma"], n_epochs=z["n_epochs"], ent_coef=z["ent_coef"], learning_rate=schedule(z["learning_rate"]),
        clip_range=schedule(z["clip_range"]), seed=seed, device="cpu", verbose=0, **z.get("sde", {}),
        policy_kwargs=dict(ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=WIDTH,
                           enable_critic_lstm=True, net_arch=dict(pi=[WIDTH], vf=[WIDTH])))

    def evaluate(model) -> float:
        if task["normalize"]:
            eval_env.obs_rms = env.obs_rms  # the training statistics, frozen
        return evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)[0]

    callback = solve_callback(evaluate, eval_every, task["threshold"])
    start = time.perf_counter()
    model.learn(total_timesteps=budget, callback=callback)
    import sb3_contrib

    return {"library": "sb3_contrib", "seed": seed, "solved": callback.solved_at is not None,
            "env_steps": callback.solved_at or model.num_timesteps, "train_seconds": time.perf_counter() - start,
            "eval_seconds": callback.eval_seconds, "evaluations": callback.history,
            "version": sb3_contrib.__version__}


def run_worker(library: str, seed: int, args: argparse.Namespace) -> dict:
    budget = args.budget if library == "rl_gpu" else args.sb3_budget
    cmd = [sys.executable, __file__, "--worker", library, "--env", args.env, "--seed", str(seed), "--eval-every",
           str(args.eval_every), "--budget", str(budget)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{library} seed {seed} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=sorted(TASKS), default="CartPoleNoVel-v1")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--eval-every", type=int, default=8192, help="environment steps between evaluations")
    parser.add_argument("--budget", type=int, default=1_000_000, help="rl_gpu's environment steps at most")
    parser.add_argument("--sb3-budget", type=int, default=100_000, help="SB3-contrib's environment steps")
    parser.add_argument("--output", type=Path, help="the results' JSON (artifacts/recurrent_side_by_side_ENV.json)")
    parser.add_argument("--worker", choices=["rl_gpu", "sb3_contrib"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    for flag in ("eval_every", "budget", "sb3_budget"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag.replace('_', '-')} must be a positive number of steps, got {getattr(args, flag)}")
    if args.output is not None and (args.output.is_symlink() or (args.output.exists() and not args.output.is_file())):
        parser.error(f"--output must be a regular file's path (it is overwritten), got {args.output}")
    if args.worker:
        work = worker_rl_gpu if args.worker == "rl_gpu" else worker_sb3
        print(json.dumps(work(args.env, args.seed, args.eval_every, args.budget)))
        return 0
    results = []
    for seed in args.seeds:
        for library in ("rl_gpu", "sb3_contrib"):
            r = {"env": args.env, **run_worker(library, seed, args)}
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
    output = args.output or ROOT / "artifacts" / f"recurrent_side_by_side_{args.env}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
