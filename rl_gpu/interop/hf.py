"""A text task's transformer policy as a Hugging Face folder: ``GPT2LMHeadModel`` weights (:mod:`rl_gpu.nn.gpt2`)
and a character tokenizer of the task's vocabulary, both written by ``save_pretrained`` so that
``transformers.AutoModelForCausalLM.from_pretrained(folder)`` and ``AutoTokenizer.from_pretrained(folder)`` load
them (``rl-gpu export best.pt --format hf --output DIR``); ``--init DIR`` of ``--algo sft`` / ``grpo`` reads one back.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.text.vocab import CharVocab
from rl_gpu.nn.gpt2 import save_gpt2
from rl_gpu.nn.transformer import TransformerPolicy


def char_tokenizer(vocab: CharVocab) -> Any:
    """A ``PreTrainedTokenizerFast`` with ``vocab``'s ids: one token per character, ``<pad>`` and ``<eos>`` special,
    no token added at either end, decoding without spaces."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    ids = {token: i for i, token in enumerate(vocab.tokens)}
    core = Tokenizer(models.WordLevel(ids, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                   padding_side="left")


def write_hf_folder(policy: TransformerPolicy, vocab: CharVocab, folder: Path, metadata: dict) -> None:
    """Write the model, its tokenizer and ``rl_gpu.json`` (``metadata`` and the prompt length) into ``folder``,
    which must not exist: everything is written beside it first and renamed into place."""
    folder = Path(folder)
    if folder.exists() or folder.is_symlink():
        raise UsageError(f"--output {folder}: already exists; a Hugging Face folder is written to a new path")
    parent = folder.parent
    if not parent.is_dir():
        raise UsageError(f"--output {folder}: its parent folder {parent} does not exist")
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=parent))
    try:
        if hasattr(policy, "save_hf"):  # a Hugging Face model's policy: the model itself
            policy.save_hf(staging)
        else:
            save_gpt2(policy, staging)
        char_tokenizer(vocab).save_pretrained(str(staging))
        (staging / "rl_gpu.json").write_text(json.dumps({**metadata, "prompt_length": policy.prompt_length,
                                                         "response_length": policy.response_length}, indent=1))
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
