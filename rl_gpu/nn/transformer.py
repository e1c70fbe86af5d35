"""A small decoder-only transformer as a policy over a token buffer (:mod:`rl_gpu.envs.text.generation`), with a
key-value cache for generation.

Shape legend: B rows, T tokens in, L = P + R (prompt + response) the buffer, V the vocabulary, d the width,
H heads, h = d / H per head, C the layers.

:class:`CausalTransformer` is the model: learned token and position embeddings, C pre-norm blocks (causal
multi-head attention, a 4d GELU MLP), a final norm. :class:`TransformerPolicy` is the ``transformer`` policy kind:
it acts from an observation (the buffer and how many response tokens are written) by one causal pass over the
buffer, reading the position of the newest token (positions after it cannot change that position's output), and
it generates fast by :meth:`TransformerPolicy.start` / :meth:`TransformerPolicy.next_logits` (a key-value cache
``[C, 2, B, H, L, h]``: each new token attends to the cached keys and values of the tokens before it, so a
response of R tokens costs one pass over the prompt and R single-token passes). The cache is the policy's
memory: a run of generation is one episode.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from rl_gpu.core.types import PolicyOutput
from rl_gpu.nn import distributions as D
from rl_gpu.nn.deploy import DeployedActor
from rl_gpu.nn.lora import check_rank, inject_lora, merged_copy, train_adapters_only


class _Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def _split(self, x: Tensor) -> Tensor:
        """``[3, B, H, T, h]``: queries, keys and values of ``x`` ``[B, T, d]`` (indexed, not unpacked: TorchScript
        exports it)."""
        width = x.size(2)
        return self.qkv(self.norm1(x)).view(x.size(0), x.size(1), 3, self.heads, width // self.heads) \
            .permute(2, 0, 3, 1, 4)

    def _finish(self, x: Tensor, attended: Tensor) -> Tensor:
        x = x + self.out(attended.transpose(1, 2).reshape(x.size(0), x.size(1), x.size(2)))
        return x + self.mlp(self.norm2(x))

    def forward(self, x: Tensor, cache: Optional[Tensor] = None) -> Tensor:  # noqa: UP045 -- TorchScript's spelling
        """Causal pass over ``x`` ``[B, T, d]`` from position 0; writes keys and values into ``cache`` ``[2, B, H,
        >= T, h]`` when given."""
        qkv = self._split(x)
        if cache is not None:
            cache[:, :, :, :x.size(1)] = qkv[1:]
        return self._finish(x, F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True))

    def grouped(self, prompt: Tensor, response: Tensor, group: int) -> tuple[Tensor, Tensor]:
        """``(prompt [B / g, P, d], response [B, T, d])`` after this block, the prompts shared by ``g`` = ``group``
        consecutive response rows: each prompt is computed once, and each response attends to its prompt's keys
        and values (all of them) and causally to its own."""
        qkv_p, qkv_r = self._split(prompt), self._split(response)
        keys = torch.cat([qkv_p[1].repeat_interleave(group, dim=0), qkv_r[1]], dim=2)
        values = torch.cat([qkv_p[2].repeat_interleave(group, dim=0), qkv_r[2]], dim=2)
        p, t = prompt.size(1), response.size(1)
        visible = torch.ones(t, p + t, dtype=torch.bool, device=response.device).tril(diagonal=p)
        attended = F.scaled_dot_product_attention(qkv_r[0], keys, values, attn_mask=visible)
        return (self._finish(prompt, F.scaled_dot_product_attention(qkv_p[0], qkv_p[1], qkv_p[2], is_causal=True)),
                self._finish(response, attended))

    def step(self, x: Tensor, cache: Tensor, position: int) -> Tensor:
        """One new token ``x`` ``[B, 1, d]`` at ``position``, attending to the cached positions before it."""
        qkv = self._split(x)
        cache[:, :, :, position] = qkv[1:, :, :, 0]
        return self._finish(x, F.scaled_dot_product_attention(qkv[0], cache[0, :, :, :position + 1],
                                                              cache[1, :, :, :position + 1]))

    def step_at(self, x: Tensor, cache: Tensor, position: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`step` at a 0-dim long ``position``, reading the cache without writing it: ``(output [B, 1, d], the
        new token's keys and values [2, B, H, 1, h])``. Attention over every cached position, those at or after
        ``position`` masked, and the new key, with the softmax taken over both: no slice by a host value and no
        copy of the cache, so one graph of static shapes serves every position (compiled decoding, CUDA graphs)."""
        qkv = self._split(x)
        q, keys, values = qkv[0], cache[0], cache[1]
        scale = q.size(-1) ** -0.5
        before = torch.arange(keys.size(2), device=x.device) < position
        cached = (q @ keys.transpose(-1, -2) * scale).masked_fill(~before, float("-inf"))  # [B, H, 1, L]
        own = (q * qkv[1]).sum(-1, keepdim=True) * scale  # [B, H, 1, 1]
        weights = torch.softmax(torch.cat([cached, own], dim=-1), dim=-1)
        attended = weights[..., :-1] @ values + weights[..., -1:] * qkv[2]
        return self._finish(x, attended), qkv[1:]


class CausalTransformer(nn.Module):
    """Decoder-only transformer over token ids (see the module docstring)."""

    def __init__(self, vocab_size: int, max_length: int, width: int = 128, layers: int = 4, heads: int = 4) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"the width {width} must be a multiple of the heads {heads}")
        self.max_length, self.heads = max_length, heads
        self.gradient_checkpointing = False
        """Training passes keep only each block's input and recompute the block in the backward pass (activation
        memory of one block instead of all; about one more forward pass of time). A setting, not a weight: it is
        not in checkpoints or the config."""
        self.embed, self.position = nn.Embedding(vocab_size, width), nn.Embedding(max_length, width)
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        for block in self.blocks:  # GPT-2's scaling of the residual branches' last layers
            for last in (block.out, block.mlp[2]):
                nn.init.normal_(last.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, tokens: Tensor, cache: Tensor | None = None) -> Tensor:
        """``[B, T, d]`` final hidden states of a causal pass over ``tokens`` ``[B, T]`` (filling ``cache`` ``[C, 2,
        B, H, >= T, h]`` when given)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for i, block in enumerate(self.blocks):
            if cache is None and self._recompute():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x, None if cache is None else cache[i])
        return self.norm(x)

    def _recompute(self) -> bool:
        return self.gradient_checkpointing and torch.is_grad_enabled()

    def forward_grouped(self, prompt: Tensor, response: Tensor, group: int) -> tuple[Tensor, Tensor]:
        """What :meth:`forward` gives over ``[prompt row b // g, response row b]`` for every row b, with each of the
        ``B / g`` prompts ``[B / g, P]`` computed once: ``(prompt states [B / g, P, d], response states [B, T, d])``
        (prefix sharing: the responses to one prompt share its keys and values)."""
        p, t = prompt.shape[1], response.shape[1]
        x_p = self.embed(prompt) + self.position.weight[:p]
        x_r = self.embed(response) + self.position.weight[p:p + t]
        for block in self.blocks:
            if self._recompute():
                x_p, x_r = checkpoint(block.grouped, x_p, x_r, group, use_reentrant=False)
            else:
                x_p, x_r = block.grouped(x_p, x_r, group)
        return self.norm(x_p), self.norm(x_r)

    def step(self, token: Tensor, cache: Tensor, position: int) -> Tensor:
        """``[B, d]`` hidden state of one new token ``[B]`` at ``position`` (the cache holds the ones before)."""
        x = self.embed(token).unsqueeze(1) + self.position.weight[position]
        for i, block in enumerate(self.blocks):
            x = block.step(x, cache[i], position)
        return self.norm(x)[:, 0]

    def step_at(self, token: Tensor, cache: Tensor, position: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`step` at a 0-dim long ``position`` (:meth:`_Block.step_at`), the cache only read: ``(hidden
        state [B, d], the new token's keys and values [C, 2, B, H, 1, h])`` for the caller to write at
        ``position``."""
        x = self.embed(token).unsqueeze(1) + self.position(position)
        written = []
        for i, block in enumerate(self.blocks):
            x, kv = block.step_at(x, cache[i], position)
            written.append(kv)
        return self.norm(x)[:, 0], torch.stack(written)

    def new_cache(self, batch: int, dtype: torch.dtype | None = None) -> Tensor:
        """An empty key-value cache ``[C, 2, B, H, L, h]`` for ``batch`` rows."""
        width = self.embed.weight.shape[1]
        return torch.zeros(len(self.blocks), 2, batch, self.heads, self.max_length, width // self.heads,
                           dtype=dtype or self.embed.weight.dtype, device=self.embed.weight.device)


class TransformerPolicy(nn.Module):
    """The ``transformer`` policy kind over a text environment's observation ``[B, L + 1]`` (see the module
    docstring); a value head on the newest token's hidden state serves PPO."""

    is_continuous = False

    def __init__(self, vocab_size: int, prompt_length: int, response_length: int, width: int = 128,
                 layers: int = 4, heads: int = 4, lora_rank: int = 0) -> None:
        super().__init__()
        self.num_actions, self.prompt_length, self.response_length = vocab_size, prompt_length, response_length
        self.width, self.layers, self.heads = width, layers, heads
        self.length = prompt_length + response_length
        self.obs_dim = self.length + 1
        self.model = CausalTransformer(vocab_size, self.length, width, layers, heads)
        self.value_head = nn.Linear(width, 1)
        self.lora_rank = 0
        if lora_rank:
            self.add_lora(lora_rank)

    def add_lora(self, rank: int) -> TransformerPolicy:
        """Low-rank adapters (:mod:`rl_gpu.nn.lora`) on every linear layer of the blocks, and the model's own
        weights frozen: only the adapters and the value head train. The adapters start at zero, so the policy acts
        as before."""
        if self.lora_rank:
            raise ValueError("this policy already has LoRA adapters")
        inject_lora(self.model, check_rank(rank, self.width), ["qkv", "out", "mlp.0", "mlp.2"])
        self.lora_rank = rank
        return self.freeze_base()

    def freeze_base(self) -> TransformerPolicy:
        """With LoRA adapters: only they (and the value head) train; without: everything trains."""
        train_adapters_only(self.model, bool(self.lora_rank))
        return self

    def merged(self) -> TransformerPolicy:
        """A copy with its LoRA adapters folded into the weights (plain layers, the same outputs); itself without."""
        if not self.lora_rank:
            return self
        twin = TransformerPolicy(self.num_actions, self.prompt_length, self.response_length, self.width,
                                 self.layers, self.heads).to(self.value_head.weight.device)
        twin.model.load_state_dict(merged_copy(self.model).state_dict())
        twin.value_head.load_state_dict(self.value_head.state_dict())
        return twin

    def config(self) -> dict[str, Any]:
        extra = {"lora_rank": self.lora_rank} if self.lora_rank else {}
        return {"kind": "transformer", "vocab_size": self.num_actions, "prompt_length": self.prompt_length,
                "response_length": self.response_length, "width": self.width, "layers": self.layers,
                "heads": self.heads, **extra}

    def _newest(self, obs: Tensor) -> Tensor:
        """``[B, d]`` hidden state at the newest token of each row's buffer."""
        tokens, written = obs[:, :self.length].long(), obs[:, self.length].long()
        hidden = self.model(tokens)
        at = (self.prompt_length + written - 1).clamp(0, self.length - 1)
        return hidden.gather(1, at.view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])).squeeze(1)

    def act(self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
            deterministic: bool = False, noise: Tensor | None = None, critic_obs: Tensor | None = None
            ) -> PolicyOutput:
        h = self._newest(obs)
        action, log_prob = D.categorical_act(self.model.lm_head(h), action_mask, generator, deterministic, noise)
        return PolicyOutput(action, log_prob, self.value_head(h).squeeze(-1))

    def evaluate(self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None,
                 critic_obs: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        h = self._newest(obs)
        log_prob, entropy = D.categorical_log_prob_entropy(self.model.lm_head(h), action_mask, action)
        return log_prob, entropy, self.value_head(h).squeeze(-1)

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        return self.value_head(self._newest(obs)).squeeze(-1)

    def update_normalizer(self, obs: Tensor, weight: Tensor | None = None, critic_obs: Tensor | None = None) -> None:
        """Token ids are not normalised."""

    def export_module(self) -> DeployedActor:
        """The greedy next token of an observation ``[N, L + 1]`` as plain PyTorch (ONNX, TorchScript, int8)."""
        return DeployedActor(_NewestLogits(self.merged()), self.obs_dim, num_actions=self.num_actions)

    # Generation with the key-value cache, and whole responses scored at once (GRPO, SFT).
    def start(self, prompt: Tensor, group: int = 1) -> tuple[Tensor, Tensor]:
        """``(logits [B, V] of the first response token, cache)`` after one pass over ``prompt`` ``[B, P]``; with
        ``group`` g, rows come in groups of g with the same prompt, and each prompt is read once."""
        unique = prompt[::group].long()
        cache = self.model.new_cache(unique.shape[0])
        logits = self.model.lm_head(self.model(unique, cache)[:, -1])
        if group > 1:
            logits, cache = logits.repeat_interleave(group, dim=0), cache.repeat_interleave(group, dim=2)
        return logits, cache

    def next_logits(self, token: Tensor, cache: Tensor, position: int) -> Tensor:
        """``[B, V]`` logits of the token after ``token`` ``[B]``, written at buffer ``position``."""
        return self.model.lm_head(self.model.step(token.long(), cache, position))

    def next_logits_at(self, token: Tensor, cache: Tensor, position: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`next_logits` at a 0-dim long ``position`` tensor, the cache only read: ``(logits [B, V], the new
        token's keys and values [C, 2, B, H, 1, h])``, for :func:`write_step` to put into the cache at ``position``;
        the step that compiles to one graph."""
        hidden, written = self.model.step_at(token.long(), cache, position)
        return self.model.lm_head(hidden), written

    def response_logits(self, tokens: Tensor, group: int = 1) -> Tensor:
        """``[B, R, V]``: at each response position, the logits that chose its token, from one causal pass over
        the whole buffer ``tokens`` ``[B, L]`` (``group``: see :meth:`response_outputs`)."""
        return self.response_outputs(tokens, group)[0]

    def response_outputs(self, tokens: Tensor, group: int = 1) -> tuple[Tensor, Tensor]:
        """``(logits [B, R, V], values [B, R])`` at each response position (the state before its token) from one
        causal pass over ``tokens`` ``[B, L]``; with ``group`` g, rows come in groups of g with the same prompt,
        and each prompt is computed once (:meth:`CausalTransformer.forward_grouped`: the same values)."""
        tokens, p = tokens.long(), self.prompt_length
        if group == 1:
            hidden = self.model(tokens[:, :-1])[:, p - 1:]
        else:
            prompt, response = self.model.forward_grouped(tokens[::group, :p], tokens[:, p:-1], group)
            hidden = torch.cat([prompt[:, -1:].repeat_interleave(group, dim=0), response], dim=1)
        return self.model.lm_head(hidden), self.value_head(hidden).squeeze(-1)


class _NewestLogits(nn.Module):
    """``[N, V]`` logits of the newest token from an observation given as floats (a deployed actor's input)."""

    def __init__(self, policy: TransformerPolicy) -> None:
        super().__init__()
        self.model, self.prompt_length, self.length = policy.model, policy.prompt_length, policy.length

    def forward(self, obs: Tensor) -> Tensor:
        tokens, written = obs[:, :self.length].round().long(), obs[:, self.length].round().long()
        x = self.model.embed(tokens) + self.model.position.weight[:self.length]
        for block in self.model.blocks:
            x = block(x)
        at = (self.prompt_length + written - 1).clamp(0, self.length - 1)
        newest = self.model.norm(x).gather(1, at.view(-1, 1, 1).expand(-1, 1, x.size(2))).squeeze(1)
        return self.model.lm_head(newest)


def transformer_for_env(spec: Any, hidden_sizes, normalize_obs: bool = False, init_log_std: float = 0.0
                        ) -> TransformerPolicy:
    """``--policy transformer`` on a text environment: one block per entry of ``hidden_sizes``, all the same width
    (the model's d), one head per 32 units of it."""
    sizes = list(hidden_sizes)
    if not sizes or len(set(sizes)) != 1 or sizes[0] % 32:
        raise ValueError(f"--policy transformer takes --hidden-sizes as one width per block, every one the same "
                         f"multiple of 32 (e.g. 128 128 128 128), got {sizes}")
    horizon = spec.episode_horizon
    if len(spec.obs_shape) != 1 or horizon is None or spec.num_actions < 2 or spec.obs_shape[0] <= horizon + 1:
        raise ValueError("--policy transformer acts on text environments (a token buffer and its count: "
                         "rl_gpu.envs.text), e.g. Addition-v0")
    return TransformerPolicy(spec.num_actions, spec.obs_shape[0] - 1 - horizon, horizon, sizes[0], len(sizes),
                             sizes[0] // 32)


def write_step(cache: Tensor, written: Tensor, position: Tensor) -> None:
    """Write one step's keys and values ``[C, 2, B, H, 1, h]`` into ``cache`` ``[C, 2, B, H, L, h]`` at the 0-dim
    ``position``, in place."""
    cache.index_copy_(4, position.view(1), written)
