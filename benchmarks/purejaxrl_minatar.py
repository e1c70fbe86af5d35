"""PPO on MinAtar side by side with PureJaxRL's ``ppo.py`` on gymnax's MinAtar ports, one core, sides alternating
seed by seed: training transitions per second and the return at equal steps.

Both sides: the same configuration (PureJaxRL's MinAtar PPO shape: 64 environments x 128 steps per update, 4 epochs
of 8 minibatches, lr 5e-4 decayed linearly to 0, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, value
coefficient 0.5, gradient-norm clip 0.5, advantages normalised per minibatch, clipped value loss) and the same
network: ppo.py's two 64-64 tanh MLPs (actor and critic) on the flattened frames (``--policy categorical`` here).
PureJaxRL runs its unmodified ``ppo.py`` and ``wrappers.py`` from the folder given (a checkout, never copied into
this repository) in its own interpreter with JAX and gymnax 0.0.9 (``--jax-python``), its whole training one XLA
program; compiling it is timed apart. rl_gpu runs ``rl-gpu train`` (``--compile off`` by default, or
``inductor``: its compile time then falls inside the first updates); its seconds are the training time of
``summary.json`` (validations and the final evaluation excluded).

Return at equal steps: the mean return of the episodes that ended in the last tenth of the updates (each side's
own training episodes, sampled actions), per seed; the table gives each seed and the IQM, and with 4 or more
seeds a side the share of random relabellings of the pooled seeds whose IQMs lie as far apart (a permutation
test). No sticky actions (gymnax's ports have none; rl_gpu's default, MinAtar's, is 0.1) and 1,000-step limits on
both sides.

    OMP_NUM_THREADS=1 python benchmarks/purejaxrl_minatar.py ../shared/peers/purejaxrl --jax-python JAX/bin/python \\
        --games Breakout SpaceInvaders --seeds 0 1 2 --total-timesteps 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from purejaxrl_compare import JAX_PRELUDE, check_jax, default_core, pinned, run_jax  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CONFIG = {"LR": 5e-4, "NUM_ENVS": 64, "NUM_STEPS": 128, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 8, "GAMMA": 0.99,
          "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
          "ACTIVATION": "tanh", "ANNEAL_LR": True, "DEBUG": False}
IDS = {game: (f"{game}-MinAtar", f"MinAtar-{game}-v1?sticky_action_prob=0")
       for game in ("Breakout", "SpaceInvaders", "Asterix", "Freeway")}
"""gymnax's id and ours per game; gymnax's MinAtar ports have no sticky actions, so ours run without them here."""

JAX_DRIVER = JAX_PRELUDE + textwrap.dedent("""
    import numpy as np
    start = time.perf_counter()
    out = jax.block_until_ready(train(rng))
    run_s = time.perf_counter() - start
    metrics = out["metrics"]
    done = np.asarray(metrics["returned_episode"])          # [updates, steps, envs]
    ret = np.asarray(metrics["returned_episode_returns"])
    updates = done.shape[0]
    tail = slice(updates - max(1, updates // 10), updates)
    final = float(ret[tail][done[tail]].mean()) if done[tail].any() else float("nan")
    print(json.dumps({"compile_s": compile_s, "run_s": run_s, "final_return": final,
                      "transitions": updates * config["NUM_STEPS"] * config["NUM_ENVS"], "jax": jax.__version__}))
""")


def run_purejaxrl(args, path: list[str], game: str, seed: int) -> dict:
    config = {**CONFIG, "ENV_NAME": IDS[game][0], "TOTAL_TIMESTEPS": args.total_timesteps}
    result = run_jax(args.jax_python, args.core, JAX_DRIVER, {"path": path, "config": config, "seed": seed})
    return {"seconds": result["run_s"], "compile_s": result["compile_s"], "final_return": result["final_return"],
            "transitions": result["transitions"]}


def run_rl_gpu(args, workdir: Path, game: str, seed: int) -> dict:
    c = CONFIG
    output = workdir / f"{game}-{seed}"
    command = [sys.executable, "-m", "rl_gpu", "train", "--env", IDS[game][1], "--device", "cpu", "--policy",
               "categorical", "--hidden-sizes", "64", "64", "--num-envs", str(c["NUM_ENVS"]), "--num-steps",
               str(c["NUM_STEPS"]), "--update-epochs", str(c["UPDATE_EPOCHS"]), "--num-minibatches",
               str(c["NUM_MINIBATCHES"]), "--learning-rate", str(c["LR"]), "--anneal-lr", "--gamma", str(c["GAMMA"]),
               "--gae-lambda", str(c["GAE_LAMBDA"]), "--clip-coef", str(c["CLIP_EPS"]), "--ent-coef",
               str(c["ENT_COEF"]), "--vf-coef", str(c["VF_COEF"]), "--max-grad-norm", str(c["MAX_GRAD_NORM"]),
               "--norm-adv", "--clip-vloss", "--no-norm-reward", "--no-normalize-obs", "--total-timesteps",
               str(args.total_timesteps), "--eval-every", "100000", "--eval-episodes", "8",
               "--final-eval-episodes", "8", "--compile", args.compile, "--threads", "1", "--seeds", str(seed),
               "--output", str(output), "--quiet"]
    out = subprocess.run(pinned(command, args.core), env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=REPO,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"rl-gpu train failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    run = output / f"seed-{seed}"
    summary = json.loads((run / "summary.json").read_text())
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lines = [r for r in lines if "episode_return" in r]
    updates = max(r["update"] for r in lines)
    tail = [r for r in lines if r["update"] > updates - max(1, updates // 10)]
    episodes = sum(r.get("episodes", 1) for r in tail)
    final = sum(r["episode_return"] * r.get("episodes", 1) for r in tail) / max(episodes, 1)
    return {"seconds": summary["train_seconds"], "compile_s": 0.0, "final_return": final,
            "transitions": updates * c["NUM_ENVS"] * c["NUM_STEPS"]}


def iqm(values: list[float]) -> float:
    """Interquartile mean (the middle half; all of them for fewer than 4)."""
    v = sorted(values)
    k = len(v) // 4
    middle = v[k:len(v) - k] or v
    return sum(middle) / len(middle)


def permutation_p(a: list[float], b: list[float], rounds: int = 20_000, seed: int = 0) -> float:
    """Two-sided permutation test of the IQM difference: the share of random relabellings of the pooled seeds
    into groups of ``len(a)`` and ``len(b)`` whose |IQM difference| is at least the observed one."""
    observed = abs(iqm(a) - iqm(b))
    pool, rng, hits = list(a) + list(b), random.Random(seed), 0
    for _ in range(rounds):
        rng.shuffle(pool)
        hits += abs(iqm(pool[:len(a)]) - iqm(pool[len(a):])) >= observed - 1e-12
    return hits / rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("purejaxrl", type=Path, help="the folder of a PureJaxRL checkout (ppo.py, wrappers.py)")
    parser.add_argument("--jax-python", required=True, help="an interpreter with jax, flax, optax, distrax, gymnax")
    parser.add_argument("--games", nargs="+", default=["Breakout", "SpaceInvaders"], choices=sorted(IDS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--total-timesteps", type=int, default=1_000_000)
    parser.add_argument("--core", type=int, default=default_core())
    parser.add_argument("--compile", default="off", choices=["off", "inductor"], help="rl_gpu's compile mode")
    args = parser.parse_args(argv)
    per_update = CONFIG["NUM_ENVS"] * CONFIG["NUM_STEPS"]
    if args.total_timesteps < per_update:
        parser.error(f"--total-timesteps must be at least one update's {per_update:,} steps, "
                     f"got {args.total_timesteps}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        path = check_jax(args.purejaxrl, args.jax_python, workdir)
        print(f"{args.total_timesteps:,} steps per run, core {args.core}, load {os.getloadavg()[0]:.2f}")
        rows = []
        for game in args.games:
            for i, seed in enumerate(args.seeds):
                order = ("purejaxrl", "rl_gpu") if i % 2 == 0 else ("rl_gpu", "purejaxrl")
                for side in order:
                    r = (run_purejaxrl(args, path, game, seed) if side == "purejaxrl"
                         else run_rl_gpu(args, workdir, game, seed))
                    r.update(game=game, side=side, seed=seed, load=os.getloadavg()[0])
                    rows.append(r)
                    print(f"  {game} seed {seed} {side}: {r['seconds']:.1f} s (+{r['compile_s']:.1f} s compile), "
                          f"{r['transitions'] / r['seconds']:,.0f} transitions/s, return {r['final_return']:.2f}, "
                          f"load {r['load']:.2f}", flush=True)
    print("\n| game | side | return per seed | IQM | transitions/s per seed | median | rl_gpu / PureJaxRL |")
    print("|---|---|---|---:|---|---:|---:|")
    for game in args.games:
        speed = {}
        for side in ("rl_gpu", "purejaxrl"):
            mine = [r for r in rows if r["game"] == game and r["side"] == side]
            rates = [r["transitions"] / r["seconds"] for r in mine]
            speed[side] = statistics.median(rates)
            returns = ", ".join(f"{r['final_return']:.2f}" for r in mine)
            ratio = f"{speed['rl_gpu'] / speed['purejaxrl']:.2f}" if side == "purejaxrl" else ""
            print(f"| {game} | {side} | {returns} | {iqm([r['final_return'] for r in mine]):.2f} | "
                  f"{', '.join(f'{v:,.0f}' for v in rates)} | {speed[side]:,.0f} | {ratio} |")
    for game in args.games:
        ours, theirs = ([r["final_return"] for r in rows if r["game"] == game and r["side"] == side]
                        for side in ("rl_gpu", "purejaxrl"))
        if min(len(ours), len(theirs)) >= 4:   # fewer seeds have too few relabellings to say anything
            print(f"{game}: IQM difference rl_gpu - PureJaxRL {iqm(ours) - iqm(theirs):+.2f}, two-sided permutation "
                  f"p = {permutation_p(ours, theirs):.2f}")


if __name__ == "__main__":
    main()
