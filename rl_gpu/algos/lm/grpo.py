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

import copy
from typing import Any

import torch
from torch import Tensor, nn

from rl_gpu.algos.base import Collected, Iteration, PhaseTimer, Setup, no_phase
from rl_gpu.algos.lm.common import Responses, generate, response_log_probs, starting_policy, text_env
from rl_gpu.algos.lm.config import GRPOConfig
from rl_gpu.algos.lm.losses import clipped_token_loss, group_advantages, kl_k3, reduce_tokens
from rl_gpu.algos.optim import LearningRateSchedule, clip_global_grad_norm, load_optimizer_state, make_adam
from rl_gpu.core.errors import UsageError

METRICS = ("loss", "kl", "clip_fraction", "entropy", "grad_norm", "mixed_groups", "learning_rate",
           *Collected._fields)


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


class GRPO(LearningRateSchedule):
    """The policy, its frozen reference and its optimiser (see the module docstring)."""

    resume_notes: tuple[str, ...] = ()
    metric_names = METRICS

    def __init__(self, setup: Setup, config: GRPOConfig) -> None:
        self.env, self.config = text_env(setup.env, "grpo"), config
        self.device = self.env.device
        self.group_size = config.group_size
        if self.env.num_envs % self.group_size:
            raise UsageError(f"--algo grpo answers each prompt --group-size {self.group_size} times: it must divide "
                             f"--num-envs {self.env.num_envs}")
        groups = self.env.num_envs // self.group_size
        if groups % config.num_minibatches:
            raise UsageError(f"--algo grpo splits the {groups} groups of an iteration into --num-minibatches "
                             f"{config.num_minibatches} of whole groups: it must divide them")
        self.num_steps = steps_of_one_response(self.env, setup, "grpo")
        self._policy = starting_policy(config.init, self.env, setup.hidden_sizes, "grpo")
        self.reference = copy.deepcopy(self._policy).eval().requires_grad_(False)
        self.initial_learning_rate = float(setup.learning_rate)
        self.anneal_lr = setup.anneal_lr
        self.lr = torch.tensor(self.initial_learning_rate, device=self.device)
        self.optimizer = make_adam(self._policy.parameters(), self.lr, self.device)
        self.sample_rng = torch.Generator(device=self.device).manual_seed(setup.seed_for("sample"))
        self.shuffle_rng = torch.Generator(device=self.device).manual_seed(setup.seed_for("shuffle"))

    @classmethod
    def from_setup(cls, setup: Setup, config: GRPOConfig) -> GRPO:
        return cls(setup, config)

    @property
    def policy(self) -> nn.Module:
        return self._policy

    def initial_policy(self) -> nn.Module:
        return copy.deepcopy(self._policy).eval()

    def advantages(self, reward: Tensor) -> Tensor:
        return group_advantages(reward, self.group_size, leave_one_out=self.config.advantage == "rloo",
                                scale=self.config.scale_rewards)

    def update(self, responses: Responses) -> dict[str, Tensor]:
        config, policy = self.config, self._policy
        advantage = self.advantages(responses.reward)
        with torch.no_grad():
            reference, _ = response_log_probs(self.reference, responses.tokens, responses.action_mask,
                                              config.temperature)
        groups = self.env.num_envs // self.group_size
        per_minibatch = groups // config.num_minibatches
        params = [p for p in policy.parameters() if p.requires_grad]
        sums = {name: torch.zeros((), device=self.device) for name in ("loss", "kl", "clip_fraction", "entropy",
                                                                        "grad_norm")}
        for _ in range(config.update_epochs):
            order = torch.randperm(groups, generator=self.shuffle_rng, device=self.device)
            for start in range(0, groups, per_minibatch):
                group = order[start:start + per_minibatch]
                rows = (group.unsqueeze(1) * self.group_size
                        + torch.arange(self.group_size, device=self.device)).view(-1)
                chosen = responses.chosen[rows]
                log_prob, entropy = response_log_probs(policy, responses.tokens[rows], responses.action_mask[rows],
                                                       config.temperature)
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
            responses = generate(self._policy, self.env, self.sample_rng, self.config.temperature)
        with phase("update"):
            learner = self.update(responses)
        # mixed_groups: the share of groups whose rewards differ (a group of equal rewards teaches nothing).
        return Iteration(response_stats(responses), self.lr.clone(), learner)

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self._policy.state_dict(), "reference": self.reference.state_dict(),
                "optimizer": self.optimizer.state_dict(), "sample_rng": self.sample_rng.get_state(),
                "shuffle_rng": self.shuffle_rng.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._policy.load_state_dict(state["policy"])
        self.reference.load_state_dict(state["reference"])
        load_optimizer_state(self.optimizer, state["optimizer"], self.lr)
        self.sample_rng.set_state(state["sample_rng"].cpu())
        self.shuffle_rng.set_state(state["shuffle_rng"].cpu())
