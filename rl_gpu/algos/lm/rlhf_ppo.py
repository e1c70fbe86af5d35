"""PPO on a language-model policy as RLHF does it (``--algo rlhf_ppo``).

Shape legend: N responses (rows), R response positions (tokens), V tokens.

Each iteration: every row answers its prompt once (:func:`~rl_gpu.algos.lm.common.generate`); each chosen token t
is a step whose reward is ``-beta * (log pi_old(t) - log pi_ref(t))`` (the sampled estimate of the KL to the
frozen reference, the starting policy), and the task's score is added at the response's last chosen token;
the value head gives V at each position (the state before its token); advantages are GAE(gamma, lambda) over the
chosen tokens (:func:`rl_gpu.data.advantages.compute_gae`: the forced ``<pad>`` steps after ``<eos>`` are no
decisions, and the response ends at step R), normalised over the iteration's chosen tokens; then
``update_epochs`` passes of ``num_minibatches`` Adam steps on PPO's clipped objective plus ``vf_coef`` times the
value loss, both averaged over chosen tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_gpu.algos.base import Collected, Iteration, PhaseTimer, Setup, no_phase
from rl_gpu.algos.lm.common import LanguageModelAlgorithm, Responses, generate, response_stats
from rl_gpu.algos.lm.config import RLHFPPOConfig
from rl_gpu.algos.lm.decode import Decoder
from rl_gpu.algos.lm.losses import clipped_token_loss, reduce_tokens
from rl_gpu.algos.optim import clip_global_grad_norm
from rl_gpu.core.errors import UsageError
from rl_gpu.data.advantages import compute_gae
from rl_gpu.nn import distributions as D

METRICS = ("loss", "value_loss", "kl", "clip_fraction", "entropy", "grad_norm", "learning_rate", *Collected._fields)


def token_rewards(score: Tensor, log_prob: Tensor, ref_log_prob: Tensor, chosen: Tensor, kl_coef: float) -> Tensor:
    """``[N, R]`` per-token rewards: ``-kl_coef * (log_prob - ref_log_prob)`` on chosen tokens, plus ``score``
    ``[N]`` on each response's last chosen token (0 on forced tokens)."""
    last = chosen & ~torch.cat([chosen[:, 1:], torch.zeros_like(chosen[:, :1])], dim=1)
    shaped = -kl_coef * (log_prob - ref_log_prob)
    return torch.where(chosen, shaped, 0.0) + torch.where(last, score.unsqueeze(1), 0.0)


class RLHFPPO(LanguageModelAlgorithm):
    """The policy with its value head, its frozen reference and its optimiser (see the module docstring)."""

    metric_names = METRICS
    name = "rlhf_ppo"
    streams = ("sample", "shuffle")

    def __init__(self, setup: Setup, config: RLHFPPOConfig) -> None:
        super().__init__(setup, config.init, reference=True, lora_rank=config.lora_rank,
                         gradient_checkpointing=config.gradient_checkpointing)
        self.decoder = Decoder(self._policy, setup.compile)
        self.config = config
        if self.env.num_envs % config.num_minibatches:
            raise UsageError(f"--algo rlhf_ppo splits --num-envs {self.env.num_envs} responses into --num-minibatches "
                             f"{config.num_minibatches}: it must divide them")

    def _outputs(self, policy, responses: Responses, rows: Tensor | slice) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob, entropy, value)`` ``[n, R]`` of the responses' tokens at the loss's temperature."""
        with self.amp():
            logits, value = policy.response_outputs(responses.tokens[rows])
            action = responses.tokens[rows][:, policy.prompt_length:]
            log_prob, entropy = D.categorical_log_prob_entropy(logits / self.config.temperature,
                                                               responses.action_mask[rows], action)
        return log_prob.float(), entropy.float(), value.float()

    def advantages(self, responses: Responses) -> tuple[Tensor, Tensor, Tensor]:
        """``(advantage, return, kl)``: ``[N, R]`` each (kl: the sampled log-ratio to the reference)."""
        config, chosen = self.config, responses.chosen
        with torch.no_grad():
            ref_log_prob, _, _ = self._outputs(self.reference, responses, slice(None))
            _, _, value = self._outputs(self._policy, responses, slice(None))
        kl = responses.log_prob - ref_log_prob
        reward = token_rewards(responses.reward, responses.log_prob, ref_log_prob, chosen, config.kl_coef)
        # compute_gae works on [T, N]: each response's R steps, the last one terminal.
        end = torch.zeros_like(chosen.t())
        end[-1] = True
        zero = torch.zeros(chosen.shape[0], device=self.device)
        value = torch.where(chosen, value, 0.0)
        advantage, returns = compute_gae(reward.t(), value.t(), end, torch.zeros_like(end), zero, zero, config.gamma,
                                         config.gae_lambda, weight=chosen.t().float())
        advantage, returns = advantage.t(), returns.t()
        weight = chosen.float()
        mean = (advantage * weight).sum() / weight.sum()
        std = (((advantage - mean) ** 2 * weight).sum() / weight.sum()).sqrt()
        return torch.where(chosen, (advantage - mean) / (std + 1e-8), 0.0), returns, kl

    def update(self, responses: Responses) -> dict[str, Tensor]:
        config, policy = self.config, self._policy
        advantage, returns, kl = self.advantages(responses)
        rows_per_minibatch = self.env.num_envs // config.num_minibatches
        params = [p for p in policy.parameters() if p.requires_grad]
        sums = {name: torch.zeros((), device=self.device) for name in ("loss", "value_loss", "clip_fraction",
                                                                        "entropy", "grad_norm")}
        for _ in range(config.update_epochs):
            order = torch.randperm(self.env.num_envs, generator=self.rngs["shuffle"], device=self.device)
            for start in range(0, self.env.num_envs, rows_per_minibatch):
                rows = order[start:start + rows_per_minibatch]
                chosen = responses.chosen[rows]
                log_prob, entropy, value = self._outputs(policy, responses, rows)
                surrogate, clipped = clipped_token_loss(log_prob, responses.log_prob[rows], advantage[rows],
                                                        config.clip_coef)
                value_loss = reduce_tokens(0.5 * (value - returns[rows]) ** 2, chosen, "token")
                loss = reduce_tokens(surrogate, chosen, "token") + config.vf_coef * value_loss
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                sums["grad_norm"] += clip_global_grad_norm(params, config.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    sums["loss"] += loss.detach()
                    sums["value_loss"] += value_loss.detach()
                    sums["clip_fraction"] += reduce_tokens(clipped.float(), chosen, "token")
                    sums["entropy"] += reduce_tokens(entropy.detach(), chosen, "token")
        steps = config.update_epochs * config.num_minibatches
        out = {name: (value / steps).float() for name, value in sums.items()}
        out["kl"] = reduce_tokens(kl, responses.chosen, "token").float()
        return out

    def iterate(self, *, phase: PhaseTimer = no_phase) -> Iteration:
        with phase("collect"):
            responses = generate(self._policy, self.env, self.rngs["sample"], self.config.temperature,
                                 decoder=self.decoder)
        with phase("update"):
            learner = self.update(responses)
        return Iteration(response_stats(responses), self.lr.clone(), learner)
