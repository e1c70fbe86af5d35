"""GRPO and RLOO on a text environment (``--algo grpo``).

Each iteration: every row of the environment answers its prompt once, the rows of each group of ``group_size``
consecutive rows the same prompt (:meth:`~rl_gpu.envs.text.generation.TokenEnv.group`,
:func:`~rl_gpu.algos.lm.common.generate`), the task scores each response,
each response's advantage is its reward against its group's (:func:`~rl_gpu.algos.lm.losses.group_advantages`),
and ``update_epochs`` passes of ``num_minibatches`` Adam steps minimise

    loss = norm_t( clipped_token_loss(t) + beta * k3(t) )

over the chosen tokens t of the minibatch's responses (tokens forced after a response's ``<eos>`` carry no
choice and no weight), where ``k3`` estimates the KL to the frozen reference (the starting policy) and
``norm_t`` is ``loss_norm``'s average. The default, ``token``, weighs every chosen token of the minibatch the same
(DAPO's, as TRL's GRPOTrainer does by default): a long response neither dilutes its tokens' weight (the GRPO
paper's per-sequence mean) nor scales with the budget of tokens (Dr. GRPO's constant).

One iteration is R environment steps of N rows (``num_steps`` = R; the run's step budget counts tokens).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_gpu.algos.base import Collected, Iteration, PhaseTimer, Setup, no_phase
from rl_gpu.algos.lm.common import LanguageModelAlgorithm, Responses, generate, response_log_probs, response_stats
from rl_gpu.algos.lm.config import GRPOConfig
from rl_gpu.algos.lm.decode import Decoder
from rl_gpu.algos.lm.losses import clipped_token_loss, group_advantages, kl_k3, reduce_tokens
from rl_gpu.algos.optim import clip_global_grad_norm
from rl_gpu.core.errors import UsageError

METRICS = ("loss", "kl", "clip_fraction", "entropy", "grad_norm", "mixed_groups", "learning_rate",
           *Collected._fields)


class GRPO(LanguageModelAlgorithm):
    """The policy, its frozen reference and its optimiser (see the module docstring)."""

    metric_names = METRICS
    name = "grpo"
    streams = ("sample", "shuffle")

    def __init__(self, setup: Setup, config: GRPOConfig) -> None:
        super().__init__(setup, config.init, reference=True, lora_rank=config.lora_rank,
                         gradient_checkpointing=config.gradient_checkpointing)
        self.decoder = Decoder(self._policy, setup.compile)
        self.config, self.group_size = config, config.group_size
        if self.env.num_envs % self.group_size:
            raise UsageError(f"--algo grpo answers each prompt --group-size {self.group_size} times: it must divide "
                             f"--num-envs {self.env.num_envs}")
        groups = self.env.num_envs // self.group_size
        if groups % config.num_minibatches:
            raise UsageError(f"--algo grpo splits the {groups} groups of an iteration into --num-minibatches "
                             f"{config.num_minibatches} of whole groups: it must divide them")

    def advantages(self, reward: Tensor) -> Tensor:
        return group_advantages(reward, self.group_size, leave_one_out=self.config.advantage == "rloo",
                                scale=self.config.scale_rewards)

    def update(self, responses: Responses) -> dict[str, Tensor]:
        config, policy = self.config, self._policy
        advantage = self.advantages(responses.reward)
        with torch.no_grad(), self.amp():
            reference, _ = response_log_probs(self.reference, responses.tokens, responses.action_mask,
                                              config.temperature, self.group_size)
        groups = self.env.num_envs // self.group_size
        per_minibatch = groups // config.num_minibatches
        params = [p for p in policy.parameters() if p.requires_grad]
        sums = {name: torch.zeros((), device=self.device) for name in ("loss", "kl", "clip_fraction", "entropy",
                                                                        "grad_norm")}
        for _ in range(config.update_epochs):
            order = torch.randperm(groups, generator=self.rngs["shuffle"], device=self.device)
            for start in range(0, groups, per_minibatch):
                group = order[start:start + per_minibatch]
                rows = (group.unsqueeze(1) * self.group_size
                        + torch.arange(self.group_size, device=self.device)).view(-1)
                chosen = responses.chosen[rows]
                with self.amp():
                    log_prob, entropy = response_log_probs(policy, responses.tokens[rows], responses.action_mask[rows],
                                                           config.temperature, self.group_size)
                log_prob, entropy = log_prob.float(), entropy.float()
                surrogate, clipped = clipped_token_loss(log_prob, responses.log_prob[rows], advantage[rows],
                                                        config.clip_coef)
                kl = kl_k3(log_prob, reference[rows])
                loss = reduce_tokens(surrogate + config.kl_coef * kl, chosen, config.loss_norm)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                sums["grad_norm"] += clip_global_grad_norm(params, config.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    sums["loss"] += loss.detach()
                    sums["kl"] += reduce_tokens(kl.detach(), chosen, "token")
                    sums["clip_fraction"] += reduce_tokens(clipped.float(), chosen, "token")
                    sums["entropy"] += reduce_tokens(entropy.detach(), chosen, "token")
        steps = config.update_epochs * config.num_minibatches
        out = {name: (value / steps).float() for name, value in sums.items()}
        grouped = responses.reward.view(-1, self.group_size)
        out["mixed_groups"] = (grouped.max(1).values > grouped.min(1).values).float().mean()
        return out

    def iterate(self, *, phase: PhaseTimer = no_phase) -> Iteration:
        with phase("collect"):
            self.env.group(self.group_size)
            responses = generate(self._policy, self.env, self.rngs["sample"], self.config.temperature,
                                 group=self.group_size, decoder=self.decoder)
        with phase("update"):
            learner = self.update(responses)
        # mixed_groups: the share of groups whose rewards differ (a group of equal rewards teaches nothing).
        return Iteration(response_stats(responses), self.lr.clone(), learner)
