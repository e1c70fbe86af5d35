"""The ``transformer`` policy kind as Hugging Face's GPT-2 and back (``transformers``, an optional extra).

:class:`~rl_gpu.nn.transformer.CausalTransformer` is GPT-2's architecture exactly: learned token and position
embeddings, pre-norm blocks of fused-QKV attention (queries, keys, values in that order, heads contiguous) and a
4d MLP, a final LayerNorm (eps 1e-5), attention scaled by 1 / sqrt(h); with GPT-2's ``activation_function="gelu"``
(the exact erf GELU, as ``nn.GELU()``), no dropout and an untied output layer, the two compute the same logits.
GPT-2 stores its linear layers as ``Conv1D`` (weights ``[in, out]``): transposed here. The value head has no place
in GPT-2 and is left out (a folder read back gets a fresh one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.core.lazy import require_transformers
from rl_gpu.nn.transformer import TransformerPolicy

_BLOCK = (("norm1", "ln_1", False), ("qkv", "attn.c_attn", True), ("out", "attn.c_proj", True),
          ("norm2", "ln_2", False), ("mlp.0", "mlp.c_fc", True), ("mlp.2", "mlp.c_proj", True))
"""(our name, GPT-2's name, a linear layer whose weight is transposed) in each block."""


def _transformers() -> Any:
    return require_transformers("Hugging Face folders")


def gpt2_config(policy: TransformerPolicy) -> dict[str, Any]:
    """GPT-2 configuration values of ``policy``'s model."""
    return {"vocab_size": policy.num_actions, "n_positions": policy.length, "n_embd": policy.width,
            "n_layer": policy.layers, "n_head": policy.heads, "activation_function": "gelu",
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": 1, "pad_token_id": 0}


def _names(layers: int) -> list[tuple[str, str, bool]]:
    """``(our name, GPT-2's name, transposed)`` of every tensor of a model of ``layers`` blocks."""
    pairs = [("embed.weight", "transformer.wte.weight", False), ("position.weight", "transformer.wpe.weight", False),
             ("norm.weight", "transformer.ln_f.weight", False), ("norm.bias", "transformer.ln_f.bias", False),
             ("lm_head.weight", "lm_head.weight", False)]
    for i in range(layers):
        for mine, theirs, linear in _BLOCK:
            pairs.append((f"blocks.{i}.{mine}.weight", f"transformer.h.{i}.{theirs}.weight", linear))
            pairs.append((f"blocks.{i}.{mine}.bias", f"transformer.h.{i}.{theirs}.bias", False))
    return pairs


def to_gpt2_state(policy: TransformerPolicy) -> dict[str, Tensor]:
    """``GPT2LMHeadModel``'s state dict holding ``policy``'s weights (copies on the CPU; LoRA adapters merged)."""
    policy = policy.merged()
    ours = {k: v.detach().cpu().float() for k, v in policy.model.state_dict().items()}
    return {theirs: (ours[mine].t() if linear else ours[mine]).contiguous().clone()
            for mine, theirs, linear in _names(policy.layers)}


def save_gpt2(policy: TransformerPolicy, folder: Path) -> Any:
    """Write ``policy`` as a ``GPT2LMHeadModel`` folder (``save_pretrained``); returns the model."""
    transformers = _transformers()
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**gpt2_config(policy)))
    missing, unexpected = model.load_state_dict(to_gpt2_state(policy), strict=False)
    if unexpected or [k for k in missing if not k.endswith(".attn.bias") and not k.endswith("masked_bias")]:
        raise RuntimeError(f"GPT-2 layout mismatch: missing {missing}, unexpected {unexpected}")
    model.eval().save_pretrained(folder)
    return model


def _layout_mismatch(config: Any, prompt_length: int) -> str:
    """What keeps a GPT-2 configuration from the built-in ``transformer`` kind's layout (:func:`gpt2_config`), or
    ``""`` when nothing does."""
    wanted = {"model_type": "gpt2", "activation_function": "gelu", "tie_word_embeddings": False}
    wrong = [f"{k}={getattr(config, k, None)!r}" for k, v in wanted.items() if getattr(config, k, None) != v]
    if not wrong and config.n_positions <= prompt_length:
        wrong = [f"n_positions={config.n_positions}"]
    return ", ".join(wrong)


def _read_config(folder: str | Path) -> Any:
    transformers = _transformers()
    try:
        return transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as e:
        raise UsageError(f"{folder}: not a Hugging Face model folder ({str(e).splitlines()[0][:160]})") from None


def is_our_gpt2(folder: str | Path, prompt_length: int) -> bool:
    """Whether ``folder`` holds a GPT-2 of the built-in ``transformer`` kind's layout, which :func:`load_gpt2` reads
    into that kind; any other causal LM goes to the ``hf_causal_lm`` kind."""
    try:
        return not _layout_mismatch(_read_config(folder), prompt_length)
    except UsageError:
        return False


def load_gpt2(folder: str | Path, prompt_length: int, device: torch.device | str = "cpu") -> TransformerPolicy:
    """A ``transformer`` policy from a GPT-2 folder of this layout (:func:`gpt2_config`'s values; any weights),
    answering after ``prompt_length`` tokens in a buffer of the folder's ``n_positions``; one-line
    :class:`UsageError` for a folder of another model."""
    config = _read_config(folder)
    wrong = _layout_mismatch(config, prompt_length)
    if wrong:
        raise UsageError(f"{folder}: a transformer policy reads GPT-2 folders with activation_function='gelu', "
                         f"untied output and more than {prompt_length} positions; this one has {wrong}")
    model = _transformers().GPT2LMHeadModel.from_pretrained(str(folder), local_files_only=True)
    policy = TransformerPolicy(config.vocab_size, prompt_length, config.n_positions - prompt_length, config.n_embd,
                               config.n_layer, config.n_head)
    theirs = model.state_dict()
    state = {mine: theirs[name].t() if linear else theirs[name] for mine, name, linear in _names(config.n_layer)}
    policy.model.load_state_dict({k: v.float().contiguous() for k, v in state.items()})
    return policy.to(device)
