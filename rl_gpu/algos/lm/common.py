"""What the language-model algorithms share: the text environment check, the policy to start from, and
generation of whole responses with the key-value cache.

Shape legend: N rows, P prompt tokens, R response tokens, L = P + R, V tokens.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from rl_gpu.algos.base import Collected, Setup
from rl_gpu.algos.lm.decode import Decoder
from rl_gpu.algos.optim import LearningRateSchedule, load_optimizer_state, make_adam
from rl_gpu.algos.precision import autocast_dtype
from rl_gpu.core.errors import UsageError
from rl_gpu.nn import distributions as D
from rl_gpu.nn.transformer import TransformerPolicy, transformer_for_env


def text_env(env: Any, algo: str) -> Any:
    """``env`` when it is a text environment (:class:`~rl_gpu.envs.text.generation.TokenEnv`), else a one-line
    :class:`UsageError`."""
    from rl_gpu.envs.text.generation import TokenEnv

    if not isinstance(env, TokenEnv):
        raise UsageError(f"--algo {algo} trains language-model policies on text environments (rl_gpu.envs.text, "
                         f"e.g. Addition-v0), not {type(env).__name__}")
    return env


def starting_policy(init: str, env: Any, hidden_sizes, algo: str) -> TransformerPolicy:
    """The policy read from ``init`` (a checkpoint of a transformer policy on an environment of the same sizes, or
    a Hugging Face GPT-2 folder of one: :mod:`rl_gpu.nn.gpt2`), or a fresh one sized by ``hidden_sizes``; one-line
    :class:`UsageError` otherwise."""
    if not init:
        try:
            return transformer_for_env(env.spec, hidden_sizes).to(env.device)
        except ValueError as e:
            raise UsageError(str(e)) from None
        except (MemoryError, RuntimeError) as e:  # torch's allocation failures are RuntimeErrors
            if not isinstance(e, MemoryError) and "memory" not in str(e).lower():
                raise
            width, blocks = list(hidden_sizes)[0], len(list(hidden_sizes))
            raise UsageError(f"--hidden-sizes: a transformer of {blocks} blocks of width {width} (about "
                             f"{12 * blocks * width * width * 4 / 2 ** 30:,.1f} GiB of weights) does not fit in the "
                             f"memory of {env.device}") from None
    from pathlib import Path

    from rl_gpu.nn.gpt2 import is_our_gpt2, load_gpt2
    from rl_gpu.nn.hf_causal import HFCausalLMPolicy, load_hf_folder
    from rl_gpu.nn.rebuild import load_policy
    from rl_gpu.runtime.checkpoint import CheckpointError

    try:
        if Path(init).is_dir():  # a Hugging Face folder (rl-gpu export --format hf, or any causal LM)
            if is_our_gpt2(init, env.prompt_length):
                policy = load_gpt2(init, env.prompt_length, env.device)
            else:
                policy = load_hf_folder(init, env.prompt_length, env.response_length, env.device)
        else:
            policy, _ = load_policy(init, env.device)
    except CheckpointError as e:
        raise UsageError(f"--init {e}") from None
    if not isinstance(policy, (TransformerPolicy, HFCausalLMPolicy)):
        raise UsageError(f"--init {init}: --algo {algo} continues a transformer policy, the checkpoint holds a "
                         f"{policy.config().get('kind')!r} policy")
    sizes = (env.vocab.size, env.prompt_length, env.response_length)
    if (policy.num_actions, policy.prompt_length, policy.response_length) != sizes:
        raise UsageError(f"--init {init}: its policy reads {policy.num_actions} tokens, prompts of "
                         f"{policy.prompt_length} and responses of {policy.response_length}; this environment has "
                         f"{sizes[0]}, {sizes[1]} and {sizes[2]}")
    return policy.train().requires_grad_(True).freeze_base()


class Responses(NamedTuple):
    """One response per row, as generated."""

    tokens: Tensor
    """``[N, L]`` int64: prompt and response."""
    action_mask: Tensor
    """``[N, R, V]`` bool: the legal tokens at each response position."""
    chosen: Tensor
    """``[N, R]`` bool: positions where the policy chose (more than one token was legal: up to the ``<eos>``)."""
    log_prob: Tensor
    """``[N, R]`` log-probability of each token under the sampling distribution (0 where nothing was chosen)."""
    reward: Tensor
    """``[N]`` the task's score of each response."""


@torch.no_grad()
def generate(policy: TransformerPolicy, env: Any, generator: torch.Generator | None, temperature: float = 1.0,
             deterministic: bool = False, group: int = 1, decoder: Decoder | None = None) -> Responses:
    """One response per row of ``env`` (every row at the start of its response), stepping the environment one
    token at a time; the policy reads the prompt once and then only each new token (its key-value cache). With
    ``group`` g the rows come in groups of g with the same prompt (:meth:`TokenEnv.group`), each read once.
    ``decoder``: the policy's decoding steps as ``--compile`` runs them (default: eager)."""
    p, r = env.prompt_length, env.response_length
    decoder = decoder or Decoder(policy, "off")
    step = env.observe()
    logits = decoder.start(step.obs[:, :p], group)
    masks, log_probs = [], []
    for t in range(r):
        action, log_prob = D.categorical_act(logits / temperature, step.action_mask, generator, deterministic)
        masks.append(step.action_mask)
        log_probs.append(log_prob)
        step = env.step(action)
        if t + 1 < r:
            logits = decoder.next_logits(action, p + t)
    mask = torch.stack(masks, dim=1)
    return Responses(step.final_obs[:, :p + r].long(), mask, mask.sum(-1) > 1, torch.stack(log_probs, dim=1),
                     step.reward.float())


def response_log_probs(policy: TransformerPolicy, tokens: Tensor, action_mask: Tensor, temperature: float = 1.0,
                       group: int = 1) -> tuple[Tensor, Tensor]:
    """``(log_prob [N, R], entropy [N, R])`` of the response tokens of ``tokens`` ``[N, L]`` under ``policy`` at
    ``temperature`` with the legal tokens ``action_mask`` ``[N, R, V]``, from one causal pass (differentiable;
    ``group``: rows in groups of that many sharing a prompt, each prompt computed once)."""
    logits = policy.response_logits(tokens, group) / temperature
    action = tokens[:, policy.prompt_length:]
    return D.categorical_log_prob_entropy(logits, action_mask, action)


def steps_of_one_response(env: Any, setup: Setup, algo: str) -> int:
    """R, refusing a ``--num-steps`` other than it: one iteration is one whole response per row."""
    length = env.response_length
    if setup.num_steps is not None and setup.num_steps != length:
        raise UsageError(f"--algo {algo} takes one whole response per row per iteration: --num-steps is the "
                         f"response length {length} here (got {setup.num_steps}); leave it out")
    return length


def response_stats(responses: Responses) -> Collected:
    """Every row finished one episode (a response of R steps): their mean reward and the share rewarded."""
    reward = responses.reward
    rows = torch.tensor(float(reward.numel()), device=reward.device)
    length = torch.tensor(float(responses.chosen.shape[1]), device=reward.device)
    return Collected(rows, reward.mean(), length, (reward > 0).float().mean(), rows * length)


class LanguageModelAlgorithm(LearningRateSchedule):
    """What SFT, GRPO and RLHF-PPO hold alike: the text environment, the policy (``init`` or fresh), optionally a
    frozen reference copy of it, Adam on a device learning rate, named random streams, and the precision of the
    update's forward passes (``bf16``: autocast, master weights and losses in fp32; ``auto``: bf16 on a CUDA device
    that has it, else fp32); their checkpointed state is all of these but the precision (the run's setting)."""

    resume_notes: tuple[str, ...] = ()
    name = ""
    streams: tuple[str, ...] = ()

    def __init__(self, setup: Setup, init: str, reference: bool, lora_rank: int = 0,
                 gradient_checkpointing: bool = False) -> None:
        self.env = text_env(setup.env, self.name)
        self.device = self.env.device
        self.num_steps = steps_of_one_response(self.env, setup, self.name)
        self._policy = starting_policy(init, self.env, setup.hidden_sizes, self.name)
        if lora_rank and self._policy.lora_rank not in (0, lora_rank):
            raise UsageError(f"--lora-rank {lora_rank}: the --init policy has adapters of rank "
                             f"{self._policy.lora_rank}; give that rank or leave the flag out")
        if lora_rank and not self._policy.lora_rank:
            self._policy.add_lora(lora_rank).to(self.device)
        self.reference = copy.deepcopy(self._policy).eval().requires_grad_(False) if reference else None
        if hasattr(self._policy, "set_gradient_checkpointing"):
            self._policy.set_gradient_checkpointing(gradient_checkpointing)
        else:
            self._policy.model.gradient_checkpointing = gradient_checkpointing
        self.initial_learning_rate = float(setup.learning_rate)
        self.anneal_lr = setup.anneal_lr
        self.lr = torch.tensor(self.initial_learning_rate, device=self.device)
        self.optimizer = make_adam(self._policy.parameters(), self.lr, self.device)
        self.rngs = {name: torch.Generator(device=self.device).manual_seed(setup.seed_for(name))
                     for name in self.streams}
        bf16 = self.device.type == "cuda" and torch.cuda.is_bf16_supported()
        self.precision = ("bf16" if bf16 else "fp32") if setup.precision == "auto" else setup.precision
        self._autocast = autocast_dtype(self.precision)

    def amp(self) -> contextlib.AbstractContextManager:
        """Autocast for the update's forward passes at the run's precision (nothing at fp32)."""
        if self._autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self._autocast)

    @classmethod
    def from_setup(cls, setup: Setup, config: Any) -> LanguageModelAlgorithm:
        return cls(setup, config)

    @property
    def policy(self) -> nn.Module:
        return self._policy

    def initial_policy(self) -> nn.Module:
        return copy.deepcopy(self._policy).eval()

    def state_dict(self) -> dict[str, Any]:
        state = {"policy": self._policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                 **{f"{name}_rng": rng.get_state() for name, rng in self.rngs.items()}}
        if self.reference is not None:
            state["reference"] = self.reference.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._policy.load_state_dict(state["policy"])
        if self.reference is not None:
            self.reference.load_state_dict(state["reference"])
        load_optimizer_state(self.optimizer, state["optimizer"], self.lr)
        for name, rng in self.rngs.items():
            rng.set_state(state[f"{name}_rng"].cpu())
