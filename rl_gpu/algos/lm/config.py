"""Hyper-parameters of the language-model algorithms."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rl_gpu.core.schema import check_fields


def _check(config: object, name: str, rules: tuple[tuple[str, bool], ...], allowed: str) -> None:
    check_fields(config, label=lambda field: f"{name} hyper-parameter {field}")
    bad = [f"{field}={getattr(config, field)!r}" for field, ok in rules if not ok]
    if bad:
        raise ValueError(f"invalid {name} hyper-parameters: {', '.join(bad)} ({allowed})")


@dataclass(frozen=True)
class SFTConfig:
    """Supervised fine-tuning: the policy learns the task's reference answers by teacher forcing (the
    cross-entropy of every answer token, its <eos> included, given the prompt and the answer before it). Each
    iteration draws --num-envs problems of the training split; --learning-rate is Adam's rate."""

    init: str = ""
    """a checkpoint (RUN/seed-N/best.pt) of a transformer policy on this task, or a Hugging Face GPT-2 folder of one,
    to continue from ('': a fresh one)"""
    lora_rank: int = 0
    """train LoRA adapters of this rank (peft) on the frozen model instead of every weight (0: every weight)"""
    gradient_checkpointing: bool = False
    """recompute each transformer block in the backward pass instead of keeping its activations (less memory in
    the update, about one more forward pass of time)"""
    max_grad_norm: float = 1.0
    """the gradient is clipped to this global norm"""

    def __post_init__(self) -> None:
        _check(self, "sft", (("max_grad_norm", self.max_grad_norm > 0), ("lora_rank", self.lora_rank >= 0)),
               "max_grad_norm > 0, lora_rank >= 0")


@dataclass(frozen=True)
class GRPOConfig:
    """Group relative policy optimisation: each prompt is answered group_size times, each response's advantage is
    its reward against its group's, and the policy takes PPO's clipped step on every chosen token with a KL
    penalty toward a frozen reference (the starting policy). --learning-rate is Adam's rate; one iteration = one
    response per row."""

    group_size: int = 8
    """G, responses to each prompt (consecutive rows); --num-envs / G prompts per iteration"""

    init: str = ""
    """a checkpoint (RUN/seed-N/best.pt) of a transformer policy on this task (an --algo sft run), or a Hugging
    Face GPT-2 folder of one (rl-gpu export --format hf), to start from; it is also the KL reference ('': a fresh
    policy, its own reference)"""
    lora_rank: int = 0
    """train LoRA adapters of this rank (peft) on the frozen model instead of every weight (0: every weight)"""
    gradient_checkpointing: bool = False
    """recompute each transformer block in the backward pass instead of keeping its activations (less memory in
    the update, about one more forward pass of time)"""
    advantage: Literal["grpo", "rloo"] = "grpo"
    """grpo: reward minus the group's mean (over its std with scale_rewards); rloo: reward minus the mean of the
    group's other responses (REINFORCE leave-one-out)"""
    scale_rewards: bool = True
    """grpo: divide by the group's standard deviation (false: Dr. GRPO's unscaled advantage)"""
    loss_norm: Literal["token", "sequence", "constant"] = "token"
    """how token losses are averaged: token (every chosen token of the minibatch weighs the same: DAPO's);
    sequence (mean over each response, then over responses: the GRPO paper's); constant (sum over the
    minibatch's tokens over rows x response length: Dr. GRPO's)"""
    clip_coef: float = 0.2
    """the ratio of new to old token probability is clipped to [1 - clip_coef, 1 + clip_coef]"""
    kl_coef: float = 0.04
    """beta: weight of the per-token KL estimate k3 = exp(ref - new) - (ref - new) - 1 toward the reference"""
    temperature: float = 1.0
    """sampling temperature of the responses (and of the probabilities the loss compares)"""
    update_epochs: int = 1
    """passes over each iteration's responses"""
    num_minibatches: int = 1
    """minibatches per pass (whole groups, so each holds complete groups)"""
    max_grad_norm: float = 1.0
    """the gradient is clipped to this global norm"""

    def __post_init__(self) -> None:
        _check(self, "grpo", (
            ("group_size", self.group_size >= 2), ("clip_coef", 0 < self.clip_coef < 1), ("kl_coef", self.kl_coef >= 0),
            ("temperature", self.temperature > 0), ("update_epochs", self.update_epochs >= 1),
            ("num_minibatches", self.num_minibatches >= 1), ("max_grad_norm", self.max_grad_norm > 0),
            ("lora_rank", self.lora_rank >= 0)),
            "lora_rank >= 0, group_size >= 2, 0 < clip_coef < 1, kl_coef >= 0, temperature > 0, epochs and "
            "minibatches >= 1, max_grad_norm > 0")


@dataclass(frozen=True)
class RLHFPPOConfig:
    """PPO on a language-model policy as in RLHF: each token is a step whose reward is -kl_coef times the policy's
    log-ratio to the frozen reference (the starting policy), the task's score is added at the response's last
    chosen token, advantages are GAE over the tokens of each response with the policy's value head, and the
    update is PPO's clipped objective plus the value loss. --learning-rate is Adam's rate; one iteration = one
    response per row."""

    init: str = ""
    """a checkpoint (RUN/seed-N/best.pt) of a transformer policy on this task, or a Hugging Face GPT-2 folder of
    one, to start from; it is also the KL reference ('': a fresh policy, its own reference)"""
    lora_rank: int = 0
    """train LoRA adapters of this rank (peft) on the frozen model instead of every weight (0: every weight)"""
    gradient_checkpointing: bool = False
    """recompute each transformer block in the backward pass instead of keeping its activations (less memory in
    the update, about one more forward pass of time)"""
    kl_coef: float = 0.05
    """beta: each chosen token's reward is -beta * (log pi(token) - log pi_ref(token))"""
    gamma: float = 1.0
    """discount across the tokens of a response"""
    gae_lambda: float = 0.95
    """GAE's lambda across the tokens of a response"""
    clip_coef: float = 0.2
    """the ratio of new to old token probability is clipped to [1 - clip_coef, 1 + clip_coef]"""
    vf_coef: float = 0.5
    """weight of the value loss 0.5 * (V - return)^2"""
    temperature: float = 1.0
    """sampling temperature of the responses (and of the probabilities the loss compares)"""
    update_epochs: int = 4
    """passes over each iteration's responses"""
    num_minibatches: int = 4
    """minibatches of responses per pass"""
    max_grad_norm: float = 1.0
    """the gradient is clipped to this global norm"""

    def __post_init__(self) -> None:
        _check(self, "rlhf_ppo", (
            ("kl_coef", self.kl_coef >= 0), ("gamma", 0 <= self.gamma <= 1), ("gae_lambda", 0 <= self.gae_lambda <= 1),
            ("clip_coef", 0 < self.clip_coef < 1), ("vf_coef", self.vf_coef >= 0),
            ("temperature", self.temperature > 0), ("update_epochs", self.update_epochs >= 1),
            ("num_minibatches", self.num_minibatches >= 1),
            ("max_grad_norm", self.max_grad_norm > 0), ("lora_rank", self.lora_rank >= 0)),
            "lora_rank >= 0, kl_coef >= 0, gamma and gae_lambda in [0, 1], 0 < clip_coef < 1, vf_coef >= 0, "
            "temperature > 0, epochs and minibatches >= 1, max_grad_norm > 0")
