"""Supervised fine-tuning on a text task's reference answers (``--algo sft``): the warm start of GRPO.

Each iteration draws ``num_envs`` problems of the training split (the environment's own problem draw, from the
algorithm's random stream: the environment is not stepped) and takes one Adam step on the cross-entropy of the
reference answer's tokens (its ``<eos>`` included; ``<pad>`` after it carries no choice), teacher forced: one
causal pass over prompt and answer. The legal tokens are the environment's (``<pad>`` is never content), so the
probabilities learnt are those the policy acts with. One iteration counts N x R steps (tokens supervised) and no
episodes: validations measure the policy by generating on the environment (``evaluate``: its exact-match
accuracy is the win rate).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_gpu.algos.base import Collected, Iteration, PhaseTimer, Setup, no_phase
from rl_gpu.algos.lm.common import LanguageModelAlgorithm, response_log_probs
from rl_gpu.algos.lm.config import SFTConfig
from rl_gpu.algos.optim import clip_global_grad_norm
from rl_gpu.envs.text.vocab import EOS, PAD

METRICS = ("loss", "token_accuracy", "answer_accuracy", "grad_norm", "learning_rate", *Collected._fields)


def answer_masks(answer: Tensor, vocab_size: int) -> tuple[Tensor, Tensor]:
    """``(action_mask [N, R, V], chosen [N, R])`` of reference answers ``[N, R]``: up to and including the
    ``<eos>`` every token but ``<pad>`` is legal (chosen), after it only ``<pad>`` (forced), as the environment's
    masks are."""
    after_eos = (answer == EOS).long().cumsum(1) - (answer == EOS).long() > 0
    pad = torch.arange(vocab_size, device=answer.device) == PAD
    return torch.where(after_eos.unsqueeze(-1), pad, ~pad), ~after_eos


class SFT(LanguageModelAlgorithm):
    """The policy and its optimiser (see the module docstring)."""

    metric_names = METRICS
    name = "sft"
    streams = ("problems",)

    def __init__(self, setup: Setup, config: SFTConfig) -> None:
        super().__init__(setup, config.init, reference=False, lora_rank=config.lora_rank,
                         gradient_checkpointing=config.gradient_checkpointing)
        self.config = config

    def iterate(self, *, phase: PhaseTimer = no_phase) -> Iteration:
        env, policy = self.env, self._policy
        with phase("collect"):
            problem = env.draw_problems(env.num_envs, self.rngs["problems"])
            answer = env.answer(problem)
            tokens = torch.cat([env.prompt(problem), answer], dim=1)
            mask, chosen = answer_masks(answer, env.vocab.size)
        with phase("update"):
            with self.amp():
                log_prob, _ = response_log_probs(policy, tokens, mask)
            log_prob = log_prob.float()
            weight = chosen.float()
            loss = -(log_prob * weight).sum() / weight.sum()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            params = [p for p in policy.parameters() if p.requires_grad]
            grad_norm = clip_global_grad_norm(params, self.config.max_grad_norm)
            self.optimizer.step()
            with torch.no_grad():
                logits = policy.response_logits(tokens)
                right = (logits.masked_fill(~mask, torch.finfo(logits.dtype).min).argmax(-1) == answer) | ~chosen
        rows = float(env.num_envs)
        zero = torch.zeros((), device=self.device)
        collected = Collected(zero, zero, zero, zero, torch.tensor(rows * self.num_steps, device=self.device))
        learner = {"loss": loss.detach(), "grad_norm": grad_norm.float(),
                   "token_accuracy": (right & chosen).float().sum() / weight.sum(),
                   "answer_accuracy": right.all(1).float().mean()}
        return Iteration(collected, self.lr.clone(), learner)
