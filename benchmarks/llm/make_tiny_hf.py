"""A tiny character-level Llama for D-digit addition, as a Hugging Face folder (tokenizer + model), optionally
warm-started by supervised learning so that TRL's GRPO (benchmarks/llm/trl_grpo.py) has something to raise.

Runs in the TRL virtual environment (it imports nothing of rl_gpu):

    OMP_NUM_THREADS=1 taskset -c 0 /work/trl-venv/bin/python benchmarks/llm/make_tiny_hf.py --out /tmp/tiny \\
        --sft-steps 300 --seed 1

The task (the same as rl_gpu's side of the benchmark):
  vocabulary, ids: 0 "<pad>", 1 "<eos>", 2..11 the digits "0".."9", 12 "+", 13 "=" (14 tokens, no BOS);
  a problem: a, b in [0, 10**D), D = 3; prompt "aaa+bbb=" (8 tokens, zero-padded), answer the zero-padded
  D+1-digit sum then <eos> (5 tokens); at most 5 completion tokens;
  TEST split: (a * 7919 + b * 104729) % 10 == 0, every other problem is TRAIN;
  reward / exact match: the completion's tokens before its first <eos> are the padded sum's digits, and an <eos>
  came within the 5 tokens.

The model: LlamaForCausalLM, vocab 14, hidden 128, intermediate 512, 4 layers, 4 heads, 16 positions, untied
embeddings. SFT (``--sft-steps K``): teacher forcing on prompt + answer, cross-entropy on the 5 answer tokens only,
AdamW (lr 1e-3, torch's default weight decay 0.01), batches of 256 TRAIN problems drawn uniformly with replacement.
Prints greedy exact-match accuracy on a fixed subset of TEST problems (and, for reference, of TRAIN problems).

This file also holds the task's helpers that trl_grpo.py imports.
"""

from __future__ import annotations

import argparse
import json
import random
import time

DIGITS = 3
PROMPT_LEN = 2 * DIGITS + 2  # "aaa+bbb="
ANSWER_LEN = DIGITS + 2  # D+1 digits and <eos>
MAX_COMPLETION = ANSWER_LEN
PAD, EOS = 0, 1
TOKENS = ["<pad>", "<eos>", *"0123456789", "+", "="]
VOCAB = {t: i for i, t in enumerate(TOKENS)}


# ----------------------------------------------------------------------------------------------- the task

def in_test(a: int, b: int) -> bool:
    """The held-out split. NB: 7919 and 104729 are both 9 mod 10, so this is exactly (a + b) % 10 == 0."""
    return (a * 7919 + b * 104729) % 10 == 0


def prompt_text(a: int, b: int) -> str:
    return f"{a:0{DIGITS}d}+{b:0{DIGITS}d}="


def answer_text(a: int, b: int) -> str:
    return f"{a + b:0{DIGITS + 1}d}"


def parse_prompt(prompt: str) -> tuple[int, int]:
    return int(prompt[:DIGITS]), int(prompt[DIGITS + 1:2 * DIGITS + 1])


def answer_ids(a: int, b: int) -> list[int]:
    return [VOCAB[c] for c in answer_text(a, b)] + [EOS]


def draw_train(rng: random.Random) -> tuple[int, int]:
    """A TRAIN problem, uniformly (rejection sampling over uniform (a, b))."""
    while True:
        a, b = rng.randrange(10 ** DIGITS), rng.randrange(10 ** DIGITS)
        if not in_test(a, b):
            return a, b


def fixed_problems(split: str, limit: int, seed: int = 12345) -> list[tuple[int, int]]:
    """All problems of a split in (a, b) order, or a fixed random subset of `limit` of them (limit > 0)."""
    test = split == "test"
    problems = [(a, b) for a in range(10 ** DIGITS) for b in range(10 ** DIGITS) if in_test(a, b) == test]
    if 0 < limit < len(problems):
        problems = sorted(random.Random(seed).sample(problems, limit))
    return problems


def reward_of_ids(a: int, b: int, ids) -> float:
    """1.0 iff the tokens before the first <eos> (within MAX_COMPLETION tokens) are the padded sum's digits."""
    ids = list(ids)[:MAX_COMPLETION]
    if EOS not in ids:
        return 0.0
    cut = ids.index(EOS)
    return 1.0 if ids[:cut] == answer_ids(a, b)[:-1] else 0.0


# --------------------------------------------------------------------------------------- tokenizer, model

def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=dict(VOCAB), unk_token="<unk>"))  # no <unk>: unknown text fails loudly
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one token per character
    core.decoder = decoders.Fuse()  # decode without spaces
    core.add_special_tokens(["<pad>", "<eos>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                        padding_side="left", model_max_length=16)
    return tokenizer


def check_tokenizer(tokenizer) -> None:
    ids = tokenizer("007+450=")["input_ids"]
    assert ids == [2, 2, 9, 12, 6, 7, 2, 13], ids
    assert tokenizer.bos_token_id is None and tokenizer.pad_token_id == PAD and tokenizer.eos_token_id == EOS
    assert tokenizer.convert_ids_to_tokens(list(range(len(TOKENS)))) == TOKENS
    assert tokenizer.decode([2, 6, 7, 9, EOS], skip_special_tokens=True) == "0457"
    assert tokenizer.padding_side == "left"


def build_model(seed: int):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(TOKENS), hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=16,
                         pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None,
                                               max_new_tokens=MAX_COMPLETION, do_sample=False)
    return model


# ------------------------------------------------------------------------------------------ evaluation

def greedy_accuracy(model, problems: list[tuple[int, int]], batch: int = 1000) -> float:
    """Exact-match accuracy of greedy decoding (model.generate, do_sample=False) on `problems`."""
    import torch

    was_training = model.training
    model.eval()
    right = 0
    with torch.no_grad():
        for i in range(0, len(problems), batch):
            chunk = problems[i:i + batch]
            ids = torch.tensor([[VOCAB[c] for c in prompt_text(a, b)] for a, b in chunk])
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=MAX_COMPLETION, pad_token_id=PAD, eos_token_id=EOS)
            for (a, b), row in zip(chunk, out[:, PROMPT_LEN:].tolist()):
                right += reward_of_ids(a, b, row)
    model.train(was_training)
    return right / len(problems)


# ----------------------------------------------------------------------------------------------- SFT

def sft(model, steps: int, seed: int, lr: float = 1e-3, batch: int = 256, log_every: int = 50) -> None:
    import torch
    import torch.nn.functional as F

    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for step in range(1, steps + 1):
        rows = []
        for _ in range(batch):
            a, b = draw_train(rng)
            rows.append([VOCAB[c] for c in prompt_text(a, b)] + answer_ids(a, b))
        ids = torch.tensor(rows)
        logits = model(input_ids=ids).logits  # (B, 13, V)
        pred = logits[:, PROMPT_LEN - 1:-1]  # positions predicting the 5 answer tokens
        loss = F.cross_entropy(pred.reshape(-1, pred.size(-1)), ids[:, PROMPT_LEN:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % log_every == 0 or step == steps:
            print(f"sft step {step}/{steps}: answer-token loss {loss.item():.4f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder to save_pretrained the tokenizer and model into")
    parser.add_argument("--sft-steps", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-problems", type=int, default=1000,
                        help="a fixed random subset of this many TEST (and TRAIN) problems; 0: all TEST problems")
    args = parser.parse_args()

    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    tokenizer = build_tokenizer()
    check_tokenizer(tokenizer)
    model = build_model(args.seed)
    start = time.perf_counter()
    sft(model, args.sft_steps, args.seed, lr=args.lr)
    sft_s = time.perf_counter() - start
    test = fixed_problems("test", args.eval_problems)
    train = fixed_problems("train", args.eval_problems or 1000)
    start = time.perf_counter()
    result = {"sft_steps": args.sft_steps, "seed": args.seed, "sft_wall_s": round(sft_s, 2),
              "test_accuracy": greedy_accuracy(model, test), "test_problems": len(test),
              "train_accuracy": greedy_accuracy(model, train), "train_problems": len(train),
              "parameters": sum(p.numel() for p in model.parameters())}
    result["eval_wall_s"] = round(time.perf_counter() - start, 2)
    tokenizer.save_pretrained(args.out)
    model.save_pretrained(args.out)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
