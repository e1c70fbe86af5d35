"""``Addition-v0``: a + b = ? with D-digit operands, written one character per token.

Prompt ``"007+450="`` (each operand zero-padded to D digits, P = 2D + 2), reference answer ``"0457<eos>"`` (the sum
zero-padded to D + 1 digits, then ``<eos>``; R = D + 2). Reward 1 for the reference answer exactly, else 0.

The splits: problem (a, b) with key k = a * 10^D + b falls in tenth ``bucket(k) = (k * 2654435761 mod 2^32) * 10
// 2^32`` of a multiplicative hash (spread over every digit and carry pattern): tenth 0 is the held-out ``test``
split, tenth 1 the ``valid`` split (for choosing checkpoints), the other eight tenths ``train``. Each split is drawn
uniformly: its keys are listed once (at most 10^6 problems: D <= 3).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.text.generation import TokenEnv, TokenParams
from rl_gpu.envs.text.vocab import EOS, CharVocab

VOCAB = CharVocab("0123456789+=")
_HASH, _SPACE = 2654435761, 2 ** 32


def split_of(a: Tensor, b: Tensor, digits: int) -> Tensor:
    """``[n]`` int64 split of each problem (a, b): 0 test, 1 valid, 2 train (see the module docstring)."""
    bucket = ((a * 10 ** digits + b) * _HASH % _SPACE) * 10 // _SPACE
    return bucket.clamp(max=2)


SPLITS = ("test", "valid", "train")
"""The splits by :func:`split_of`'s number."""


@dataclass(frozen=True)
class AdditionParams(TokenParams):
    """Addition's parameters (``Addition-v0?digits=2&split=valid``)."""

    digits: int = 3
    """D, the digits of each operand (1..3)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.digits, bool) or not isinstance(self.digits, int) or not 1 <= self.digits <= 3:
            raise UsageError(f"digits must be 1, 2 or 3 (each split's problems are listed), got {self.digits!r}")


_keys: dict[tuple[int, str, str], Tensor] = {}


def split_keys(digits: int, split: str, device: torch.device) -> Tensor:
    """``[S]`` int64 keys a * 10^D + b of every problem of ``split``, ascending (cached)."""
    cache = (digits, split, str(device))
    if cache not in _keys:
        key = torch.arange(10 ** (2 * digits), dtype=torch.long)
        _keys[cache] = key[split_of(key // 10 ** digits, key % 10 ** digits, digits) == SPLITS.index(split)].to(device)
    return _keys[cache]


def digits_of(value: Tensor, width: int) -> Tensor:
    """``[n, width]`` int64 decimal digits of ``value`` ``[n]``, most significant first, zero-padded."""
    powers = 10 ** torch.arange(width - 1, -1, -1, device=value.device)
    return value.unsqueeze(1) // powers % 10


class AdditionEnv(TokenEnv):
    """N rows of D-digit addition problems (see the module docstring); ``problem`` is ``[N, 2]`` (a, b)."""

    vocab = VOCAB
    params_type = AdditionParams

    @property
    def prompt_length(self) -> int:
        return 2 * self.params.digits + 2

    @property
    def response_length(self) -> int:
        return self.params.digits + 2

    def draw_problems(self, n: int, generator: torch.Generator) -> Tensor:
        keys = split_keys(self.params.digits, self.params.split, self.device)
        key = keys[torch.randint(0, keys.numel(), (n,), generator=generator, device=self.device)]
        scale = 10 ** self.params.digits
        return torch.stack([key // scale, key % scale], dim=1)

    def prompt(self, problem: Tensor) -> Tensor:
        d, n = self.params.digits, problem.shape[0]
        plus = torch.full((n, 1), VOCAB.id("+"), dtype=torch.long, device=problem.device)
        equals = torch.full((n, 1), VOCAB.id("="), dtype=torch.long, device=problem.device)
        return torch.cat([digits_of(problem[:, 0], d) + 2, plus, digits_of(problem[:, 1], d) + 2, equals], dim=1)

    def answer(self, problem: Tensor) -> Tensor:
        total = problem[:, 0] + problem[:, 1]
        eos = torch.full((problem.shape[0], 1), EOS, dtype=torch.long, device=problem.device)
        return torch.cat([digits_of(total, self.params.digits + 1) + 2, eos], dim=1)
