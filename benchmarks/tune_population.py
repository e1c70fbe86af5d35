"""``rl-gpu tune --population K`` against the same trials one at a time, in one process: trials per hour of each.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/tune_population.py [--env CartPole-v1] [--trials 8]
        [--population 4] [--budget 100000] [--evals 4] [--rounds 2] [--out artifacts/tune-population]

``--trials`` settings are drawn once from the population's search space (learning rate, clip_coef, ent_coef;
random sampler, seed 0). Each round trains them both ways: a sweep of ``--population`` trials at a time (its study
given exactly these settings, no pruner, so every trial runs its whole budget), and every trial again as a lone
run, one after another (the same settings, seed, budget and validations). Rounds alternate which side goes first,
so a change in the machine's load falls on both. Printed per round: each side's seconds and trials per hour, the
ratio, and each trial's score both ways (the same run up to a batched product's rounding: close, not equal).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import optuna
import torch

from rl_gpu.cli.search_spaces import ppo_member_space
from rl_gpu.cli.tune import TuneConfig, run_sweep
from rl_gpu.cli.tune_trials import trial_score
from rl_gpu.training.runner import train


def population_side(cfg: TuneConfig, draws: list[dict]) -> tuple[float, list[float]]:
    cfg.output.mkdir(parents=True)
    study = optuna.create_study(study_name=cfg.study, storage=cfg.storage_url, direction="maximize")
    for params in draws:
        study.enqueue_trial(params)
    start = time.perf_counter()
    assert run_sweep(cfg) == 0
    seconds = time.perf_counter() - start
    return seconds, [t.value for t in sorted(study.get_trials(), key=lambda t: t.number)]


def lone_side(cfg: TuneConfig, draws: list[dict]) -> tuple[float, list[float]]:
    scores = []
    start = time.perf_counter()
    for n, params in enumerate(draws):
        config = cfg.trial_config(n, ppo_member_space(optuna.trial.FixedTrial(params), cfg.budget))
        (result,) = train(config, log=lambda line: None, display="off")
        scores.append(trial_score(result.summary))
    return time.perf_counter() - start, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--budget", type=int, default=100_000)
    parser.add_argument("--evals", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("artifacts/tune-population"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    shutil.rmtree(args.out, ignore_errors=True)
    drawing = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    draws = []
    for _ in range(args.trials):
        trial = drawing.ask()
        ppo_member_space(trial, args.budget)
        draws.append(trial.params)
    rows = []
    for r in range(args.rounds):
        def cfg(side: str, population: int) -> TuneConfig:
            return TuneConfig(env=args.env, algo="ppo", trials=args.trials, budget=args.budget, evals=args.evals,
                              pruner="none", population=population, output=args.out / f"round-{r}" / side,
                              device="cpu")

        sides = {"population": lambda: population_side(cfg("population", args.population), draws),
                 "lone": lambda: lone_side(cfg("lone", 1), draws)}
        order = ["population", "lone"] if r % 2 == 0 else ["lone", "population"]
        measured = {side: sides[side]() for side in order}
        (pop_s, pop_scores), (lone_s, lone_scores) = measured["population"], measured["lone"]
        rows.append((r, order[0], pop_s, lone_s))
        print(f"round {r} ({order[0]} first): population {pop_s:.1f} s ({args.trials * 3600 / pop_s:.0f} trials/h), "
              f"lone {lone_s:.1f} s ({args.trials * 3600 / lone_s:.0f} trials/h): {lone_s / pop_s:.2f}x", flush=True)
        print("  scores population / lone: " + ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(pop_scores, lone_scores)))
    print(f"\n{args.env} PPO, {args.trials} trials of {args.budget:,} steps, population {args.population}")
    print(f"{'round':>5} {'first':>10} {'population s':>13} {'lone s':>8} {'lone/population':>16}")
    for r, first, a, b in rows:
        print(f"{r:>5} {first:>10} {a:>13.1f} {b:>8.1f} {b / a:>16.2f}")


if __name__ == "__main__":
    main()
