"""PPO as an :class:`~rl_gpu.algos.base.Algorithm`: it owns the policy, the optimiser, the random streams, the
rollout engine and storage, and the compiled units and CUDA graphs of its hot loop."""

from __future__ import annotations

import copy
import dataclasses
from functools import partial

import torch
from torch import Tensor, nn

from rl_gpu.algos.base import COLLECTION_METRICS, Iteration, PhaseTimer, Setup, collection_metrics, no_phase
from rl_gpu.algos.optim import LearningRateSchedule, load_optimizer_state, make_adam
from rl_gpu.algos.ppo.asynchronous import AsyncCollection
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.algos.ppo.lag import LAG_METRICS, check_async_bound, fresh_steps, lag_metrics
from rl_gpu.algos.ppo.loss import Coefficients, ppo_loss
from rl_gpu.algos.ppo.symmetry import task_mirror
from rl_gpu.algos.ppo.update import (
    UpdateMetrics,
    UpdateUnits,
    check_minibatches,
    draw_permutations,
    run_update,
)
from rl_gpu.algos.precision import resolve_precision
from rl_gpu.algos.schedules import LRSchedule, linear_value
from rl_gpu.collect import host
from rl_gpu.collect.double_buffer import DoubleBufferedEngine, double_buffer_refusal
from rl_gpu.collect.engine import RolloutEngine, RolloutNoise
from rl_gpu.collect.reference import collect
from rl_gpu.core.pytree import tree_map
from rl_gpu.core.seeding import derive_seed
from rl_gpu.core.types import Actor, VecEnv
from rl_gpu.data.rollout import Rollout
from rl_gpu.nn.actor_critic import policy_for_env
from rl_gpu.nn.cpu_kernels import use_cpu_kernels
from rl_gpu.nn.memory import is_recurrent
from rl_gpu.nn.normalization import RewardNormalizer
from rl_gpu.runtime.compile import GraphedFunction, compile_unit, resolve_compile

UPDATE_METRICS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
                  "explained_variance", "grad_norm")

DEFAULT_NUM_STEPS = 128
"""T for continuing tasks when the setup gives none (turn-based games default to their longest game)."""


class PPO(LearningRateSchedule):
    """Clipped PPO with GAE on ``[T, N]`` rollouts.

    Built by hand (``PPO(policy, config, learning_rate, seed)``) it collects and updates on any environment given
    to :meth:`collect` / :meth:`update` / :meth:`iterate`; built by :meth:`from_setup` (what the runner does) it is
    bound to one environment and :meth:`iterate` takes no arguments.

    Args:
        policy: an actor-critic with ``act``, ``evaluate``, ``value`` (:mod:`rl_gpu.nn.actor_critic`).
        config: PPO hyper-parameters.
        learning_rate: Adam's initial learning rate (held in a device tensor, see :meth:`set_learning_rate`).
        seed: seeds the policy's sampling, the minibatch shuffling and the opponent's moves.
        compile: how :meth:`collect`, :meth:`update` and :meth:`iterate` run (:mod:`rl_gpu.runtime.compile`):
            ``off``, ``inductor``, ``cudagraphs`` (:meth:`collect` and :meth:`update` replay one CUDA graph each,
            :meth:`iterate` one for both) or ``auto``.
        env: the environments :meth:`iterate` collects from when called without arguments.
        num_steps: T for the bound environments (default: the longest game for turn-based games, else 128).
        anneal_lr: :meth:`set_progress` decays the learning rate linearly to 0.
        opponent_seed: seeds the opponent's moves and the seat draw of turn-based games (default: derived from
            ``seed``).
        precision: ``fp32``, ``bf16``, ``fp16`` or ``auto``: the update's networks under autocast
            (:mod:`rl_gpu.algos.precision`).
    """

    loss_fn = staticmethod(ppo_loss)
    """The minibatch loss (:data:`~rl_gpu.algos.ppo.update.LossFn`); a subclass may learn by another."""

    def __init__(self, policy: nn.Module, config: PPOConfig, learning_rate: float, seed: int,
                 compile: str = "off", *, env: VecEnv | None = None, num_steps: int | None = None,
                 anneal_lr: bool = False, opponent_seed: int | None = None, precision: str = "fp32",
                 async_collect: bool = False, double_buffer: bool = False) -> None:
        device = next(policy.parameters()).device
        self.precision = resolve_precision(precision, device, policy)
        """``fp32``, ``bf16`` or ``fp16``: the update's networks under autocast (:mod:`rl_gpu.algos.precision`)."""
        # On the CPU, fp32 runs the networks' fast forms (the same parameters); autocast needs PyTorch's own.
        self._policy = use_cpu_kernels(policy) if self.precision == "fp32" else policy
        self._lr_schedule: LRSchedule | None = None
        self.config = config
        self.initial_learning_rate = float(learning_rate)
        self.anneal_lr = anneal_lr
        self.device = device
        self.compile = resolve_compile(compile, device)
        self.recurrent = is_recurrent(policy)
        """A policy with memory: rollouts carry its state, minibatches are sequences (:mod:`.sequences`)."""
        if self.recurrent and not callable(getattr(policy, "evaluate_sequence", None)):
            raise ValueError(f"{type(policy).__name__} has memory but no evaluate_sequence(obs, action, action_mask, "
                             "state0, starts), which PPO's sequence minibatches replay (rl_gpu.nn.composed has one)")
        self._policy_state: dict[VecEnv, object] = {}
        """Continuing rollouts of a recurrent policy: its state where the last rollout of each env ended."""
        self.lr = torch.tensor(float(learning_rate), device=device)
        self.optimizer = make_adam(policy.parameters(), self.lr, device)
        self.policy_rng = torch.Generator(device=device).manual_seed(seed)
        self.shuffle_rng = torch.Generator(device=device).manual_seed(seed + 1)
        if opponent_seed is None:
            opponent_seed = derive_seed(seed, "opponent")
        self.opponent_rng = torch.Generator(device=device).manual_seed(opponent_seed)
        self.ent_coef: Tensor | None = None
        """With ``ent_coef_final``: the entropy coefficient the loss reads, moved in place by :meth:`set_progress`."""
        coefficients = config
        if config.ent_coef_final is not None:
            self.ent_coef = torch.tensor(float(config.ent_coef), device=device)
            coefficients = Coefficients(config, self.ent_coef, config.clip_coef)
        if self.precision != "fp32" and self.recurrent:
            raise ValueError(f"a policy with memory trains in fp32 for now, not --precision {self.precision}")
        self.units = UpdateUnits(policy, self.optimizer, coefficients, self.compile, self.precision,
                                 loss_fn=type(self).loss_fn)
        # With config.norm_reward: one running return per environment row, so it is sized by the rollouts'
        # N: built here when bound to an environment, else on the first update (or load_state_dict).
        self.reward_normalizer: RewardNormalizer | None = None
        self._normalize_reward = None
        if config.norm_reward and env is not None:
            self._reward_normalizer_for(self.rows_of(env))
        # Keyed by the environment object itself (not id()): a cached engine, graph or storage can never be
        # reused for another environment that happens to get the same address.
        self._engines: dict[tuple, RolloutEngine] = {}
        self._graphs: dict[tuple, GraphedFunction] = {}
        self._storage: dict[tuple, Rollout] = {}
        self._host: dict[tuple, host.HostCollector] = {}
        self.env = env
        self.num_steps = 0
        if env is not None:
            self.num_steps = self.default_num_steps(env) if num_steps is None else num_steps
            self.check_setup(env, self.num_steps)
        self.version = 0
        """Updates made so far: the policy's version number."""
        self.policy_lag = 0
        """Versions between the policy the update learns with and the one that collected its rollout."""
        self._async = self._asynchronous(env, async_collect)
        self.double_buffer = self._double_buffered(env, double_buffer)
        self.units.mirror = task_mirror(config, env, self.recurrent, self._async is not None)
        """Collections of the bound environment run in two halves of its rows (:mod:`~rl_gpu.collect.double_buffer`)."""
        lagged = self._async is not None or self.config.max_policy_lag is not None
        self.metric_names = (*UPDATE_METRICS, *(("ent_coef",) if self.ent_coef is not None else ()),
                             *(LAG_METRICS if lagged else ()), "learning_rate", *COLLECTION_METRICS)
        self.resume_notes: tuple[str, ...] = ()
        self.last_rollout: Rollout | None = None
        """The rollout the last :meth:`iterate` learned from (storage reused by the next call)."""
        self.opponent: Actor | None = None
        """Plays the other seat of turn-based games (None: uniform random); filled from ``Setup.opponent`` or set
        before the first collection (engines keep the opponent they were built with)."""

    @classmethod
    def from_setup(cls, setup: Setup, config: PPOConfig) -> PPO:
        """The runner's constructor: an actor-critic sized for ``setup.env``, bound to it."""
        env = setup.env
        policy = policy_for_env(env.spec, setup.hidden_sizes, setup.normalize_obs, setup.init_log_std,
                                kind=setup.policy, memory_size=setup.memory_size, lstm=setup.lstm)
        policy = policy.to(env.device)
        algo = cls(policy, config, setup.learning_rate, derive_seed(setup.seed, "policy"), setup.compile,
                   env=env, num_steps=setup.num_steps, anneal_lr=setup.anneal_lr,
                   opponent_seed=derive_seed(setup.seed, "opponent"), precision=setup.precision,
                   async_collect=setup.async_collect, double_buffer=setup.double_buffer)
        if setup.opponent is not None:  # the declared slot (self-play: the league of this policy's snapshots)
            algo.opponent = setup.opponent(algo.policy)
        return algo

    @staticmethod
    def episodic(env: VecEnv) -> bool:
        """Turn-based games are collected as whole games from fresh starts; other tasks continue across
        rollouts."""
        return env.spec.num_players > 1

    @staticmethod
    def rows_of(env: VecEnv) -> int:
        """Rows of the rollouts the update learns from, per step: the N environments (a multi-agent learner
        learns from ``N * M`` agent rows)."""
        return env.num_envs

    @classmethod
    def default_num_steps(cls, env: VecEnv) -> int:
        horizon = env.spec.episode_horizon
        return int(horizon) if cls.episodic(env) and horizon is not None else DEFAULT_NUM_STEPS

    def check_setup(self, env: VecEnv, num_steps: int) -> None:
        """Raise ``ValueError`` if ``num_steps`` cannot work on ``env`` with this configuration."""
        horizon = env.spec.episode_horizon
        if self.episodic(env):
            if horizon is None:
                raise ValueError(f"{type(env).__name__} has several players but no bounded game length")
            if num_steps < horizon:
                raise ValueError(f"--num-steps {num_steps} is shorter than the longest game ({horizon} steps): "
                                 "games would be cut")
        rows = self.rows_of(env)
        if self.recurrent:
            if rows % self.config.num_minibatches:
                raise ValueError(f"a policy with memory learns from minibatches of whole environments: num_envs "
                                 f"{rows} is not divisible by --num-minibatches {self.config.num_minibatches}")
        batch = num_steps * rows
        if batch % self.config.num_minibatches:
            what = "num_envs" if rows == env.num_envs else f"num_envs * agents ({env.num_envs} * {rows // env.num_envs})"
            raise ValueError(f"{what} * num_steps = {rows} * {num_steps} = {batch} is not divisible "
                             f"by --num-minibatches {self.config.num_minibatches}")

    @property
    def policy(self) -> nn.Module:
        return self._policy

    def _graphed(self) -> bool:
        return self.compile == "cudagraphs"

    def engine(self, env: VecEnv, num_steps: int, episodic: bool = False) -> RolloutEngine:
        """The :class:`~rl_gpu.collect.engine.RolloutEngine` (in this object's compile mode) for ``env``."""
        key = (env, num_steps, episodic)
        engine = self._engines.get(key)
        if engine is None:
            if self._in_halves(env, episodic):
                engine = DoubleBufferedEngine(self._policy, env, num_steps, compile=self.compile)
            else:
                engine = RolloutEngine(self._policy, env, num_steps, episodic=episodic, opponent=self.opponent,
                                       compile=self.compile)
            self._engines[key] = engine
        return engine

    def _in_halves(self, env: VecEnv, episodic: bool) -> bool:
        """Whether a collection of ``env`` runs double-buffered (the bound environment's continuing rollouts)."""
        return self.double_buffer and env is self.env and not episodic

    def _double_buffered(self, env: VecEnv | None, on: bool) -> bool:
        if on and (refusal := double_buffer_refusal(env, episodic=env is not None and self.episodic(env),
                                                    recurrent=self.recurrent, asynchronous=self._async is not None,
                                                    compile=self.compile)):
            raise ValueError(refusal)
        return on

    def _permutations(self, num_slots: int) -> Tensor:  # with --symmetry, the slots and their mirror images
        num_slots *= 2 if self.units.mirror is not None else 1
        return draw_permutations(num_slots, self.config.update_epochs, self.shuffle_rng, self.device)

    def _reward_normalizer_for(self, num_envs: int) -> RewardNormalizer:
        """The reward normaliser (created on first use) for rollouts of ``num_envs`` rows."""
        if self.reward_normalizer is None:
            self.reward_normalizer = RewardNormalizer(num_envs, self.config.gamma,
                                                      self.config.norm_reward_clip).to(self.device)
            self._normalize_reward = compile_unit(self.reward_normalizer.normalize, self.compile)
        elif self.reward_normalizer.num_envs != num_envs:
            raise ValueError(f"norm_reward keeps a running return per environment row: this PPO normalises "
                             f"rollouts of {self.reward_normalizer.num_envs} environments, not {num_envs}")
        return self.reward_normalizer

    def _with_normalized_reward(self, rollout: Rollout, weighted: bool) -> Rollout:
        """``rollout`` with its rewards scaled by the reward normaliser (which advances its statistics); the
        rollout itself is left as collected, so logged returns stay in the task's units."""
        self._reward_normalizer_for(rollout.num_envs)
        weight = rollout.weight if weighted else None
        reward = self._normalize_reward(rollout.reward, rollout.done, weight)
        return dataclasses.replace(rollout, reward=reward)

    def _update_body(self, rollout: Rollout, permutations: Tensor, weighted: bool = True) -> UpdateMetrics:
        if self.config.norm_reward:
            rollout = self._with_normalized_reward(rollout, weighted)
        metrics = run_update(self.units, rollout, permutations, weighted)
        if rollout.critic_obs is None:
            self._policy.update_normalizer(rollout.obs, rollout.live.float())
        else:
            self._policy.update_normalizer(rollout.obs, rollout.live.float(), critic_obs=rollout.critic_obs)
        return metrics

    def _graph(self, key: tuple, fn) -> GraphedFunction:
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = GraphedFunction(fn)
        return graph

    def _bound(self, env: VecEnv | None, num_steps: int | None, episodic: bool | None,
               opponent_rng: torch.Generator | None) -> tuple[VecEnv, int, bool, torch.Generator]:
        env = env if env is not None else self.env
        if env is None:
            raise ValueError("no environment: give one, or build the algorithm with env=")
        if num_steps is None:
            num_steps = self.num_steps if env is self.env else self.default_num_steps(env)
        episodic = self.episodic(env) if episodic is None else episodic
        return env, num_steps, episodic, opponent_rng if opponent_rng is not None else self.opponent_rng

    def collect(self, env: VecEnv | None = None, num_steps: int | None = None, *, episodic: bool | None = None,
                opponent_rng: torch.Generator | None = None) -> Rollout:
        """One ``[num_steps, N]`` rollout with the policy (same streams and results as
        :func:`~rl_gpu.collect.reference.collect`); defaults: the bound environment and its settings.

        A functional environment runs through the rollout engine into storage this object reuses: **the returned
        rollout is overwritten by the next call for the same environment** (in ``cudagraphs`` mode it is a CUDA
        graph's output); ``rollout.clone()`` keeps a copy. A host-stepped environment (``spec.functional`` False)
        goes through :func:`~rl_gpu.collect.reference.collect` (compiled modes: :class:`~rl_gpu.collect.host.HostCollector`,
        whose policy half is compiled) and returns fresh tensors."""
        env, num_steps, episodic, opponent_rng = self._bound(env, num_steps, episodic, opponent_rng)
        # A policy with memory on a host-stepped task, or in a turn-based game (its state advances on its own turns
        # alone), is collected by the reference loop.
        if self.recurrent and (not env.spec.functional or env.spec.num_players > 1):
            rollout = collect(self._policy, env, num_steps, self.policy_rng, episodic=episodic,
                              opponent=self.opponent, opponent_rng=opponent_rng,
                              policy_state=None if episodic else self._policy_state.get(env))
            self._policy_state[env] = rollout.policy_state
            rollout.all_weights_one = not episodic
            return rollout
        if not env.spec.functional and not self._in_halves(env, episodic):
            if self.compile != "off" and host.supports(self._policy, env):
                key = ("host", env, num_steps, episodic)
                if key not in self._host:
                    self._host[key] = host.HostCollector(self._policy, env, num_steps, episodic=episodic,
                                                         compile=self.compile)
                return self._host[key].collect(self.policy_rng, opponent_rng)
            return collect(self._policy, env, num_steps, self.policy_rng, episodic=episodic,
                           opponent=self.opponent, opponent_rng=opponent_rng)
        engine = self.engine(env, num_steps, episodic)
        noise = engine.draw(self.policy_rng, opponent_rng)
        memory = self._memory_of(env, episodic)
        if self._graphed():
            graph = self._graph(("collect", env, num_steps, episodic), engine.run)
            rollout, state = graph(noise, env.state, None, memory)
        else:
            key = (env, num_steps, episodic)
            if key not in self._storage:
                self._storage[key] = engine.empty_rollout()
            carried = {} if memory is None else {"policy_state": memory}  # a double-buffered engine takes none
            rollout, state = engine.run(noise, out=self._storage[key], **carried)
        env.state = state
        self._remember(env, rollout)
        rollout.all_weights_one = not episodic and env.spec.num_players == 1
        return rollout

    def _memory_of(self, env: VecEnv, episodic: bool) -> Tensor | None:
        """A recurrent policy's state where its last continuing rollout of ``env`` ended (initially its initial
        state: a captured graph's input keeps one structure), None otherwise."""
        if not self.recurrent or episodic:
            return None
        return self._policy_state[env] if env in self._policy_state else self._policy.initial_state(env.num_envs)

    def _remember(self, env: VecEnv, rollout: Rollout) -> None:
        if self.recurrent:
            self._policy_state[env] = rollout.policy_state

    def update(self, rollout: Rollout) -> UpdateMetrics:
        """One PPO update on ``rollout``, then the rollout's observations join the normaliser statistics.
        No host synchronisation; in ``cudagraphs`` mode one CUDA graph (the rollout is copied into its input)."""
        weighted = not rollout.all_weights_one
        # A recurrent policy's minibatches are columns (whole sequences), a feed-forward one's single slots.
        units = rollout.num_envs if self.recurrent else rollout.reward.numel()
        check_minibatches(units, self.config)
        permutations = self._permutations(units)
        self.units.max_steps = self._fresh_steps()
        if self._graphed():
            shape = (rollout.reward.shape, rollout.obs.shape, rollout.action.shape, rollout.action_mask.shape)
            body = partial(self._update_body, weighted=weighted)
            return self._graph(("update", shape, weighted, self.units.max_steps), body)(rollout, permutations)
        return self._update_body(rollout, permutations, weighted)

    @property
    def steps_per_update(self) -> int:
        """Optimizer steps of a whole update: ``update_epochs * num_minibatches``."""
        return self.config.update_epochs * self.config.num_minibatches

    def _fresh_steps(self) -> int | None:
        """How many of the next update's steps are within ``max_policy_lag`` (:mod:`~rl_gpu.algos.ppo.lag`)."""
        return fresh_steps(self.config.max_policy_lag, self.policy_lag, self.steps_per_update)

    def iterate(self, env: VecEnv | None = None, num_steps: int | None = None, *, episodic: bool | None = None,
                opponent_rng: torch.Generator | None = None, phase: PhaseTimer = no_phase) -> Iteration:
        """:meth:`collect` then :meth:`update` (defaults: the bound environment): the whole hot loop. In
        ``cudagraphs`` mode the whole iteration (rollout, GAE, update, normaliser) is one CUDA graph; every random
        number is drawn before it into the graph's static input buffers. Returns its statistics (0-dim tensors on
        the device). ``phase(name)`` times the ``collect`` and ``update`` phases (one ``iterate`` phase
        when a CUDA graph runs both). Built with ``async_collect``, a call without arguments learns while collecting
        (:mod:`rl_gpu.algos.ppo.asynchronous`); one given an environment or settings collects first, as always."""
        if self._async is not None and env is None and num_steps is None and episodic is None:
            return self._iterate_async(phase)
        env, num_steps, episodic, opponent_rng = self._bound(env, num_steps, episodic, opponent_rng)
        # Single-player continuing rollouts have every weight 1 by construction: the update skips them.
        weighted = episodic or env.spec.num_players > 1
        if not self._graphed() or not env.spec.functional or (self.recurrent and env.spec.num_players > 1):
            with phase("collect"):
                rollout = self.collect(env, num_steps, episodic=episodic, opponent_rng=opponent_rng)
            with phase("update"):
                metrics = self.update(rollout)
        else:
            engine = self.engine(env, num_steps, episodic)
            units = env.num_envs if self.recurrent else num_steps * env.num_envs  # as in update()
            check_minibatches(units, self.config)
            self.units.max_steps = self._fresh_steps()
            noise = engine.draw(self.policy_rng, opponent_rng)
            permutations = self._permutations(units)

            def body(noise: RolloutNoise, permutations: Tensor, state, memory) -> tuple[Rollout, UpdateMetrics,
                                                                                           object]:
                rollout, final_state = engine.run(noise, state, policy_state=memory)
                return rollout, self._update_body(rollout, permutations, weighted), final_state

            key = ("iterate", env, num_steps, episodic)
            with phase("iterate"):
                rollout, metrics, state = self._graph(key, body)(noise, permutations, env.state,
                                                                 self._memory_of(env, episodic))
            env.state = state
            self._remember(env, rollout)
        self.last_rollout = rollout
        return Iteration(collection_metrics(rollout), self.lr.clone(), self._learner_metrics(metrics))

    def _asynchronous(self, env: VecEnv | None, on: bool) -> AsyncCollection | None:
        if not on:
            return None
        if env is None or self.episodic(env) or env.spec.num_agents > 1 or self.recurrent:
            raise ValueError("--async-collect learns single-player tasks with a feed-forward policy, bound to its "
                             "environment (turn-based games, worlds of several agents and policies with memory "
                             "collect in the learner's thread)")
        check_async_bound(self.config.max_policy_lag, self.steps_per_update)
        return AsyncCollection(self._policy, env, self.num_steps, self.compile)

    def _iterate_async(self, phase: PhaseTimer) -> Iteration:
        """One iteration of learning while collecting (:mod:`rl_gpu.algos.ppo.asynchronous`): the update on the
        rollout collected last time overlaps the collection of the next one by the policy as it is now."""
        collector = self._async
        with phase("collect"):
            collector.first(self.policy_rng, self.version)
        rollout, version = collector.next
        collector.refresh(rollout)
        pending = collector.start(self.policy_rng)
        self.policy_lag = self.version - version
        with phase("update"):
            metrics = self.update(rollout)
        self.version += 1
        with phase("collect"):  # what of the collection the update did not hide
            collector.next = (pending.result(), self.version - 1)
        self.last_rollout = rollout
        return Iteration(collection_metrics(rollout), self.lr.clone(), self._learner_metrics(metrics))

    def _learner_metrics(self, metrics: UpdateMetrics) -> dict[str, Tensor]:
        learner = {name: getattr(metrics, name) for name in UPDATE_METRICS}
        if self.ent_coef is not None:
            learner["ent_coef"] = self.ent_coef.clone()
        if LAG_METRICS[0] in self.metric_names:
            learner.update(lag_metrics(self.policy_lag, self.steps_per_update, self.units.max_steps, self.device))
        return learner

    @property
    def lr_schedule(self) -> LRSchedule | None:
        """The learning-rate schedule (:mod:`rl_gpu.algos.schedules`); ``adaptive-kl`` is applied by the update,
        after each minibatch's forward pass."""
        return self._lr_schedule

    @lr_schedule.setter
    def lr_schedule(self, schedule: LRSchedule | None) -> None:
        self._lr_schedule = schedule
        self.units.kl_schedule = schedule if schedule is not None and schedule.kind == "adaptive-kl" else None

    def set_progress(self, fraction: float | Tensor) -> None:
        """The learning rate's schedule, and with ``ent_coef_final`` the entropy coefficient's (linear)."""
        super().set_progress(fraction)
        if self.ent_coef is not None:
            value = linear_value(self.config.ent_coef, self.config.ent_coef_final, fraction)
            self.ent_coef.copy_(value) if isinstance(value, Tensor) else self.ent_coef.fill_(value)

    def state_dict(self) -> dict:
        """Everything the next iteration depends on; with ``norm_reward``, the reward normaliser's running
        returns and statistics too (once it exists: an unbound PPO creates it on its first update)."""
        state = {
            "policy": self._policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "policy_rng": self.policy_rng.get_state(),
            "shuffle_rng": self.shuffle_rng.get_state(),
            "opponent_rng": self.opponent_rng.get_state(),
        }
        if self.reward_normalizer is not None:
            state["reward_normalizer"] = self.reward_normalizer.state_dict()
        if self.units.scaler is not None:
            state["loss_scaler"] = self.units.scaler.state_dict()
        if self.recurrent and self.env in self._policy_state:
            state["policy_state"] = self._policy_state[self.env]
        if self._async is not None:
            state["version"] = self.version
            state["async"] = self._async.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self._policy.load_state_dict(state["policy"])
        load_optimizer_state(self.optimizer, state["optimizer"], self.lr)
        self.policy_rng.set_state(state["policy_rng"].cpu())
        self.shuffle_rng.set_state(state["shuffle_rng"].cpu())
        self.opponent_rng.set_state(state["opponent_rng"].cpu())
        if self.units.scaler is not None:
            self.units.scaler.load_state_dict(state["loss_scaler"])
        if self._async is not None:
            self.version = int(state.get("version", 0))
            self._async.load_state_dict(state.get("async", {}), self.device)
        if self.recurrent and "policy_state" in state and self.env is not None:
            self._policy_state[self.env] = tree_map(lambda x: x.to(self.device), state["policy_state"])
        if self.config.norm_reward and ("reward_normalizer" in state or self.reward_normalizer is not None):
            # A KeyError here (statistics expected, none saved) reports a checkpoint of another configuration.
            saved = state["reward_normalizer"]
            # copy_ into the existing buffers: a captured CUDA graph keeps reading the same memory.
            self._reward_normalizer_for(saved["ret"].shape[0]).load_state_dict(saved)

    def initial_policy(self) -> nn.Module:
        """A frozen copy of the policy as it is now (the baseline a run's validations compare against)."""
        return copy.deepcopy(self._policy).eval()
