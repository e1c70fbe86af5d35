"""A reward model for text tasks: a Hugging Face sequence classifier with one output over the task's own tokens,
read from a local folder (``transformers``, an optional extra; nothing is downloaded and no code from the folder
runs: ``trust_remote_code`` stays off, so only the model types ``transformers`` itself defines can be built).

Its score of a row is the classifier's single logit over the prompt and the response, ``<pad>`` after them masked
out; the classifier pools at the last token that is not ``<pad>``, which is why its configuration must name this
vocabulary's ``<pad>`` (id 0) as its ``pad_token_id``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.core.lazy import require_transformers
from rl_gpu.envs.text.vocab import PAD


def _transformers() -> Any:
    return require_transformers("reward models")


class RewardModel:
    """The classifier in ``folder``, checked against a vocabulary of ``vocab_size`` tokens; called on ``[n, L]``
    int64 token buffers it returns their ``[n]`` float32 scores."""

    def __init__(self, folder: str, vocab_size: int) -> None:
        path = Path(folder)
        if not path.is_dir() or not (path / "config.json").is_file():
            raise UsageError(f"reward_model {folder!r}: not a Hugging Face model folder (a directory with a "
                             "config.json)")
        transformers = _transformers()
        try:
            config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as e:
            raise UsageError(f"reward_model {folder!r}: {str(e).splitlines()[0][:160]}") from None
        wrong = []
        if getattr(config, "num_labels", None) != 1:
            wrong.append(f"num_labels={getattr(config, 'num_labels', None)} (a reward model has 1)")
        if getattr(config, "vocab_size", None) != vocab_size:
            wrong.append(f"vocab_size={getattr(config, 'vocab_size', None)} (this task's vocabulary has {vocab_size})")
        if getattr(config, "pad_token_id", None) != PAD:
            wrong.append(f"pad_token_id={getattr(config, 'pad_token_id', None)} (this task's <pad> is {PAD})")
        if wrong:
            raise UsageError(f"reward_model {folder!r}: " + "; ".join(wrong))
        try:
            model = transformers.AutoModelForSequenceClassification.from_pretrained(
                str(path), local_files_only=True, trust_remote_code=False)
        except (OSError, ValueError, KeyError) as e:
            raise UsageError(f"reward_model {folder!r}: {str(e).splitlines()[0][:160]}") from None
        self.model = model.float().eval().requires_grad_(False)
        self.folder = str(path)

    @torch.no_grad()
    def __call__(self, tokens: Tensor) -> Tensor:
        model = self.model
        if next(model.parameters()).device != tokens.device:
            self.model = model = model.to(tokens.device)
        logits = model(input_ids=tokens, attention_mask=(tokens != PAD).long()).logits
        return logits[:, 0].float()
