"""Text generation as a batched environment: the rows hold prompts, each step appends one token per row, and a
response is an episode.

Shape legend: N rows, P prompt tokens, R response tokens (the most a response may have), L = P + R, V tokens in
the vocabulary, K numbers describing one problem.

Every shape is static. A row's episode lasts exactly R steps: once a row has written ``<eos>`` its only legal
token is ``<pad>`` (the action mask says so), and the episode ends at step R with the task's score as its only
reward. Every row of a batch therefore starts and ends together: a batch is a set of whole responses
(:meth:`TokenEnv.group` gives groups of consecutive rows one prompt each: GRPO's groups), and a response's tokens
after its ``<eos>`` carry no choice (their log-probability is exactly 0).

Observation ``[N, L + 1]`` (uint8): the token buffer (the prompt, then the response so far, ``<pad>`` after it)
and, last, how many response tokens are written. A policy reads the logits at position ``P + written - 1`` of a
causal model over the buffer (:class:`rl_gpu.nn.transformer.TransformerPolicy`); a model with a key-value cache
reads only the newest token (the cache is its memory).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.base import TensorEnv
from rl_gpu.envs.text.vocab import EOS, PAD, CharVocab


class TokenState(NamedTuple):
    """Inner state of N rows; every field has leading dimension N."""

    problem: Tensor
    """``[N, K]`` int64: the numbers that define the row's problem (the task's own encoding)."""
    tokens: Tensor
    """``[N, L]`` int64: the prompt, then the response so far, ``<pad>`` after it."""
    written: Tensor
    """``[N]`` int64: response tokens written so far (0..R)."""
    ended: Tensor
    """``[N]`` bool: the response has its ``<eos>``."""


@dataclass(frozen=True)
class TokenParams:
    """Parameters every text task has."""

    split: str = "train"
    """the problems drawn: ``train``, ``valid`` (held out, for choosing checkpoints) or ``test`` (held out)"""
    reward_model: str = ""
    """a local Hugging Face folder of a sequence classifier with one output over this task's tokens
    (:mod:`rl_gpu.envs.text.reward_model`): its score of the prompt and response is the reward (see
    ``reward_mix``); empty: the task's exact match alone"""
    reward_mix: str = "model"
    """with a ``reward_model``: ``model`` (its score alone) or ``sum`` (the exact match plus its score)"""

    def __post_init__(self) -> None:
        if self.split not in ("train", "valid", "test"):
            raise UsageError(f"split must be 'train', 'valid' or 'test', got {self.split!r}")
        if self.reward_mix not in ("model", "sum"):
            raise UsageError(f"reward_mix must be 'model' or 'sum', got {self.reward_mix!r}")


class TokenEnv(TensorEnv[TokenState]):
    """N rows of a text task (see the module docstring). A task writes its problems, prompts, reference answers
    and (optionally) its score; the base owns the buffer, the masks and the episode's end."""

    vocab: CharVocab
    params_type = TokenParams
    obs_dtype = torch.uint8

    @property
    @abc.abstractmethod
    def prompt_length(self) -> int:
        """P."""

    @property
    @abc.abstractmethod
    def response_length(self) -> int:
        """R: the most tokens a response has, its ``<eos>`` included."""

    @abc.abstractmethod
    def draw_problems(self, n: int, generator: torch.Generator) -> Tensor:
        """``[n, K]`` int64: ``n`` problems of :attr:`params`'s split, on ``self.device``."""

    @abc.abstractmethod
    def prompt(self, problem: Tensor) -> Tensor:
        """``[n, P]`` int64 prompt tokens of ``problem`` ``[n, K]``."""

    @abc.abstractmethod
    def answer(self, problem: Tensor) -> Tensor:
        """``[n, R]`` int64: the reference response (its ``<eos>`` included, ``<pad>`` after it)."""

    def score(self, problem: Tensor, response: Tensor) -> Tensor:
        """``[n]`` float32 reward of a finished ``response`` ``[n, R]``: 1 for the reference answer exactly (up to
        and including its ``<eos>``), else 0. So a run's win rate is its exact-match accuracy."""
        return (response == self.answer(problem)).all(dim=1).float()

    def reward(self, problem: Tensor, tokens: Tensor) -> Tensor:
        """``[n]`` float32 reward of finished token buffers ``[n, L]``: :meth:`score` of the response, or with a
        ``reward_model`` its score of the whole buffer (plus :meth:`score` with ``reward_mix=sum``)."""
        if self._reward_model is None:
            return self.score(problem, tokens[:, self.prompt_length:])
        scored = self._reward_model(tokens)
        if self.params.reward_mix == "sum":
            scored = scored + self.score(problem, tokens[:, self.prompt_length:])
        return scored

    def _check_params(self) -> None:
        super()._check_params()
        # The sizes follow the task's parameters; uint8 observations hold every id and every count.
        length = self.prompt_length + self.response_length
        if self.vocab.size > 256 or length > 255:
            raise UsageError(f"{type(self).__name__}: a vocabulary of at most 256 tokens and at most 255 tokens in a "
                             f"prompt and response fit its uint8 observation (got {self.vocab.size}, {length})")
        self.obs_shape = (length + 1,)
        self.num_actions = self.vocab.size
        self.max_game_length = self.response_length
        self._reward_model = None
        if self.params.reward_model:
            from rl_gpu.envs.text.reward_model import RewardModel

            self._reward_model = RewardModel(self.params.reward_model, self.vocab.size)

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> TokenState:
        problem = self.draw_problems(num_envs, generator)
        blank = torch.full((num_envs, self.response_length), PAD, dtype=torch.long, device=self.device)
        zero = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        return TokenState(problem, torch.cat([self.prompt(problem), blank], dim=1), zero, zero.bool())

    def _transition(self, s: TokenState, action: Tensor) -> tuple[TokenState, Tensor, Tensor]:
        # A finished row of a batch without auto-reset is stepped too and its result dropped: clamped in range.
        at = (self.prompt_length + s.written).clamp(max=s.tokens.shape[1] - 1).unsqueeze(1)
        tokens = s.tokens.scatter(1, at, action.long().unsqueeze(1))
        written = s.written + 1
        done = written == self.response_length
        if self._reward_model is not None and not bool(done.any()):
            # Rows run in step, so a reward model is called at a batch's last step only (a host read per step).
            reward = torch.zeros(done.shape, dtype=torch.float32, device=done.device)
        else:
            reward = torch.where(done, self.reward(s.problem, tokens), 0.0)
        return TokenState(s.problem, tokens, written, s.ended | (action == EOS)), reward, done

    def _observe(self, s: TokenState) -> Tensor:
        return torch.cat([s.tokens, s.written.unsqueeze(1)], dim=1).to(torch.uint8)

    def _legal_actions(self, s: TokenState) -> Tensor:
        pad = torch.arange(self.vocab.size, device=self.device) == PAD
        return torch.where(s.ended.unsqueeze(1), pad, ~pad)

    def group(self, group_size: int) -> None:
        """Give each group of ``group_size`` consecutive rows the problem of its first row, every row being at the
        start of its response (as between two whole batches of responses)."""
        at = torch.arange(self.num_envs, device=self.device) // group_size * group_size
        self.state = self.state._replace(inner=TokenState(*(x[at] for x in self.state.inner)))

    def decode(self, tokens: Tensor) -> list[str]:
        """The responses of an observation or token buffer ``[n, >= L]`` as text (up to each one's ``<eos>``)."""
        response = tokens[:, self.prompt_length:self.prompt_length + self.response_length].cpu()
        return [self.vocab.decode(row) for row in response]
