"""Low-rank adapters (``peft``'s LoRA) on a policy's model: injected, trained alone, folded back into plain layers.

A layer ``W`` becomes ``W + (alpha / r) B A`` with ``A`` ``[r, in]`` random and ``B`` ``[out, r]`` zero, so an adapted
model starts with its base model's outputs; alpha = 2 r and no dropout here. ``peft`` is an optional extra
(``rl-gpu[lm]``), imported when adapters are asked for.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from torch import nn

from rl_gpu.core.errors import UsageError


def check_rank(rank: object, largest: int) -> int:
    """``rank`` as an int in ``[1, largest]`` (the model's width); one-line :class:`UsageError` otherwise."""
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= largest:
        raise UsageError(f"--lora-rank must be between 1 and the model's width {largest}, got {rank!r}")
    return rank


def inject_lora(model: nn.Module, rank: int, target_modules: Sequence[str] | str) -> None:
    """Adapters of rank ``rank`` on ``target_modules`` of ``model`` (names, or ``"all-linear"``: every linear
    layer of a ``transformers`` model but its output layer), in place."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise UsageError("LoRA needs peft: pip install 'rl-gpu[lm]'") from None
    targets = target_modules if isinstance(target_modules, str) else list(target_modules)
    inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=targets), model)


def train_adapters_only(model: nn.Module, adapted: bool) -> None:
    """With adapters (``adapted``): only their weights train; without: every weight of ``model`` does."""
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(not adapted or "lora_" in name)


def merged_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every adapter folded into its layer's weight and the plain layer put back in its
    place: the same outputs, and the state-dict keys of the model before adapters."""
    model = copy.deepcopy(model)
    for name, module in list(model.named_modules()):
        if hasattr(module, "base_layer") and hasattr(module, "merge"):
            module.merge()
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, module.base_layer)
    return model
