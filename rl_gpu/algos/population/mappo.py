"""K independent MAPPO (or IPPO) runs trained at once: ``rl-gpu train --algo mappo --parallel``.

Shape legend: K = members, N = worlds per member, M = agents per world, T = steps, D / A = one agent's continuous
action dimensions / discrete actions.

The population is :class:`~rl_gpu.algos.population.ppo.PopulationPPO`'s update over agent rows: member k owns worlds
``k*N:(k+1)*N`` of one ``K * N``-world environment, so rows ``k*N*M:(k+1)*N*M`` of the ``[T, K * N * M]``
agent-row rollout (:meth:`~rl_gpu.data.rollout.Rollout.agents_as_rows`), and each member's update is its lone
update on those columns: its own reward normaliser (a running return per agent), its own value normaliser (the
critic learns normalised targets, advantages are read in the task's units), its own minibatch permutations and
Adam step, every layer one batched call over the members.

Collection goes through the agent collector (:func:`rl_gpu.collect.agents.collect_agents`) on the shared
environment, every member's rows acting with its own parameters and with sampling noise drawn from its own
generator in the shape a lone run draws it (``[N * M, D]`` or ``[N * M, A]`` per step). The worlds themselves come
from the shared environment's stream, not from each member's: a multi-agent simulator such as VMAS keeps its
worlds' state in its own objects, which cannot be split per member and put back. So a member is a lone run in
distribution (its own initialisation, noise, minibatches and worlds no other member's choices influence), not
bit for bit as a PPO population's members are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from rl_gpu.algos.base import Collected, Iteration
from rl_gpu.algos.population.ppo import PopulationPPO
from rl_gpu.algos.ppo.algorithm import PPO
from rl_gpu.collect.reference import collect
from rl_gpu.core.types import PolicyOutput
from rl_gpu.data.episodes import agent_metrics, episode_metrics
from rl_gpu.data.rollout import Rollout
from rl_gpu.nn.distributions import categorical_noise, gaussian_noise


class _MemberNoise:
    """The population's actor as the agent collector calls it (``act(obs, mask, generator, deterministic,
    critic_obs=)`` over ``K * N * M`` rows): each member's noise drawn from its own generator (a frozen member's
    from a generator of the population's, so its own streams stay untouched), then one stacked call."""

    def __init__(self, population: PopulationMAPPO, active: Sequence[bool]) -> None:
        self.population = population
        self.generators = [m.policy_rng if on else population.frozen_rng
                           for m, on in zip(population.members, active)]

    @property
    def is_continuous(self) -> bool:
        return self.population.actor.is_continuous

    def act(self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
            deterministic: bool = False, critic_obs: Tensor | None = None) -> PolicyOutput:
        actor, rows = self.population.actor, obs.shape[0] // self.population.k
        noise = None
        if not deterministic:
            if actor.is_continuous:
                shape = (rows, self.population.action_dim)
                draw = gaussian_noise
            else:
                shape = (rows, action_mask.shape[-1])
                draw = categorical_noise
            noise = torch.cat([draw(shape, g, obs.device) for g in self.generators])
        return actor.act(obs, action_mask, None, deterministic, noise, critic_obs)

    def value(self, obs: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        return self.population.actor.value(obs, critic_obs)


class PopulationMAPPO(PopulationPPO):
    """K :class:`~rl_gpu.algos.mappo.algorithm.MAPPO` (or IPPO) members with one shared actor-critic each, trained
    on ``stepper``, an environment of the same task with ``K * N`` worlds."""

    def __init__(self, members: Sequence[PPO], stepper) -> None:
        super().__init__(members, stepper)
        self.centralised = members[0].centralised
        self.weighted = True  # agent rows: a lone MAPPO update weighs them (its rollouts are not all-ones)
        self.frozen_rng = torch.Generator(device=self.device).manual_seed(0)
        self.action_dim = members[0].env.spec.action_shape[-1] if self.actor.is_continuous else 0

    @staticmethod
    def _check_member(member: PPO) -> None:
        if getattr(member.policy, "num_agents", 1) > 1:
            raise ValueError("a population stacks one shared actor-critic per member: --no-share-params (one "
                             "network per agent) is not supported with --parallel")
        if getattr(member.policy, "world_agents", 0):
            raise ValueError("a population stacks one shared actor-critic per member, each row valued apart: "
                             "--world-critic is not supported with --parallel")

    def _build_collection(self) -> None:
        """No rollout engine: the shared environment is stepped by the agent collector."""

    def collect(self, active: Sequence[bool]) -> Rollout:
        """One ``[T, K * N, M]`` rollout of the shared environment, each member's worlds acted on by its policy."""
        self.actor.refresh()
        return collect(_MemberNoise(self, active), self.stepper, self.num_steps, None, episodic=self.episodic)

    def iterate(self, active: Sequence[bool] | None = None) -> Iteration:
        """Collect, then update the members marked ``active``; each member's statistics as a lone MAPPO reports
        them (``[K]`` tensors on the device), the per-agent returns included."""
        active = [True] * self.k if active is None else list(active)
        rollout = self.collect(active)
        metrics = self.update(rollout.agents_as_rows(critic=self.centralised), active)
        per_member = [agent_metrics(rollout.done[:, cols], rollout.episode_return[:, cols],
                                    rollout.controlled[cols]) for cols in self._worlds()]
        agents = {name: torch.stack([p[name] for p in per_member]) for name in per_member[0]}
        return Iteration(self._collection_metrics(rollout), torch.stack([m.lr for m in self.members]).float(),
                         metrics, agents)

    def _worlds(self) -> list[slice]:
        return [slice(i * self.n, (i + 1) * self.n) for i in range(self.k)]

    def _collection_metrics(self, rollout: Rollout) -> Collected:
        """A lone MAPPO's :func:`~rl_gpu.algos.base.collection_metrics` per member: episodes per world, returns
        averaged over the world's agents."""
        team = rollout.team_return()
        stats = [episode_metrics(rollout.done[:, w], team[:, w], rollout.episode_length[:, w])
                 for w in self._worlds()]
        stacked = {name: torch.stack([s[name] for s in stats]) for name in stats[0]}
        stacked["transitions"] = torch.stack([rollout.live[:, w].sum() for w in self._worlds()])
        return Collected.of(stacked)

    def _advantages(self, rollout: Rollout, reward: Tensor, active: Sequence[bool]) -> tuple[Tensor, Tensor]:
        """With value normalisation (each member's own, as :func:`~rl_gpu.algos.ppo.update.run_update` does for
        one): advantages from the values in the task's units, then each active member's targets join its
        statistics and are returned normalised."""
        norms = [m.value_normalizer for m in self.members]
        if norms[0] is None:
            return super()._advantages(rollout, reward, active)
        c = self.cols

        def per_member(x: Tensor, method: str) -> Tensor:
            return torch.cat([getattr(n, method)(x[..., i * c:(i + 1) * c]) for i, n in enumerate(norms)], -1)

        in_units = dataclasses.replace(rollout, value=per_member(rollout.value, "denormalize"),
                                       final_value=per_member(rollout.final_value, "denormalize"),
                                       bootstrap_value=per_member(rollout.bootstrap_value, "denormalize"))
        advantage, returns = super()._advantages(in_units, reward, active)
        for i, (n, on) in enumerate(zip(norms, active)):
            if on:
                n.update(returns[:, i * c:(i + 1) * c], rollout.weight[:, i * c:(i + 1) * c])
        return advantage, per_member(returns, "normalize")
