"""A character vocabulary: one token per character, ``<pad>`` and ``<eos>`` first.

Ids are small integers, so token buffers fit ``uint8`` observations; :meth:`CharVocab.encode` and
:meth:`CharVocab.decode` convert between text and ``[L]`` int64 tensors on the host (tests, tokenizer export).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

PAD, EOS = 0, 1
"""The ids of ``<pad>`` (after a response's end, and never chosen as content) and ``<eos>`` (ends a response)."""


@dataclass(frozen=True)
class CharVocab:
    """``<pad>``, ``<eos>`` and then one token per character of ``chars``, in that order."""

    chars: str
    """The characters, each once."""

    def __post_init__(self) -> None:
        if len(set(self.chars)) != len(self.chars) or not self.chars:
            raise ValueError(f"a vocabulary's characters must be distinct and at least one, got {self.chars!r}")

    @property
    def tokens(self) -> tuple[str, ...]:
        """Every token's text, by id."""
        return ("<pad>", "<eos>", *self.chars)

    @property
    def size(self) -> int:
        """V, the number of tokens."""
        return len(self.chars) + 2

    def id(self, char: str) -> int:
        """The id of one character."""
        index = self.chars.find(char)
        if len(char) != 1 or index < 0:
            raise ValueError(f"{char!r} is not in the vocabulary {self.chars!r}")
        return index + 2

    def encode(self, text: str) -> Tensor:
        """``[len(text)]`` int64 ids of ``text``'s characters."""
        return torch.tensor([self.id(c) for c in text], dtype=torch.long)

    def decode(self, ids: Tensor | list[int], stop_at_eos: bool = True) -> str:
        """The text of ``ids`` (``<pad>`` dropped; up to the first ``<eos>`` with ``stop_at_eos``)."""
        out = []
        for i in [int(v) for v in ids]:
            if i == EOS and stop_at_eos:
                break
            if i >= 2:
                out.append(self.chars[i - 2])
            elif i == EOS:
                out.append("<eos>")
        return "".join(out)
