"""Generation's per-token step, as ``--compile`` asks: eager, compiled by Inductor, or replayed as a CUDA graph.

A response of R tokens is one pass over the prompt (:meth:`start`, eager) and R - 1 single-token steps
(:meth:`next_logits`), each attending to the key-value cache. Eager (``off``) steps slice the cache up to the
position; the compiled modes use :meth:`~rl_gpu.nn.transformer.TransformerPolicy.next_logits_at`, whose position
is a 0-dim tensor and whose attention masks the positions from it on (the new key joins the softmax apart), so every
step has the same shapes and reads the cache without writing it: one Inductor graph serves every position
(``inductor``; the step's keys and values are written into the cache after it), and on CUDA one captured graph per
batch size (the compiled step and the write) is replayed with the token and position copied into its static inputs
and the cache a static buffer (``cudagraphs``). All modes give the same logits to float tolerance (tested).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.nn.transformer import write_step
from rl_gpu.runtime.compile import CUDAGraphRunner, compile_unit

COMPILE_MODES = ("off", "inductor", "cudagraphs")
"""The ``--compile`` modes of the algorithms that generate (GRPO, RLHF-PPO)."""


class Decoder:
    """Starts responses and steps them one token at a time for ``policy`` in ``mode`` (module docstring)."""

    def __init__(self, policy, mode: str) -> None:
        if mode not in COMPILE_MODES:
            raise UsageError(f"--compile must be one of {', '.join(COMPILE_MODES)} here, got {mode!r}")
        if mode != "off" and not hasattr(policy, "next_logits_at"):
            raise UsageError(f"--compile {mode} compiles the built-in transformer kind's decoding step; a "
                             f"{policy.config().get('kind')!r} policy generates eagerly: use --compile off")
        self.policy, self.mode = policy, mode
        self.cache: Tensor | None = None
        self._step = None if mode == "off" else compile_unit(policy.next_logits_at, mode)
        self._graphs: dict[int, tuple[CUDAGraphRunner, Tensor, Tensor, Tensor]] = {}
        """cudagraphs: per batch size, the runner and its static token, position and cache."""

    def start(self, prompt: Tensor, group: int = 1) -> Tensor:
        """``[B, V]`` logits of the first response token after one pass over ``prompt`` ``[B, P]`` (rows in groups
        of ``group`` sharing a prompt, each prompt read once)."""
        logits, cache = self.policy.start(prompt, group)
        if self.mode != "cudagraphs":
            self.cache = cache
            return logits
        rows = cache.shape[2]
        if rows not in self._graphs:
            token = torch.zeros(rows, dtype=torch.long, device=cache.device)
            position = torch.zeros((), dtype=torch.long, device=cache.device)
            static = cache.clone()
            runner = CUDAGraphRunner(lambda: self._step_and_write(token, static, position))
            self._graphs[rows] = (runner, token, position, static)
        self._graphs[rows][3].copy_(cache)
        self.cache = self._graphs[rows][3]
        return logits

    def _step_and_write(self, token: Tensor, cache: Tensor, position: Tensor) -> Tensor:
        logits, written = self._step(token, cache, position)
        write_step(cache, written, position)
        return logits

    def next_logits(self, token: Tensor, position: int) -> Tensor:
        """``[B, V]`` logits of the token after ``token`` ``[B]``, written at buffer ``position``."""
        if self.cache is None:
            raise RuntimeError("Decoder.next_logits before start")
        if self.mode == "off":
            return self.policy.next_logits(token, self.cache, position)
        if self.mode == "inductor":
            return self._step_and_write(token, self.cache, torch.tensor(position, device=token.device))
        runner, static_token, static_position, _ = self._graphs[token.shape[0]]
        static_token.copy_(token)
        static_position.fill_(position)
        return runner().clone()
