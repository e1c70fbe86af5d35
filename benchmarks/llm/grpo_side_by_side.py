"""rl_gpu's GRPO side by side with TRL's GRPOTrainer: the same GPT-2 model to start from, the same task
(Addition-v0's training problems), group size, prompts per step, steps, learning rate, KL weight and loss.

    rl-gpu train --env Addition-v0 --algo sft --output runs/sft && \\
    rl-gpu export runs/sft/seed-11/best.pt --format hf --output runs/sft-gpt2
    OMP_NUM_THREADS=1 python benchmarks/llm/grpo_side_by_side.py --model-dir runs/sft-gpt2 --steps 50 \\
        --seeds 1 2 3 --trl-python /work/trl-venv/bin/python

Each run is its own process (one thread; peak RSS is that run's), the sides alternating within a round (a round
per seed; who goes first alternates). Afterwards every trained model, and the starting one, is evaluated the same
way: greedy responses to the same held-out test problems (``Addition-v0?split=test``, a fixed seed) with this
library's evaluator, exact-match accuracy with a Wilson interval. Speed counts the training loop only: completion
tokens (up to and including <eos>) per second, optimiser steps per second. Prints one table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from grpo_throughput import add_run_arguments, peak_rss_mib  # noqa: E402 -- this folder's scripts, not a package


def ours(args: argparse.Namespace) -> dict:
    import torch

    from rl_gpu.algos.base import Setup
    from rl_gpu.algos.lm.common import generate
    from rl_gpu.algos.lm.config import GRPOConfig
    from rl_gpu.algos.lm.grpo import GRPO
    from rl_gpu.envs.registry import make
    from rl_gpu.interop.hf import write_hf_folder

    torch.set_num_threads(1)
    env = make("Addition-v0", num_envs=args.prompts_per_step * args.group_size, seed=args.seed)
    algo = GRPO.from_setup(Setup(env=env, seed=args.seed, learning_rate=args.lr),
                           GRPOConfig(init=args.model_dir, group_size=args.group_size, kl_coef=args.beta))
    tokens = 0
    start = time.perf_counter()
    for _ in range(args.steps):
        env.group(args.group_size)
        responses = generate(algo.policy, env, algo.rngs["sample"])
        algo.update(responses)
        tokens += int(responses.chosen.sum())
    wall = time.perf_counter() - start
    write_hf_folder(algo.policy, env.vocab, Path(args.save), {"env_id": "Addition-v0"})
    return {"side": "rl_gpu", "wall_s": wall, "steps": args.steps, "updates_per_s": args.steps / wall,
            "completion_tokens": tokens, "tokens_per_s": tokens / wall,
            "peak_rss_mib": peak_rss_mib(),
            "versions": {"torch": torch.__version__}}


def accuracy(folder: str, episodes: int) -> tuple[int, int]:
    """(right, episodes): greedy answers of the GPT-2 folder to the same held-out problems."""
    import torch

    from rl_gpu.algos.lm.common import generate
    from rl_gpu.envs.registry import make
    from rl_gpu.nn.gpt2 import load_gpt2

    env = make("Addition-v0?split=test", num_envs=episodes, seed=12345)
    policy = load_gpt2(folder, env.prompt_length).eval()
    with torch.no_grad():
        reward = generate(policy, env, None, deterministic=True).reward
    return int(reward.sum()), episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--eval-episodes", type=int, default=4000)
    parser.add_argument("--trl-python", default="/work/trl-venv/bin/python")
    parser.add_argument("--side", choices=["ours"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "ours":
        result = ours(args)
        Path(args.json).write_text(json.dumps(result))
        return
    from rl_gpu.training.evaluation import wilson_interval

    shared = ["--model-dir", args.model_dir, "--steps", str(args.steps), "--prompts-per-step",
              str(args.prompts_per_step), "--group-size", str(args.group_size), "--lr", str(args.lr), "--beta",
              str(args.beta)]
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        for r, seed in enumerate(args.seeds):
            sides = ["rl_gpu", "trl"] if r % 2 == 0 else ["trl", "rl_gpu"]
            for side in sides:
                model, out = f"{scratch}/{side}-{seed}", f"{scratch}/{side}-{seed}.json"
                command = ([sys.executable, __file__, "--side", "ours"] if side == "rl_gpu"
                           else [args.trl_python, str(HERE / "trl_grpo.py")])
                command += [*shared, "--seed", str(seed), "--save", model, "--json", out]
                subprocess.run(command, check=True, capture_output=True, text=True)
                result = json.loads(Path(out).read_text())
                result["seed"], result["accuracy"] = seed, accuracy(model, args.eval_episodes)
                results.append(result)
                print(f"round {r + 1} seed {seed} {side}: {result['wall_s']:.1f} s, "
                      f"{result['tokens_per_s']:,.0f} tokens/s, accuracy {result['accuracy'][0]}/"
                      f"{result['accuracy'][1]}", flush=True)
        start = accuracy(args.model_dir, args.eval_episodes)
    print(f"\nGRPO on Addition-v0 from {args.model_dir}: {args.steps} steps of {args.prompts_per_step} prompts x "
          f"{args.group_size}, lr {args.lr}, beta {args.beta}; one thread per process; seeds {args.seeds}")
    lo, hi = wilson_interval(*start)
    print(f"starting model: accuracy {start[0] / start[1]:.3f} [{lo:.3f}, {hi:.3f}] on {start[1]} test problems\n")
    print("| side | seed | train s | completion tokens/s | updates/s | peak RSS MiB | test accuracy [95% CI] |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for res in results:
        right, n = res["accuracy"]
        lo, hi = wilson_interval(right, n)
        print(f"| {res['side']} | {res['seed']} | {res['wall_s']:.1f} | {res['tokens_per_s']:,.0f} | "
              f"{res['updates_per_s']:.3f} | {res['peak_rss_mib']:,.0f} | {right / n:.3f} [{lo:.3f}, {hi:.3f}] |")
    ratio = {}
    for key in ("tokens_per_s", "updates_per_s"):
        by = {s: statistics.median(r[key] for r in results if r["side"] == s) for s in ("rl_gpu", "trl")}
        ratio[key] = by["rl_gpu"] / by["trl"]
    acc = {s: statistics.mean(r["accuracy"][0] / r["accuracy"][1] for r in results if r["side"] == s)
           for s in ("rl_gpu", "trl")}
    print(f"\nmedian ratios rl_gpu / TRL: tokens/s {ratio['tokens_per_s']:.2f}x, updates/s "
          f"{ratio['updates_per_s']:.2f}x; mean test accuracy rl_gpu {acc['rl_gpu']:.3f}, TRL {acc['trl']:.3f}")
    versions = next(r["versions"] for r in results if r["side"] == "trl")
    print(f"TRL side: {versions}")


if __name__ == "__main__":
    main()
