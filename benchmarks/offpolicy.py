"""rl_gpu's SAC against Stable-Baselines3's SAC, side by side in one run: wall time to solve Pendulum-v1, and
gradient updates per second at the same network and batch.

``solve``: mean return >= -200 over 20 deterministic evaluation episodes on fresh environments, evaluated at the
first iteration boundary at or after every ``--eval-every`` environment steps (transitions). The training clock
starts at the first environment step and stops when an evaluation first passes; it includes every evaluation.
Each (library, seed) runs in its own fresh process with one torch thread; the parent also measures each
process's whole wall time (interpreter start to exit, imports included). SB3 uses RL-Zoo's Pendulum-v1 SAC
hyper-parameters (20,000 steps, learning rate 1e-3, SB3's defaults otherwise: one environment, 256x256 networks,
batch 256, 100 random steps, one update per step, buffer 1e6, tau 0.005, gamma 0.99, automatic entropy); rl_gpu
uses its preset (``rl-gpu train --algo sac --env Pendulum-v1``), read from :mod:`rl_gpu.cli.presets`.

``throughput``: gradient updates per second at 256x256 networks and batch 256 on Pendulum-v1 (3 observations,
1 action dimension) from a buffer of 10,000 random transitions: SB3's ``model.train(gradient_steps=K)`` against
rl_gpu's update loop (``learn``: K updates, each sampling, one loss, one backward, one Adam step, Polyak), for
SAC and TD3, alternating rounds in one process so both see the same machine load; medians of the rounds.

SB3 needs the optional extra (``pip install -e '.[bench]'``).

    OMP_NUM_THREADS=1 python benchmarks/offpolicy.py --seeds 1 2 3 4 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from solve_rule import solve_callback

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = -200.0
EVAL_EPISODES = 20
ENV_ID = "Pendulum-v1"
ZOO = {"n_timesteps": 20_000, "learning_rate": 1e-3}
"""RL-Zoo (rl-baselines3-zoo, hyperparams/sac.yml) Pendulum-v1; the rest is SB3's SAC defaults."""


def worker_rl_gpu(seed: int, eval_every: int, algo_name: str, compile_mode: str) -> dict:
    import torch

    from rl_gpu.algos.base import Setup
    from rl_gpu.algos.registry import make_algorithm
    from rl_gpu.cli.presets import preset_config
    from rl_gpu.envs.registry import make
    from rl_gpu.training.evaluation import evaluate_policy

    torch.set_num_threads(1)
    cfg = preset_config(ENV_ID, algo_name)
    torch.manual_seed(seed)
    env = make(ENV_ID, num_envs=cfg.num_envs, seed=seed, validate_actions=False)
    setup = Setup(env=env, seed=seed, learning_rate=cfg.learning_rate, num_steps=cfg.num_steps,
                  hidden_sizes=tuple(cfg.hidden_sizes), normalize_obs=cfg.normalize_obs, compile=compile_mode)
    algo = make_algorithm(algo_name, setup, cfg.algo_config())
    per_iteration = cfg.num_envs * algo.num_steps
    budget = 50_000
    steps, next_eval, history, eval_seconds, solved_at = 0, eval_every, [], 0.0, None

    def make_eval(n, s):
        return make(ENV_ID, num_envs=n, seed=s, validate_actions=False)

    start = time.perf_counter()
    while steps < budget:
        algo.iterate()
        steps += per_iteration
        if steps >= next_eval:
            t = time.perf_counter()
            result = evaluate_policy(algo.policy, make_eval, EVAL_EPISODES, 10_000 * seed + len(history),
                                     num_envs=EVAL_EPISODES, deterministic=True)
            eval_seconds += time.perf_counter() - t
            history.append((steps, result.mean_return))
            while next_eval <= steps:
                next_eval += eval_every
            if result.mean_return >= THRESHOLD:
                solved_at = steps
                break
    train = time.perf_counter() - start
    settings = {"num_envs": cfg.num_envs, "num_steps": algo.num_steps, "learning_rate": cfg.learning_rate,
                "hidden_sizes": list(cfg.hidden_sizes), algo_name: cfg.to_dict()[algo_name]}
    return {"library": f"rl_gpu-{algo_name}", "seed": seed, "solved": solved_at is not None,
            "env_steps": solved_at or steps, "updates": algo.updates_done, "train_seconds": train,
            "eval_seconds": eval_seconds, "evaluations": history, "compile": algo.compile, "settings": settings}


def worker_sb3(seed: int, eval_every: int) -> dict:
    import stable_baselines3
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    env = make_vec_env(ENV_ID, n_envs=1, seed=seed)
    eval_env = make_vec_env(ENV_ID, n_envs=EVAL_EPISODES, seed=10_000 + seed)
    model = SAC("MlpPolicy", env, learning_rate=ZOO["learning_rate"], seed=seed, device="cpu", verbose=0)

    def evaluate(model) -> float:
        return evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)[0]

    callback = solve_callback(evaluate, eval_every, THRESHOLD, per_step=True)
    start = time.perf_counter()
    model.learn(total_timesteps=ZOO["n_timesteps"], callback=callback)
    train = time.perf_counter() - start
    return {"library": "sb3-sac", "seed": seed, "solved": callback.solved_at is not None,
            "env_steps": callback.solved_at or model.num_timesteps, "train_seconds": train,
            "eval_seconds": callback.eval_seconds, "evaluations": callback.history, "settings": ZOO,
            "sb3_version": stable_baselines3.__version__}


def run_worker(library: str, seed: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", library, "--seed", str(seed), "--eval-every", str(args.eval_every),
           "--compile", args.compile]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    process = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{library} seed {seed} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_seconds"] = process
    return result


def measure_solve(args: argparse.Namespace, with_sb3: bool) -> dict:
    libraries = [f"rl_gpu-{a}" for a in args.algos] + (["sb3-sac"] if with_sb3 else [])
    results = []
    for seed in args.seeds:
        for library in libraries:
            r = run_worker(library, seed, args)
            results.append(r)
            print(f"{library:>10} seed {seed}: {'solved' if r['solved'] else 'NOT solved'} at {r['env_steps']:>6,} "
                  f"env steps; training {r['train_seconds']:6.1f} s (evaluations {r['eval_seconds']:.1f} s), "
                  f"whole process {r['process_seconds']:6.1f} s", flush=True)
    summary = {}
    for library in libraries:
        rows = [r for r in results if r["library"] == library]
        summary[library] = {
            "solved": sum(r["solved"] for r in rows), "runs": len(rows),
            "median_train_seconds": statistics.median(r["train_seconds"] for r in rows),
            "median_process_seconds": statistics.median(r["process_seconds"] for r in rows),
            "median_env_steps": statistics.median(r["env_steps"] for r in rows),
        }
    print()
    for library, s in summary.items():
        print(f"{library:>10}: solved {s['solved']}/{s['runs']}; median training {s['median_train_seconds']:.1f} s, "
              f"whole process {s['median_process_seconds']:.1f} s, {s['median_env_steps']:,.0f} env steps")
    if with_sb3:
        for library in libraries[:-1]:
            for key, name in (("median_train_seconds", "training"), ("median_process_seconds", "whole process")):
                ratio = summary[library][key] / summary["sb3-sac"][key]
                print(f"{library} / SB3 SAC median {name} time: {ratio:.3f}")
        if summary["sb3-sac"]["solved"] < summary["sb3-sac"]["runs"]:
            print("note: an unsolved SB3 run counts with its time for the Zoo's full 20,000-step budget")
    return {"results": results, "summary": summary}


def _ours(algo_name: str, compile_mode: str, batch: int):
    from rl_gpu.algos.base import Setup
    from rl_gpu.algos.registry import make_algorithm
    from rl_gpu.algos.sac import SACConfig
    from rl_gpu.algos.td3 import TD3Config
    from rl_gpu.envs.registry import make

    env = make(ENV_ID, num_envs=1, seed=0, validate_actions=False)
    # Learning starts after more transitions than the one iteration collects: it makes no update.
    config = (SACConfig if algo_name == "sac" else TD3Config)(learning_starts=20_000, batch_size=batch)
    setup = Setup(env=env, seed=0, hidden_sizes=(256, 256), num_steps=10_000, compile=compile_mode)
    algo = make_algorithm(algo_name, setup, config)
    algo.iterate()  # 10,000 random transitions, no update (learning starts after them)

    return algo.update


def _sb3(algo_name: str, batch: int):
    import gymnasium as gym
    from stable_baselines3 import SAC, TD3

    cls = SAC if algo_name == "sac" else TD3
    model = cls("MlpPolicy", gym.make(ENV_ID), learning_rate=1e-3, learning_starts=10_000, batch_size=batch,
                policy_kwargs={"net_arch": [256, 256]}, device="cpu", seed=0, verbose=0)
    model.learn(10_000)  # 10,000 random transitions, no update (learning starts after them)

    def run(count: int) -> None:
        model.train(gradient_steps=count, batch_size=batch)

    return run


MATMULS_PER_UPDATE = {"sac": 16, "td3": 11.5}
"""Products of a [256, 256] by a [256, 256] matrix one update needs at least (the hidden-to-hidden layers; the
others are far smaller), counting each critic of the pair: SAC: the critics forward on the batch (2) and on the
actor's actions (2), backward for weights and inputs (4) and for inputs only (2), the target critics (2), the
actor forward on both observations (2) and backward (2); TD3: critics 2 + 4, targets 2 + 1, and every second
update the actor's 5 (forward 1, first critic forward and input backward 2, backward 2)."""


def matmul_floor(algo_name: str) -> float:
    """Updates per second if an update did nothing but its 256x256x256 products (measured now)."""
    import torch

    a, w = torch.randn(256, 256), torch.randn(256, 256)
    for _ in range(20):
        a @ w
    start = time.perf_counter()
    for _ in range(200):
        a @ w
    return 1.0 / ((time.perf_counter() - start) / 200 * MATMULS_PER_UPDATE[algo_name])


def measure_throughput(args: argparse.Namespace, with_sb3: bool) -> dict:
    import torch

    torch.set_num_threads(1)
    out = {}
    for algo_name in args.algos:
        runners = {f"rl_gpu-{algo_name}-{mode}": _ours(algo_name, mode, 256) for mode in args.throughput_compile}
        if with_sb3:
            runners[f"sb3-{algo_name}"] = _sb3(algo_name, 256)
        for run in runners.values():
            run(10)  # warm-up (and, compiled, the compilation)
        rates: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, run in runners.items():
                start = time.perf_counter()
                run(args.updates)
                rates[name].append(args.updates / (time.perf_counter() - start))
        medians = {name: statistics.median(r) for name, r in rates.items()}
        floor = matmul_floor(algo_name)
        print(f"{algo_name}: the 256x256x256 products alone allow {floor:.0f} updates/s (measured after the rounds)")
        for name, value in medians.items():
            print(f"{name:>22}: {value:7.1f} updates/s (median of {args.rounds} rounds of {args.updates}; "
                  f"rounds {', '.join(f'{v:.0f}' for v in rates[name])})")
        if with_sb3:
            for name in medians:
                if name.startswith("rl_gpu"):
                    print(f"{name} / sb3-{algo_name}: {medians[name] / medians[f'sb3-{algo_name}']:.2f}x")
        out[algo_name] = {"rates": rates, "median": medians, "matmul_floor": floor}
    return out


def sb3_available() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", nargs="+", choices=["solve", "throughput"], default=["solve", "throughput"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--algos", nargs="+", choices=["sac", "td3"], default=["sac"],
                        help="rl_gpu algorithms to run (SB3 runs SAC for the solve measure, each for throughput)")
    parser.add_argument("--eval-every", type=int, default=1000, help="environment steps between evaluations")
    parser.add_argument("--compile", default="auto", choices=["auto", "off", "inductor", "cudagraphs"],
                        help="rl_gpu's compile mode in the solve measure (auto = off on CPU)")
    parser.add_argument("--throughput-compile", nargs="+", default=["off"], choices=["off", "inductor"],
                        help="rl_gpu's compile modes in the throughput measure")
    parser.add_argument("--updates", type=int, default=200, help="updates per throughput round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating throughput rounds")
    parser.add_argument("--sb3", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--output", type=Path, default=ROOT / "artifacts" / "offpolicy.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "sb3-sac":
        print(json.dumps(worker_sb3(args.seed, args.eval_every)))
        return 0
    if args.worker is not None:
        print(json.dumps(worker_rl_gpu(args.seed, args.eval_every, args.worker.removeprefix("rl_gpu-"),
                                       args.compile)))
        return 0
    if args.sb3 == "on" and not sb3_available():
        parser.error("--sb3 on needs stable-baselines3 (pip install -e '.[bench]')")
    with_sb3 = args.sb3 == "on" or (args.sb3 == "auto" and sb3_available())
    doc: dict = {"threshold": THRESHOLD, "eval_episodes": EVAL_EPISODES, "eval_every": args.eval_every,
                 "seeds": args.seeds, "python": platform.python_version(), "threads": 1,
                 "command": " ".join(sys.argv), "load_before": os.getloadavg()}
    if "throughput" in args.measure:
        doc["throughput"] = measure_throughput(args, with_sb3)
    if "solve" in args.measure:
        doc["solve"] = measure_solve(args, with_sb3)
    doc["load_after"] = os.getloadavg()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
