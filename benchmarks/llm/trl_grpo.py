"""TRL's GRPOTrainer on the tiny addition task of benchmarks/llm/make_tiny_hf.py: TRL's side of the benchmark.

Runs in a virtual environment of its own with TRL (it imports nothing of rl_gpu):

    python3 -m venv /work/trl-venv && /work/trl-venv/bin/pip install torch==2.14.1 transformers trl
    OMP_NUM_THREADS=1 taskset -c 0 /work/trl-venv/bin/python benchmarks/llm/make_tiny_hf.py --out /tmp/tiny \\
        --sft-steps 600 --seed 1
    OMP_NUM_THREADS=1 taskset -c 0 /work/trl-venv/bin/python benchmarks/llm/trl_grpo.py --model-dir /tmp/tiny \\
        --steps 20 --prompts-per-step 16 --group-size 8 --seed 1 --out /tmp/trl.json

The task (make_tiny_hf.py's): prompts "aaa+bbb=" drawn uniformly (with replacement) from the TRAIN split, reward 1
iff the completion's tokens before its first <eos> are the zero-padded 4-digit sum and an <eos> came within the 5
completion tokens, else 0.

GRPO settings, all explicit below: one optimiser update per generation batch of exactly P prompts x G completions
(per_device_train_batch_size = P*G, gradient_accumulation_steps = 1, so steps_per_generation = 1 and
generation_batch_size = P*G; num_iterations = 1); sampling at temperature 1 (no top-k/top-p), at most 5 completion
tokens; advantages (r - group mean) / (group std + 1e-4) (scale_rewards="group"); PPO's clipped ratio with
epsilon 0.2 (symmetric); beta times the k3 KL estimate exp(ref - new) - (ref - new) - 1 to a frozen reference
(TRL builds it as a second model loaded from --model-dir); loss_type "dapo" (TRL 1.16's default): the masked token
losses summed over the whole generation batch and divided by its number of completion tokens; Adam(W) with weight
decay 0, eps 1e-5, constant learning rate, no warm-up, gradients clipped to global norm 1.

Writes JSON (and prints it): versions; the wall seconds of trainer.train() only (loading and evaluation excluded);
completion tokens per second (tokens up to and including the first <eos>: what TRL's completion mask counts; TRL
drops what generate padded after <eos>), and, separately, generated positions per second (batch x decode steps of
every generate call, the pads after <eos> included); optimiser updates per second; peak RSS of the process
(getrusage: it covers loading, evaluation and the reference model too); greedy exact-match accuracy before and
after training on a fixed subset of TEST problems (--eval-problems, 1000 by default; 0: all 100,000) and, for
reference, of TRAIN problems.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_tiny_hf import (  # noqa: E402
    MAX_COMPLETION,
    draw_train,
    fixed_problems,
    greedy_accuracy,
    parse_prompt,
    prompt_text,
    reward_of_ids,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="a folder written by make_tiny_hf.py")
    parser.add_argument("--steps", type=int, default=20, help="optimiser updates (= generation batches)")
    parser.add_argument("--prompts-per-step", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--epsilon", type=float, default=0.2)
    parser.add_argument("--loss-type", default="dapo", choices=["dapo", "grpo", "bnpo", "dr_grpo"])
    parser.add_argument("--scale-rewards", default="group", choices=["group", "batch", "none"])
    parser.add_argument("--eval-problems", type=int, default=1000,
                        help="fixed random subset of this many TEST (and TRAIN) problems; 0: all TEST problems")
    parser.add_argument("--out", "--json", dest="out", required=True, help="result JSON")
    parser.add_argument("--save", help="also save_pretrained the trained model and tokenizer here")
    args = parser.parse_args()

    import accelerate
    import datasets
    import tokenizers
    import torch
    import transformers
    import trl
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    assert tokenizer.bos_token_id is None and tokenizer.padding_side == "left"

    test = fixed_problems("test", args.eval_problems)
    train = fixed_problems("train", args.eval_problems or 1000)
    before = {"test": greedy_accuracy(model, test), "train": greedy_accuracy(model, train)}

    rng = random.Random(args.seed)
    prompts = [prompt_text(*draw_train(rng)) for _ in range(args.steps * args.prompts_per_step)]
    dataset = datasets.Dataset.from_dict({"prompt": prompts})
    counted = {"completion_tokens": 0, "generated_positions": 0, "completions": 0, "reward_sum": 0.0}

    def exact_match(prompts, completion_ids, **_):
        # completion_ids: TRL's token ids of each completion, cut after its first <eos> (inclusive)
        rewards = [reward_of_ids(*parse_prompt(p), ids) for p, ids in zip(prompts, completion_ids)]
        counted["completion_tokens"] += sum(len(ids) for ids in completion_ids)
        counted["generated_positions"] += len(completion_ids) * max(len(ids) for ids in completion_ids)
        counted["completions"] += len(completion_ids)
        counted["reward_sum"] += sum(rewards)
        return rewards

    batch = args.prompts_per_step * args.group_size
    with tempfile.TemporaryDirectory() as scratch:
        config = GRPOConfig(
            output_dir=scratch, seed=args.seed, use_cpu=True, bf16=False, fp16=False,
            report_to="none", save_strategy="no", eval_strategy="no", logging_steps=max(1, args.steps // 5),
            disable_tqdm=True, dataloader_num_workers=0,
            # batch: one update = exactly P prompts x G completions, generated once and used once
            max_steps=args.steps, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
            num_generations=args.group_size, num_iterations=1, shuffle_dataset=False,
            # generation
            max_completion_length=MAX_COMPLETION, temperature=1.0, top_p=1.0, top_k=0, min_p=None,
            repetition_penalty=1.0,
            # GRPO
            beta=args.beta, epsilon=args.epsilon, epsilon_high=args.epsilon, delta=None, loss_type=args.loss_type,
            scale_rewards=args.scale_rewards, importance_sampling_level="token", mask_truncated_completions=False,
            top_entropy_quantile=1.0, entropy_coef=0.0, disable_dropout=True, sync_ref_model=False,
            # optimiser
            optim="adamw_torch", learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
            weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-5, max_grad_norm=1.0,
        )
        assert config.generation_batch_size == batch and config.steps_per_generation == 1
        trainer = GRPOTrainer(model=model, reward_funcs=exact_match, args=config, train_dataset=dataset,
                              processing_class=tokenizer)
        ref_is_copy = trainer.ref_model is not None and trainer.ref_model is not trainer.model
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    trained = trainer.accelerator.unwrap_model(trainer.model)
    after = {"test": greedy_accuracy(trained, test), "train": greedy_accuracy(trained, train)}
    if args.save:
        trained.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)

    steps_done = trainer.state.global_step
    result = {
        "side": "trl", "seed": args.seed, "steps": steps_done, "prompts_per_step": args.prompts_per_step,
        "group_size": args.group_size, "lr": args.lr, "beta": args.beta, "epsilon": args.epsilon,
        "loss_type": args.loss_type, "scale_rewards": args.scale_rewards,
        "reference_model_copy": ref_is_copy,
        "wall_s": wall, "updates_per_s": steps_done / wall,
        "completion_tokens": counted["completion_tokens"], "tokens_per_s": counted["completion_tokens"] / wall,
        "generated_positions": counted["generated_positions"],
        "generated_positions_per_s": counted["generated_positions"] / wall,
        "completions": counted["completions"], "mean_train_reward": counted["reward_sum"] / counted["completions"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "eval": f"greedy exact match, fixed subsets: {len(test)} TEST, {len(train)} TRAIN problems",
        "test_accuracy_before": before["test"], "test_accuracy_after": after["test"],
        "train_accuracy_before": before["train"], "train_accuracy_after": after["train"],
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "trl": trl.__version__,
                     "accelerate": accelerate.__version__, "datasets": datasets.__version__,
                     "tokenizers": tokenizers.__version__},
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
