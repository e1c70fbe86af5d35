"""MAPPO on VMAS, side by side: rl_gpu's and BenchMARL's, the same settings, the same frame budget, sides
alternating seed by seed.

BenchMARL (TorchRL-based, ``pip install benchmarl``) runs in its own virtual environment, given by
``--benchmarl-python``; nothing of it is imported here. Both sides train on the CPU with one thread on the same
VMAS task (BenchMARL's task settings for it: navigation has 3 agents, ``shared_rew`` off) and the settings below
(BenchMARL's MAPPO defaults where they exist: lambda 0.9, clip 0.2, no entropy bonus, 256-256 tanh networks, a
gradient-norm clip of 5; its experiment's Adam epsilon is its own), then evaluate their last policy on
``--eval-episodes`` fresh episodes with deterministic actions. A frame is one world step (BenchMARL's unit).

    OMP_NUM_THREADS=1 python benchmarks/marl_side_by_side.py --benchmarl-python /path/to/venv/bin/python \\
        --scenario navigation --frames 300000 --seeds 0 1 2

Prints one row per (seed, side) as it goes, then the table: mean agent return per seed, IQM over seeds with a
bootstrap 95% CI, training wall seconds and frames per second.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

TASKS = {
    # BenchMARL's task settings (benchmarl/conf/task/vmas/*.yaml), written as rl_gpu id parameters.
    "navigation": "n_agents=3&collisions=true&agents_with_same_goal=1&split_goals=false&observe_all_goals=false"
                  "&shared_rew=false&lidar_range=0.35&agent_radius=0.1",
    "sampling": "n_agents=3&shared_rew=false&n_gaussians=3&lidar_range=0.2&cov=0.05&collisions=true"
                "&spawn_same_pos=false",
    "balance": "n_agents=4&random_package_pos_on_line=true&package_mass=5",
    "transport": "n_agents=4&n_packages=1&package_width=0.15&package_length=0.15&package_mass=50",
}

BENCHMARL_RUN = r'''
import json, sys, time
import torch
torch.set_num_threads(1)
from benchmarl.algorithms import MappoConfig
from benchmarl.environments import VmasTask
from benchmarl.experiment import Experiment, ExperimentConfig
from benchmarl.models.mlp import MlpConfig
from torchrl.envs.utils import ExplorationType, set_exploration_type

a = json.loads(sys.argv[1])
config = ExperimentConfig.get_from_yaml()
config.sampling_device = config.train_device = config.buffer_device = "cpu"
config.gamma, config.lr = a["gamma"], a["lr"]
config.clip_grad_norm, config.clip_grad_val = True, a["max_grad_norm"]
config.max_n_frames = a["frames"]
config.on_policy_collected_frames_per_batch = a["num_envs"] * a["num_steps"]
config.on_policy_n_envs_per_worker = a["num_envs"]
config.on_policy_n_minibatch_iters = a["epochs"]
config.on_policy_minibatch_size = a["num_envs"] * a["num_steps"] // a["minibatches"]
config.evaluation = False
config.evaluation_episodes = a["eval_episodes"]
config.loggers = []
config.create_json = False
config.checkpoint_interval = 0
config.save_folder = a["folder"]
task = getattr(VmasTask, a["scenario"].upper()).get_from_yaml()
task.config["max_steps"] = a["num_steps"]
algorithm = MappoConfig.get_from_yaml()
algorithm.lmbda = a["gae_lambda"]
algorithm.use_tanh_normal = a["tanh_normal"]
model = MlpConfig.get_from_yaml()
model.num_cells = list(a["hidden"])
experiment = Experiment(task=task, algorithm_config=algorithm, model_config=model, critic_model_config=model,
                        seed=a["seed"], config=config)
start = time.perf_counter()
experiment.run()
seconds = time.perf_counter() - start
env = experiment.test_env  # evaluation_episodes worlds of the task, seeded apart from training
with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
    td = env.rollout(a["num_steps"], policy=experiment.policy, break_when_any_done=False)
reward = td.get(("next", "agents", "reward")).squeeze(-1)          # [E, T, M]
done = td.get(("next", "done")).reshape(reward.shape[:2])           # [E, T]
first = (done.long().cumsum(1) - done.long()) == 0                   # steps up to each world's first episode end
per_episode = (reward * first[..., None]).sum(1).mean(-1)            # [E]: the mean agent's return
print(json.dumps({"return": float(per_episode.mean()), "seconds": seconds}))
'''


def ours(args: argparse.Namespace, seed: int, folder: Path) -> dict:
    env_id = f"vmas:{args.scenario}?{TASKS[args.scenario]}"
    updates = args.frames // (args.num_envs * args.num_steps)
    command = [sys.executable, "-m", "rl_gpu", "train", "--env", env_id, "--algo", "mappo", "--device", "cpu",
               "--seeds", str(seed), "--output", str(folder), "--num-envs", str(args.num_envs),
               "--num-steps", str(args.num_steps), "--max-updates", str(updates), "--min-updates", str(updates),
               "--total-timesteps", str(updates * args.num_envs * args.num_steps), "--eval-every", str(updates),
               "--eval-episodes", "16", "--final-eval-episodes", "16", "--learning-rate", str(args.lr),
               "--no-anneal-lr", "--hidden-sizes", *map(str, args.hidden), "--gamma", str(args.gamma),
               "--gae-lambda", str(args.gae_lambda), "--update-epochs", str(args.epochs),
               "--num-minibatches", str(args.minibatches), "--ent-coef", "0", "--max-grad-norm",
               str(args.max_grad_norm), "--quiet", *args.extra.split()]
    subprocess.run(command, check=True, capture_output=True, text=True)
    records = [json.loads(line) for line in (folder / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()]
    seconds = max(r["time"] for r in records if "time" in r)  # the run's clock: collection, updates, validations
    evaluated = subprocess.run([sys.executable, "-m", "rl_gpu", "evaluate", str(folder / f"seed-{seed}" / "last.pt"),
                                "--episodes", str(args.eval_episodes), "--seed", str(seed + 10_000)],
                               check=True, capture_output=True, text=True).stdout
    mean = float(re.search(r"policy:\s+mean return (-?[\d.]+)", evaluated).group(1))
    return {"return": mean, "seconds": seconds}


def benchmarl(args: argparse.Namespace, seed: int, folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"scenario": args.scenario, "seed": seed, "frames": args.frames, "num_envs": args.num_envs,
                "num_steps": args.num_steps, "epochs": args.epochs, "minibatches": args.minibatches,
                "lr": args.lr, "gamma": args.gamma, "gae_lambda": args.gae_lambda, "hidden": args.hidden,
                "max_grad_norm": args.max_grad_norm, "eval_episodes": args.eval_episodes, "folder": str(folder),
                "tanh_normal": not args.benchmarl_normal}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([args.benchmarl_python, "-c", BENCHMARL_RUN, json.dumps(settings)], check=True,
                         capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def iqm_ci(values: list[float], rng: np.random.Generator) -> tuple[float, float, float]:
    def iqm(x: np.ndarray) -> float:
        x = np.sort(x)
        k = len(x) // 4
        return float(x[k:len(x) - k].mean()) if len(x) > 2 else float(x.mean())

    x = np.asarray(values)
    boots = [iqm(rng.choice(x, len(x))) for _ in range(2000)]
    return iqm(x), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmarl-python", required=True, help="python of a virtual environment with benchmarl")
    parser.add_argument("--scenario", choices=sorted(TASKS), default="navigation")
    parser.add_argument("--frames", type=int, default=300_000, help="world steps of training per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-envs", type=int, default=128)
    parser.add_argument("--num-steps", type=int, default=100, help="steps per batch = the episode's length")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--minibatches", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.9)
    parser.add_argument("--max-grad-norm", type=float, default=5.0)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--extra", default="", help="more rl-gpu train flags for rl_gpu's side (an ablation), e.g. "
                                                     "'--no-norm-adv --no-value-norm'")
    parser.add_argument("--benchmarl-normal", action="store_true",
                        help="BenchMARL's policy samples a plain normal (use_tanh_normal False) instead of its "
                             "default tanh-squashed one (an ablation)")
    parser.add_argument("--sides", nargs="+", choices=("rl_gpu", "BenchMARL"), default=["rl_gpu", "BenchMARL"])
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"rl_gpu": [], "BenchMARL": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate(args.seeds):
            sides = [(name, run) for name, run in (("rl_gpu", ours), ("BenchMARL", benchmarl)) if name in args.sides]
            for name, run in sides if i % 2 == 0 else sides[::-1]:
                row = run(args, seed, Path(tmp) / f"{name}-{seed}")
                results[name].append(row)
                print(f"seed {seed} {name}: return {row['return']:.3f}, {row['seconds']:.0f} s "
                      f"({args.frames / row['seconds']:,.0f} frames/s), load {os.getloadavg()[0]:.2f}", flush=True)
    rng = np.random.default_rng(0)
    print(f"\nMAPPO on vmas:{args.scenario}, {args.frames:,} frames per run, seeds {args.seeds}")
    print("| side | returns per seed | IQM [95% CI] | training s per seed | frames/s (median) |")
    print("| --- | --- | --- | --- | ---: |")
    if args.extra:
        print(f"rl_gpu's extra flags: {args.extra}")
    for name, rows in results.items():
        if not rows:
            continue
        m, lo, hi = iqm_ci([r["return"] for r in rows], rng)
        seconds = [r["seconds"] for r in rows]
        returns = ", ".join(f"{r['return']:.3f}" for r in rows)
        times = ", ".join(f"{s:.0f}" for s in seconds)
        print(f"| {name} | {returns} | {m:.3f} [{lo:.3f}, {hi:.3f}] | {times} | "
              f"{args.frames / float(np.median(seconds)):,.0f} |")
    if all(results.values()):
        ratio = float(np.median([r["seconds"] for r in results["BenchMARL"]]) /
                      np.median([r["seconds"] for r in results["rl_gpu"]]))
        print(f"BenchMARL's training time / rl_gpu's (medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
