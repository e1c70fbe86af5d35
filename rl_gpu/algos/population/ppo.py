"""K independent PPO runs trained at once: one rollout of a ``K * N``-row environment and one update whose every
layer is one batched call over the members (:mod:`rl_gpu.algos.population.stacked`).

Shape legend: K = members, N = rows per member, T = steps, B = T * N slots per member, M = minibatch slots,
E = epochs.

Each member is an ordinary :class:`~rl_gpu.algos.ppo.PPO` bound to its own N-row environment, built exactly as a
lone run builds it; the population borrows its pieces and keeps them its own:

- member k owns rows ``k*N:(k+1)*N`` of the population's rollout; its random numbers (sampling noise, episode
  starts, opponents' moves, seats, minibatch permutations) are drawn from its own generators and environment in
  the order a lone run draws them, and its environment's state is carried from one rollout to the next;
- GAE runs over all ``K * N`` columns at once (each column is its own recursion, so the values are a lone run's);
- each minibatch gathers ``[K, M]`` slots (member k's with its own permutation), evaluates :func:`ppo_loss` for
  all members in one vmapped call, and backpropagates the sum of the K losses (members share no parameter, so
  each gets exactly its own gradient); then each member's own :class:`~rl_gpu.algos.ppo.update.UpdateUnits`
  step clips by that member's own gradient norm and steps its own Adam with its own learning rate, and a
  member whose ``target_kl`` stop has fired undoes its step, as a lone update does.

What differs from K lone runs is rounding only: a batched matrix multiply may sum in another order than a plain
one (``tests/algos/test_population.py`` measures the difference).

Members can be frozen (:meth:`PopulationPPO.iterate`'s ``active``): a finished member's rows keep being stepped
(the batch keeps its shape) with noise that draws nothing from its generators, and its parameters, optimiser and
random streams are left untouched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from rl_gpu.algos.base import COLLECTION_METRICS, Collected, Iteration
from rl_gpu.algos.optim import clip_grad_norms, fused_adam_ready, fused_adam_steps
from rl_gpu.algos.population.stacked import StackedActor, StackedModules
from rl_gpu.algos.ppo.algorithm import PPO, UPDATE_METRICS
from rl_gpu.algos.ppo.loss import LOSS_STATS, Coefficients, explained_variance, ppo_loss
from rl_gpu.algos.ppo.update import MINIBATCH_ROW, check_minibatches, draw_permutations
from rl_gpu.collect.engine import RolloutEngine, RolloutNoise
from rl_gpu.core.types import VecEnv
from rl_gpu.data.advantages import compute_gae
from rl_gpu.data.episodes import episode_metrics
from rl_gpu.data.rollout import Rollout

HYPER_PARAMETERS = ("learning_rate", "ent_coef", "clip_coef")
"""What may differ between members (population-based training perturbs these); every other setting is shared."""


def _cat_rows(parts: Sequence[Any], dim: int) -> Any:
    """Concatenate equally nested tuples of tensors along ``dim`` (None leaves stay None)."""
    first = parts[0]
    if first is None:
        return None
    if isinstance(first, Tensor):
        return torch.cat(list(parts), dim)
    fields = [_cat_rows(p, dim) for p in zip(*parts)]
    return type(first)(*fields) if hasattr(first, "_fields") else type(first)(fields)


def _rows(tree: Any, start: int, stop: int) -> Any:
    if tree is None or not isinstance(tree, (Tensor, tuple)):
        return tree
    if isinstance(tree, Tensor):
        return tree[start:stop]
    fields = [_rows(x, start, stop) for x in tree]
    return type(tree)(*fields) if hasattr(tree, "_fields") else type(tree)(fields)


def _per_member(x: Tensor, k: int) -> Tensor:
    """``[T, K * N, ...]`` -> ``[K, T * N, ...]``: member k's slots in a lone run's flattened order."""
    t, rows = x.shape[:2]
    return x.view(t, k, rows // k, *x.shape[2:]).movedim(1, 0).reshape(k, t * (rows // k), *x.shape[2:])


def _gather(v: Tensor, flat_idx: Tensor, shape: torch.Size) -> Tensor:
    """``v[k, idx[k]]`` for every member k (``v``: ``[K, S, ...]``; ``flat_idx``: ``idx + k S`` flattened), by
    ``index_select`` on the ``[K S, ...]`` view: on the CPU several times faster than the two-index gather."""
    return v.reshape(-1, *v.shape[2:]).index_select(0, flat_idx).view(*shape, *v.shape[2:])


class PopulationPPO:
    """K :class:`~rl_gpu.algos.ppo.PPO` members (each bound to its own N-row environment) trained together on
    ``stepper``, an environment of the same kind with ``K * N`` rows that only steps (its own random stream and
    state are never used).

    ``ent_coef``, ``clip_coef`` and each member's learning rate are per-member device tensors
    (:meth:`set_hyper_parameters`), so population-based training changes them without re-tracing anything.
    """

    def __init__(self, members: Sequence[PPO], stepper: VecEnv) -> None:
        members = list(members)
        first = members[0]
        if any(m.env is None for m in members):
            raise ValueError("every population member must be bound to its own environment")
        n, t = first.env.num_envs, first.num_steps
        shared = dataclasses.replace(first.config, ent_coef=0.0, clip_coef=1.0)
        for m in members:
            if (m.env.num_envs, m.num_steps) != (n, t) or m.env.spec != first.env.spec:
                raise ValueError("population members must have the same environment, N and T")
            if dataclasses.replace(m.config, ent_coef=0.0, clip_coef=1.0) != shared:
                raise ValueError("population members may differ only in " + ", ".join(HYPER_PARAMETERS))
            self._check_member(m)
        if stepper.num_envs != len(members) * n:
            raise ValueError(f"the stepping environment has {stepper.num_envs} rows, not K * N = "
                             f"{len(members)} * {n}")
        self.members = members
        self.k, self.n, self.num_steps = len(members), n, t
        self.config = first.config
        self.device = first.device
        self.cols = first.rows_of(first.env)
        """Columns of a member in the rollouts its update learns from (N; N * M agent rows for a multi-agent
        learner)."""
        self.episodic = PPO.episodic(first.env)
        self.weighted = self.episodic or first.env.spec.num_players > 1
        check_minibatches(t * self.cols, self.config)
        self.stacked = StackedModules([m.policy for m in members])
        self.actor = StackedActor(self.stacked)
        self.stepper = stepper
        self._build_collection()
        self.ent_coef = torch.tensor([m.config.ent_coef for m in members], device=self.device)
        self.clip_coef = torch.tensor([m.config.clip_coef for m in members], device=self.device)
        self.per_member_coefficients = any(m.config != first.config for m in members)
        """Whether :func:`ppo_loss` reads the ``[K]`` coefficient tensors (set by :meth:`set_hyper_parameters`);
        while False it reads the shared configuration's floats, exactly as a lone run does."""
        self.metric_names = (*UPDATE_METRICS, "learning_rate", *COLLECTION_METRICS)
        self._frozen_noise: dict[int, RolloutNoise] = {}

    @staticmethod
    def _check_member(member: PPO) -> None:
        """Refuse a member this population cannot train (``ValueError``)."""
        if not member.env.spec.functional:
            raise ValueError(f"{type(member.env).__name__} is stepped on the host: a population needs a tensor "
                             "environment it can step as one batch")

    def _build_collection(self) -> None:
        """The rollout engine over the ``K * N``-row stepper and its reused storage."""
        self.engine = RolloutEngine(self.actor, self.stepper, self.num_steps, episodic=self.episodic)
        self.storage = self.engine.empty_rollout()

    # -- hyper-parameters ---------------------------------------------------------------------------------------

    def hyper_parameters(self) -> dict[str, list[float]]:
        """Each member's current learning rate (initial value of its schedule), ent_coef and clip_coef."""
        return {"learning_rate": [m.initial_learning_rate for m in self.members],
                "ent_coef": self.ent_coef.tolist(), "clip_coef": self.clip_coef.tolist()}

    def set_hyper_parameters(self, member: int, values: dict[str, float]) -> None:
        """Set member ``member``'s hyper-parameters (any of :data:`HYPER_PARAMETERS`), in place."""
        unknown = set(values) - set(HYPER_PARAMETERS)
        if unknown:
            raise ValueError(f"unknown hyper-parameters {sorted(unknown)}; known: {', '.join(HYPER_PARAMETERS)}")
        m = self.members[member]
        if "learning_rate" in values:
            m.initial_learning_rate = float(values["learning_rate"])
            m.set_learning_rate(float(values["learning_rate"]))
        for name in ("ent_coef", "clip_coef"):
            if name in values:
                getattr(self, name)[member] = float(values[name])
                self.per_member_coefficients = True

    def copy_member(self, source: int, target: int) -> None:
        """Member ``target`` takes member ``source``'s weights, normaliser statistics and optimiser state
        (PBT's exploit), in place; its own random streams and environment are kept."""
        src, dst = self.members[source], self.members[target]
        with torch.no_grad():
            dst.policy.load_state_dict(src.policy.state_dict())
            for p_src, p_dst in zip(src.policy.parameters(), dst.policy.parameters()):
                s_state, d_state = src.optimizer.state.get(p_src, {}), dst.optimizer.state.get(p_dst)
                if d_state is None or not s_state:
                    continue
                for name, value in s_state.items():
                    if isinstance(value, Tensor):
                        d_state[name].copy_(value)
            if src.reward_normalizer is not None and dst.reward_normalizer is not None:
                dst.reward_normalizer.load_state_dict(src.reward_normalizer.state_dict())

    # -- the iteration ------------------------------------------------------------------------------------------

    def _noise(self, active: Sequence[bool]) -> RolloutNoise:
        parts = []
        for i, (m, on) in enumerate(zip(self.members, active)):
            if on or i not in self._frozen_noise:
                noise = m.engine(m.env, self.num_steps, self.episodic).draw(m.policy_rng, m.opponent_rng)
                self._frozen_noise[i] = noise
            parts.append(self._frozen_noise[i])
        return RolloutNoise(
            policy=_cat_rows([p.policy for p in parts], 1), opponent=_cat_rows([p.opponent for p in parts], 1),
            reset=_cat_rows([p.reset for p in parts], 1), initial=_cat_rows([p.initial for p in parts], 0),
            learner_seat=torch.cat([p.learner_seat for p in parts]),
        )

    def collect(self, active: Sequence[bool]) -> Rollout:
        """One ``[T, K * N]`` rollout; each member's environment keeps the state its rows ended in."""
        noise = self._noise(active)
        state = None if self.episodic else _cat_rows([m.env.state for m in self.members], 0)
        self.actor.refresh()
        rollout, state = self.engine.run(noise, state, out=self.storage)
        if not self.episodic:
            for i, m in enumerate(self.members):
                if active[i]:
                    m.env.state = _rows(state, i * self.n, (i + 1) * self.n)
        rollout.all_weights_one = not self.weighted
        return rollout

    def iterate(self, active: Sequence[bool] | None = None) -> Iteration:
        """Collect, then update the members marked ``active`` (default: all). Returns every member's statistics,
        ``[K]`` tensors on the device (a frozen member's entries are meaningless; :meth:`Iteration.member`
        selects one), without host reads."""
        active = [True] * self.k if active is None else list(active)
        rollout = self.collect(active)
        metrics = self.update(rollout, active)
        return Iteration(self._collection_metrics(rollout), torch.stack([m.lr for m in self.members]).float(),
                         metrics)

    def _collection_metrics(self, rollout: Rollout) -> Collected:
        """:data:`COLLECTION_METRICS` per member (``[K]`` each), as :meth:`Rollout.episode_stats` computes them
        for one."""
        k = self.k

        def members(x: Tensor) -> Tensor:
            return x.view(x.shape[0], k, -1).movedim(1, 0).flatten(1)

        stats = episode_metrics(members(rollout.done), members(rollout.episode_return),
                                members(rollout.episode_length), dim=1)
        return Collected.of({**stats, "transitions": members(rollout.live).sum(1)})

    def _rewards(self, rollout: Rollout) -> Tensor:
        """The rewards advantages see: with ``norm_reward``, each member's columns scaled by its own
        normaliser (which advances its statistics), as a lone update does."""
        reward = rollout.reward
        if not self.config.norm_reward:
            return reward
        weight = rollout.weight if self.weighted else None
        parts = []
        for i, m in enumerate(self.members):
            cols = slice(i * self.cols, (i + 1) * self.cols)
            normalizer = m.reward_normalizer  # built with the member (bound to its environment)
            parts.append(normalizer.normalize(reward[:, cols], rollout.done[:, cols],
                                              None if weight is None else weight[:, cols]))
        return torch.cat(parts, 1)

    def _advantages(self, rollout: Rollout, reward: Tensor, active: Sequence[bool]) -> tuple[Tensor, Tensor]:
        """``(advantage, returns)``, ``[T, K * cols]`` each: GAE over every member's columns at once."""
        config = self.config
        return compute_gae(
            reward * config.reward_scale, rollout.value, rollout.terminated, rollout.truncated,
            rollout.final_value, rollout.bootstrap_value, config.gamma, config.gae_lambda,
            rollout.weight if self.weighted else None)

    def _loss(self, state: dict[str, Tensor], mb: dict[str, Tensor | None], ent_coef: Tensor,
              clip_coef: Tensor) -> tuple[Tensor, Tensor]:
        """One member's minibatch loss and :data:`LOSS_STATS` (called under vmap)."""
        stacked = self.stacked

        class _Member:
            @staticmethod
            def evaluate(obs: Tensor, action: Tensor, action_mask: Tensor | None,
                         critic_obs: Tensor | None = None) -> Any:
                return stacked.call_member("evaluate", state, obs, action, action_mask, critic_obs)

        config = Coefficients(self.config, ent_coef, clip_coef) if self.per_member_coefficients else self.config
        mb = {"action_mask": None, "weight": None, **mb}
        loss, stats = ppo_loss(_Member, mb, config)
        return loss, torch.stack([stats[name].detach() for name in LOSS_STATS])

    def _step(self, active: Sequence[bool], keep: Tensor | None) -> Tensor:
        """Each active member's :meth:`UpdateUnits.step <rl_gpu.algos.ppo.update.UpdateUnits.step>` (clip by its
        own gradient norm, its own Adam step, undone where ``keep`` is False); returns the ``[K]`` norms (0 for a
        frozen member). With every member active, no KL stop and fused CPU Adam, the K clips and steps run as
        one multi-tensor clip and one fused kernel per member (the same operations, without a Python
        ``step()`` per member)."""
        members = self.members
        if keep is None and all(active) and all(fused_adam_ready(m.optimizer) for m in members):
            norms = clip_grad_norms([m.units.params for m in members], self.config.max_grad_norm)
            fused_adam_steps([m.optimizer for m in members])
            return norms.float()
        return torch.stack([
            m.units.step(keep[i] if keep is not None else None).float() if on
            else torch.zeros((), device=self.device) for i, (m, on) in enumerate(zip(members, active))])

    def update(self, rollout: Rollout, active: Sequence[bool]) -> dict[str, Tensor]:
        """One PPO update of every active member on its columns of ``rollout``; ``[K]`` metrics."""
        config, k, device = self.config, self.k, self.device
        advantage, returns = self._advantages(rollout, self._rewards(rollout), active)
        continuous = self.actor.is_continuous
        flat = {
            "obs": _per_member(rollout.obs, k), "action": _per_member(rollout.action, k),
            "action_mask": None if continuous else _per_member(rollout.action_mask, k),
            "log_prob": _per_member(rollout.log_prob, k), "value": _per_member(rollout.value, k),
            "advantage": _per_member(advantage, k), "returns": _per_member(returns, k),
            "weight": _per_member(rollout.weight, k) if self.weighted else None,
        }
        if rollout.critic_obs is not None:
            flat["critic_obs"] = _per_member(rollout.critic_obs, k)
        size = self.num_steps * self.cols
        mb_size = size // config.num_minibatches
        permutations = torch.stack([
            draw_permutations(size, config.update_epochs, m.shuffle_rng, device) if on
            else torch.arange(size, device=device).expand(config.update_epochs, size)
            for m, on in zip(self.members, active)])
        offsets = torch.arange(k, device=device)[:, None] * size
        on = torch.tensor(list(active), device=device)
        keep = on.clone() if config.target_kl is not None else None
        totals = torch.zeros(k, len(MINIBATCH_ROW), device=device)
        count = torch.zeros(k, device=device)
        kl_index = LOSS_STATS.index("approx_kl")
        params = [p for ps in self.stacked.member_params for p in ps]
        loss_fn = torch.func.vmap(self._loss, in_dims=(0, 0, 0, 0))
        for epoch in range(config.update_epochs):
            for start in range(0, size, mb_size):
                idx = permutations[:, epoch, start:start + mb_size]
                # None entries (no mask, no weights) cannot cross vmap: _loss puts them back.
                flat_idx = (idx + offsets).reshape(-1)
                mb = {name: _gather(v, flat_idx, idx.shape) for name, v in flat.items() if v is not None}
                loss, stats = loss_fn(self.stacked.stack(), mb, self.ent_coef, self.clip_coef)
                for p in params:
                    p.grad = None
                loss.sum().backward()
                norms = self._step(active, keep)
                row = torch.cat([loss.detach()[:, None], stats, norms[:, None]], 1)
                applied = (keep if keep is not None else on).float()
                totals = totals + applied[:, None] * row
                count = count + applied
            if keep is not None:
                keep = keep & ~(stats[:, kl_index] > config.target_kl)
        for p in params:
            p.grad = None
        means = totals / count.clamp(min=1)[:, None]
        weight = flat["weight"]
        if weight is None:
            ev = torch.func.vmap(lambda v, r: explained_variance(v, r, None))(flat["value"], flat["returns"])
        else:
            ev = torch.func.vmap(explained_variance)(flat["value"], flat["returns"], weight)
        for i, m in enumerate(self.members):
            if active[i]:
                cols = slice(i * self.cols, (i + 1) * self.cols)
                extra = {} if rollout.critic_obs is None else {"critic_obs": rollout.critic_obs[:, cols]}
                m.policy.update_normalizer(rollout.obs[:, cols], rollout.live[:, cols].float(), **extra)
        return {"explained_variance": ev, **{name: means[:, i] for i, name in enumerate(MINIBATCH_ROW)}}
