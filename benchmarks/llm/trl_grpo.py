"""TRL's GRPOTrainer on Addition-v0's problems: the other side of benchmarks/llm/grpo_side_by_side.py.

Runs in a virtual environment of its own with TRL (it imports nothing of rl_gpu):

    python3 -m venv /work/trl-venv && /work/trl-venv/bin/pip install torch==2.14.1 transformers==5.25.0 trl
    /work/trl-venv/bin/python benchmarks/llm/trl_grpo.py --model-dir FOLDER --steps 50 --prompts-per-step 64 \\
        --group-size 8 --seed 1 --save FOLDER2 --json out.json

FOLDER is a GPT-2 folder with its tokenizer (``rl-gpu export best.pt --format hf``). The task is Addition-v0's:
prompts "ddd+ddd=" drawn uniformly from the training split (the same hash as rl_gpu.envs.text.addition), reward 1
when the completion's token ids are the zero-padded sum's digits and then <eos>, else 0. One optimiser step per
generation batch of P x G completions (no gradient accumulation, num_iterations 1), GRPO's group-scaled
advantages, the clipped ratio (epsilon 0.2), beta times the k3 KL to a reference copy of the starting model, token
losses averaged over the batch's completion tokens (loss_type "dapo", TRL's default), constant learning rate, Adam
(eps 1e-5, no weight decay) with gradients clipped to norm 1: the settings of rl-gpu's GRPO preset.

Writes JSON: the training loop's wall seconds (model loading and evaluation excluded), completion tokens (up to
and including <eos>, as TRL's completion mask counts them) per second, optimiser steps per second, peak RSS, and
the library versions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpo_throughput import add_run_arguments, peak_rss_mib  # noqa: E402 -- imports neither torch nor rl_gpu at module level

DIGITS = 3
_HASH, _SPACE = 2654435761, 2 ** 32



def split_of(a: int, b: int) -> int:
    """0 test, 1 valid, 2 train: Addition-v0's split of problem (a, b)."""
    return min(((a * 10 ** DIGITS + b) * _HASH % _SPACE) * 10 // _SPACE, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save", help="write the trained model here (save_pretrained)")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()

    import datasets
    import torch
    import transformers
    import trl
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model_dir)
    rng = random.Random(args.seed)
    rows = args.steps * args.prompts_per_step
    prompts = []
    while len(prompts) < rows:
        a, b = rng.randrange(10 ** DIGITS), rng.randrange(10 ** DIGITS)
        if split_of(a, b) == 2:
            prompts.append(f"{a:0{DIGITS}d}+{b:0{DIGITS}d}=")
    dataset = datasets.Dataset.from_dict({"prompt": prompts})
    eos = tokenizer.eos_token_id
    counted = {"completion_tokens": 0}

    def exact_match(prompts, completion_ids, **_):
        rewards = []
        for prompt, ids in zip(prompts, completion_ids):
            a, b = int(prompt[:DIGITS]), int(prompt[DIGITS + 1:2 * DIGITS + 1])
            answer = tokenizer.convert_tokens_to_ids(list(f"{a + b:0{DIGITS + 1}d}")) + [eos]
            counted["completion_tokens"] += len(ids)
            rewards.append(1.0 if list(ids) == answer else 0.0)
        return rewards

    batch = args.prompts_per_step * args.group_size
    with tempfile.TemporaryDirectory() as scratch:
        config = GRPOConfig(
            output_dir=scratch, max_steps=args.steps, learning_rate=args.lr, lr_scheduler_type="constant",
            warmup_steps=0, weight_decay=0.0, adam_epsilon=1e-5, max_grad_norm=1.0, seed=args.seed,
            per_device_train_batch_size=batch, gradient_accumulation_steps=1, num_generations=args.group_size,
            max_completion_length=DIGITS + 2, temperature=1.0, top_p=1.0, top_k=0, beta=args.beta, epsilon=0.2,
            loss_type="dapo", scale_rewards="group", num_iterations=1, use_cpu=True, bf16=False,
            report_to="none", save_strategy="no", logging_steps=max(1, args.steps // 5), disable_tqdm=True,
            dataloader_num_workers=0, shuffle_dataset=False,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=exact_match, args=config, train_dataset=dataset,
                              processing_class=tokenizer)
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    if args.save:
        trainer.model.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)
    result = {"side": "trl", "wall_s": wall, "steps": args.steps, "updates_per_s": args.steps / wall,
              "completion_tokens": counted["completion_tokens"],
              "tokens_per_s": counted["completion_tokens"] / wall,
              "peak_rss_mib": peak_rss_mib(),
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "trl": trl.__version__}}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
