"""The ``hf_causal_lm`` policy kind: any Hugging Face ``transformers`` causal language model (Llama, Qwen2, GPT-2,
Mistral, ...; ``transformers`` is an optional extra) as the policy of a text task, with a value head for PPO.

Shape legend: B rows, P prompt tokens, R response tokens, L = P + R, V tokens in the vocabulary.

It offers what the built-in ``transformer`` kind (:mod:`rl_gpu.nn.transformer`) offers the language-model
algorithms: ``act`` / ``evaluate`` / ``value`` over a text environment's observation ``[B, L + 1]``, generation with
the model's own key-value cache (``start``, ``next_logits``), and whole responses scored in one causal pass
(``response_logits``, ``response_outputs``). The model is built from its configuration, which the checkpoint
keeps as plain JSON (``hf_config``): only model types ``transformers`` itself defines can be named there
(``trust_remote_code`` is never set), and no weights are ever downloaded. ``--init FOLDER`` of ``--algo sft``,
``grpo`` or ``rlhf_ppo`` reads one from a local folder (:func:`load_hf_folder`); ``rl-gpu export --format hf``
writes it back with ``save_pretrained``. The vocabulary is the task's own: the model's ``vocab_size`` must equal it.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from rl_gpu.core.errors import UsageError
from rl_gpu.core.lazy import require_transformers
from rl_gpu.core.types import PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.lora import check_rank, inject_lora, merged_copy, train_adapters_only

MAX_CONFIG_CHARS = 65536
"""The most characters a stored ``hf_config`` may take as JSON."""


def _transformers() -> Any:
    return require_transformers("Hugging Face models")


def plain_config(config: Any) -> dict[str, Any]:
    """A ``transformers`` configuration as plain JSON values (what a checkpoint stores)."""
    return json.loads(config.to_json_string(use_diff=False))


class HFCausalLMPolicy(nn.Module):
    """A ``transformers`` causal LM built from ``hf_config`` (a plain dict with its ``model_type``), reading
    prompts of ``prompt_length`` and responses of ``response_length`` tokens, plus a value head on the last hidden
    state."""

    is_continuous = False
    rebuilt_off_meta = True
    """Its model computes buffers at construction that checkpoints do not hold (rotary frequencies): a checkpoint
    is checked against the architecture built on ``meta``, then built for real (:mod:`rl_gpu.nn.rebuild`)."""

    def __init__(self, hf_config: dict[str, Any], prompt_length: int, response_length: int,
                 lora_rank: int = 0) -> None:
        super().__init__()
        transformers = _transformers()
        if not isinstance(hf_config, dict) or not isinstance(hf_config.get("model_type"), str):
            raise ValueError("hf_config must be a transformers configuration as a dict with its model_type")
        fields = {k: v for k, v in hf_config.items() if k != "model_type"}
        try:
            config = transformers.AutoConfig.for_model(hf_config["model_type"], **fields)
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"hf_config: {str(e).splitlines()[0][:160]}") from None
        positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        length = prompt_length + response_length
        if positions is not None and positions < length:
            raise ValueError(f"the model reads at most {positions} positions; a prompt and response take {length}")
        self.model = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        self.hf_config = plain_config(self.model.config)
        text = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") else config
        self.value_head = nn.Linear(int(text.hidden_size), 1)
        self.num_actions = int(text.vocab_size)
        self.prompt_length, self.response_length = int(prompt_length), int(response_length)
        self.length = length
        self.obs_dim = length + 1
        self.width = int(text.hidden_size)
        self.lora_rank = 0
        self._cache_kw = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        if lora_rank:
            self.add_lora(lora_rank)

    # What the language-model algorithms ask of a policy besides acting (the transformer kind's names).
    def add_lora(self, rank: int) -> HFCausalLMPolicy:
        """Low-rank adapters (:mod:`rl_gpu.nn.lora`) on every linear layer of the model but its output layer
        (attention and MLP projections), the model's own weights frozen: only the adapters and the value head
        train. The adapters start at zero, so the policy acts as before."""
        if self.lora_rank:
            raise ValueError("this policy already has LoRA adapters")
        inject_lora(self.model, check_rank(rank, self.width), "all-linear")
        self.lora_rank = rank
        return self.freeze_base()

    def freeze_base(self) -> HFCausalLMPolicy:
        """With LoRA adapters: only they (and the value head) train; without: everything trains."""
        train_adapters_only(self.model, bool(self.lora_rank))
        return self

    def merged(self) -> HFCausalLMPolicy:
        """A copy with its LoRA adapters folded into the weights (the model's plain layers, the same outputs);
        itself without."""
        if not self.lora_rank:
            return self
        twin = HFCausalLMPolicy(self.hf_config, self.prompt_length, self.response_length)
        twin.model.load_state_dict(merged_copy(self.model).state_dict())
        twin.value_head.load_state_dict(self.value_head.state_dict())
        return twin.to(self.value_head.weight.device)

    def set_gradient_checkpointing(self, on: bool) -> None:
        """Recompute each layer in the backward pass (``transformers``' own, non-reentrant) or not. ``transformers``
        5 names it activation checkpointing; older releases, gradient checkpointing."""
        model = self.model
        if hasattr(model, "activation_checkpointing_enable"):
            if on:
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            elif model.is_activation_checkpointing:
                model.activation_checkpointing_disable()
        elif on:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        elif model.is_gradient_checkpointing:
            model.gradient_checkpointing_disable()

    def config(self) -> dict[str, Any]:
        extra = {"lora_rank": self.lora_rank} if self.lora_rank else {}
        return {"kind": "hf_causal_lm", "hf_config": self.hf_config, "prompt_length": self.prompt_length,
                "response_length": self.response_length, **extra}

    def _outputs(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """``(logits [B, T, V], last hidden state [B, T, d])`` of one causal pass over ``tokens`` ``[B, T]``."""
        out = self.model(input_ids=tokens.long(), output_hidden_states=True, use_cache=False)
        return out.logits.float(), out.hidden_states[-1]

    def _newest(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``(logits [B, V], hidden [B, d])`` at the newest token of each row's buffer."""
        tokens, written = obs[:, :self.length].long(), obs[:, self.length].long()
        logits, hidden = self._outputs(tokens)
        at = (self.prompt_length + written - 1).clamp(0, self.length - 1).view(-1, 1, 1)
        return (logits.gather(1, at.expand(-1, 1, logits.shape[-1])).squeeze(1),
                hidden.gather(1, at.expand(-1, 1, hidden.shape[-1])).squeeze(1))

    def act(self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
            deterministic: bool = False, noise: Tensor | None = None, critic_obs: Tensor | None = None
            ) -> PolicyOutput:
        logits, hidden = self._newest(obs)
        action, log_prob = D.categorical_act(logits, action_mask, generator, deterministic, noise)
        return PolicyOutput(action, log_prob, self.value_head(hidden.float()).squeeze(-1))

    def evaluate(self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None,
                 critic_obs: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        logits, hidden = self._newest(obs)
        log_prob, entropy = D.categorical_log_prob_entropy(logits, action_mask, action)
        return log_prob, entropy, self.value_head(hidden.float()).squeeze(-1)

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        return self.value_head(self._newest(obs)[1].float()).squeeze(-1)

    def update_normalizer(self, obs: Tensor, weight: Tensor | None = None, critic_obs: Tensor | None = None) -> None:
        """Token ids are not normalised."""

    def start(self, prompt: Tensor, group: int = 1) -> tuple[Tensor, Any]:
        """``(logits [B, V] of the first response token, the model's key-value cache)`` after one pass over
        ``prompt`` ``[B, P]``; with ``group`` g, rows come in groups of g with the same prompt, each read once."""
        out = self.model(input_ids=prompt[::group].long(), use_cache=True)
        cache = out.get("cache") if out.get("cache") is not None else out.past_key_values
        logits = out.logits[:, -1].float()
        if group > 1:
            logits = logits.repeat_interleave(group, dim=0)
            cache.batch_repeat_interleave(group)
        return logits, cache

    def next_logits(self, token: Tensor, cache: Any, position: int) -> Tensor:
        """``[B, V]`` logits of the token after ``token`` ``[B]``, written at buffer ``position`` (the cache grows
        by it, in place)."""
        rows = token.shape[0]
        out = self.model(input_ids=token.long().view(rows, 1), use_cache=True, **{self._cache_kw: cache},
                         position_ids=torch.full((rows, 1), position, dtype=torch.long, device=token.device))
        return out.logits[:, -1].float()

    def response_logits(self, tokens: Tensor, group: int = 1) -> Tensor:
        """``[B, R, V]``: at each response position, the logits that chose its token (one causal pass over
        ``tokens`` ``[B, L]``; ``group`` is accepted and every row computed)."""
        return self.response_outputs(tokens, group)[0]

    def response_outputs(self, tokens: Tensor, group: int = 1) -> tuple[Tensor, Tensor]:
        """``(logits [B, R, V], values [B, R])`` at each response position (the state before its token)."""
        logits, hidden = self._outputs(tokens[:, :-1])
        p = self.prompt_length
        return logits[:, p - 1:], self.value_head(hidden[:, p - 1:].float()).squeeze(-1)

    def save_hf(self, folder: Path) -> None:
        """The model alone (no value head; LoRA adapters folded in) as a ``save_pretrained`` folder."""
        self.merged().model.save_pretrained(str(folder))


def load_hf_folder(folder: str | Path, prompt_length: int, response_length: int,
                   device: torch.device | str = "cpu") -> HFCausalLMPolicy:
    """An ``hf_causal_lm`` policy holding the causal LM in a local Hugging Face ``folder`` (float32, a fresh value
    head); one-line :class:`UsageError` for a folder that holds none."""
    transformers = _transformers()
    try:
        config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True,
                                                                  trust_remote_code=False)
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"{folder}: not a Hugging Face causal language model folder "
                         f"({str(e).splitlines()[0][:160]})") from None
    try:
        policy = HFCausalLMPolicy(plain_config(config), prompt_length, response_length)
    except ValueError as e:
        raise UsageError(f"{folder}: {e}") from None
    policy.model.load_state_dict(model.float().state_dict())
    return policy.to(device)
