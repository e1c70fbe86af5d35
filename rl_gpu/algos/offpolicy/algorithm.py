"""What SAC and TD3 share as :class:`~rl_gpu.algos.base.Algorithm` objects: collecting into the on-device replay
buffer, the loop of gradient updates, compiled units and CUDA graphs, and checkpoint state.

Shape legend: T = vector steps per iteration, N = environments, U = gradient updates per iteration, B = batch.

One :meth:`OffPolicyAlgorithm.iterate` steps the environments T times into the replay buffer (uniformly random
actions until ``learning_starts`` transitions were collected), then makes U updates on uniformly sampled batches,
then merges the observations into the normaliser. Every random number (action noise, fresh starts, sampled
slots, the update's noise) is drawn before, in a fixed order, so the eager, compiled and graph-captured paths
give the same results for the same generator states. Each update is one loss (critics, actor and, for SAC, the
entropy coefficient, whose gradients touch disjoint parameters), one backward and one Adam step over every
parameter, then the Polyak update of the targets. In ``cudagraphs`` mode a functional environment's whole
iteration (T steps, U updates, the normaliser) is one CUDA graph per (random or policy actions, update pattern).
What is decided on the host (random actions or not, how many updates, TD3's actor steps) follows from counts
the host keeps, never from a device read.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor, nn

from rl_gpu.algos.base import COLLECTION_METRICS, Collected, Iteration, PhaseTimer, no_phase
from rl_gpu.collect.transitions import TransitionCollector, episode_metrics
from rl_gpu.algos.offpolicy.config import OffPolicyConfig
from rl_gpu.algos.optim import LearningRateSchedule, load_optimizer_state, make_adam
from rl_gpu.core.types import VecEnv
from rl_gpu.data.replay import ReplayBuffer
from rl_gpu.nn.cpu_kernels import use_cpu_kernels
from rl_gpu.nn.ensemble import EnsembleMLP
from rl_gpu.nn.squashed import SquashedActor
from rl_gpu.runtime.compile import GraphedFunction, compile_unit, resolve_compile
from rl_gpu.runtime.distributed import all_reduce_grads_

DEFAULT_NUM_STEPS = 1
"""T when the setup gives none: one vector step per iteration."""

LossUnit = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
"""``(bits [B] int64, noise) -> (loss, stats [len(STATS)])``: one update's forward, from sampled slots."""


def check_env(env: VecEnv, name: str) -> None:
    """Raise ``ValueError`` unless ``env`` is a single-player task with bounded continuous actions and flat
    observations (what squashed actors and Q critics need)."""
    spec, env_name = env.spec, type(env).__name__
    if not spec.is_continuous:
        raise ValueError(f"{name} needs continuous actions; {env_name} has {spec.num_actions} discrete actions: "
                         "train it with --algo ppo")
    if spec.num_players != 1:
        raise ValueError(f"{name} trains single-player tasks; {env_name} has {spec.num_players} players: "
                         "train it with --algo ppo")
    if len(spec.obs_shape) != 1:
        raise ValueError(f"{name} needs flat observations; {env_name}'s are {list(spec.obs_shape)}")
    low, high = spec.action_low, spec.action_high
    if len(low) != spec.action_size or len(high) != spec.action_size or not all(
            -1e30 < lo < hi < 1e30 for lo, hi in zip(low, high)):
        raise ValueError(f"{name} squashes actions into the environment's bounds, and {env_name} declares none "
                         f"usable (low {list(low)}, high {list(high)}): train it with --algo ppo")


class OffPolicyAlgorithm(LearningRateSchedule):
    """The shared machinery; a subclass builds its networks and supplies :meth:`_loss_units`, :meth:`_pattern`,
    :meth:`_draw_update_noise`, :meth:`_after_update` and :meth:`_metrics`.

    Args:
        policy: the acting actor (evaluated and exported).
        critic: the Q ensemble; its target copy is made here.
        parameters: every trained parameter, optimised by one Adam (learning rate in a device tensor).
        config: the algorithm's hyper-parameters.
        env: the environments :meth:`iterate` steps.
        learning_rate: Adam's initial learning rate.
        seed: seeds the exploration, sampling and update streams.
        compile: ``off``, ``inductor``, ``cudagraphs`` or ``auto``.
        num_steps: T (default 1).
        anneal_lr: :meth:`set_progress` decays the learning rate linearly to 0.
    """

    NAME = "off-policy"
    STATS: tuple[str, ...] = ()
    """Names of the per-update statistics the loss units return, in order."""

    def __init__(self, policy: SquashedActor, critic: EnsembleMLP, parameters: list[nn.Parameter],
                 config: OffPolicyConfig, env: VecEnv, learning_rate: float, seed: int, compile: str = "off",
                 num_steps: int | None = None, anneal_lr: bool = False) -> None:
        check_env(env, self.NAME)
        use_cpu_kernels(policy)  # on the CPU: its fast forms (the same parameters)
        horizon = env.spec.max_episode_steps
        if horizon is not None and config.n_step > horizon:
            raise ValueError(f"--n-step {config.n_step} is longer than an episode of {type(env).__name__} "
                             f"({horizon} steps): give at most {horizon}")
        self.config = config
        self.env = env
        self.device = env.device
        self.compile = resolve_compile(compile, self.device)
        self.num_steps = DEFAULT_NUM_STEPS if num_steps is None else num_steps
        self.updates_per_iteration = config.updates_per_iteration(self.num_steps)
        self._policy = policy
        self.critic = critic
        self.target_critic = copy.deepcopy(critic).requires_grad_(False)
        self.initial_learning_rate = float(learning_rate)
        self.anneal_lr = anneal_lr
        self.lr = torch.tensor(float(learning_rate), device=self.device)
        # Adam's default epsilon, as SAC's and TD3's reference implementations use.
        self.optimizer = make_adam(parameters, self.lr, self.device, eps=1e-8)
        self.explore_rng = torch.Generator(device=self.device).manual_seed(seed)
        self.sample_rng = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.update_rng = torch.Generator(device=self.device).manual_seed(seed + 2)
        self.buffer = ReplayBuffer(config.buffer_size, env.num_envs, env.spec.obs_shape, env.spec.action_shape,
                                   self.device, config.n_step, config.gamma, env.spec.obs_dtype())
        if self.num_steps > self.buffer.num_rows:
            raise ValueError(f"--num-steps {self.num_steps} exceeds the replay buffer's {self.buffer.num_rows} rows "
                             f"(--buffer-size {config.buffer_size} / --num-envs {env.num_envs}): one iteration "
                             "would overwrite its own steps")
        self.collector = TransitionCollector(policy, env, self.num_steps, self.compile, config.noise_correlation)
        self.steps_done = 0
        """Transitions collected (host count)."""
        self.updates_done = 0
        """Gradient updates made (host count)."""
        self.resume_notes: tuple[str, ...] = ()
        self._units: dict[bool, LossUnit] = {}
        self.anchor = None
        """Set in a task sequence (``--method l2``): its penalty's gradient joins each actor step's
        (:mod:`rl_gpu.algos.anchor`; the actor's parameters only)."""
        self._graphs: dict[tuple, GraphedFunction] = {}
        self.metric_names = (*self.STATS, "learning_rate", *COLLECTION_METRICS)

    # --- what a subclass supplies --------------------------------------------------------------------------

    def _loss_units(self) -> dict[bool, LossUnit]:
        """The loss unit of a step that updates the actor (True) and, where it differs, of one that does not."""
        raise NotImplementedError

    def _pattern(self, start: int, count: int) -> tuple[bool, ...]:
        """For updates ``start .. start + count - 1``: whether each one updates the actor."""
        return (True,) * count

    def _draw_update_noise(self, count: int) -> Tensor:
        """``[U, ...]`` standard normal noise of ``count`` updates, from :attr:`update_rng`."""
        raise NotImplementedError

    def _after_update(self, actor_step: bool) -> None:
        """The Polyak update of the targets after one optimiser step."""
        raise NotImplementedError

    def _metrics(self, sums: Tensor | None, pattern: tuple[bool, ...]) -> dict[str, Tensor]:
        """:attr:`STATS` -> 0-dim tensors from the sums of the iteration's updates (None: no update)."""
        raise NotImplementedError

    # --- the Algorithm protocol ----------------------------------------------------------------------------

    @property
    def policy(self) -> nn.Module:
        return self._policy

    def initial_policy(self) -> nn.Module:
        """A frozen copy of the policy as it is now."""
        return copy.deepcopy(self._policy).eval()

    def _graphed(self) -> bool:
        return self.compile == "cudagraphs"

    def _graph(self, key: tuple, fn) -> GraphedFunction:
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = GraphedFunction(fn)
        return graph

    def _unit(self, actor_step: bool) -> LossUnit:
        if not self._units:
            self._units = {flag: compile_unit(fn, self.compile) for flag, fn in self._loss_units().items()}
        return self._units[actor_step] if actor_step in self._units else self._units[True]

    def learn(self, bits: Tensor, noise: Tensor, pattern: tuple[bool, ...]) -> Tensor:
        """``len(pattern)`` updates on batches sampled with ``bits`` (``[U, B]``) and ``noise`` (``[U, ...]``);
        returns the sums of their statistics (``[len(STATS)]``). No host synchronisation."""
        totals = torch.zeros(len(self.STATS), device=self.device)
        for i, actor_step in enumerate(pattern):
            loss, stats = self._unit(actor_step)(bits[i], noise[i])
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            # Under torchrun: every rank steps with the gradient of all ranks' batches (a no-op otherwise).
            all_reduce_grads_([p.grad for group in self.optimizer.param_groups for p in group["params"]
                               if p.grad is not None])
            if actor_step and self.anchor is not None:
                self.anchor.add_grad()
            self.optimizer.step()
            self._after_update(actor_step)
            totals = totals + stats
        return totals

    def update(self, count: int) -> dict[str, Tensor]:
        """``count`` gradient updates on batches sampled from the buffer as it is (its random numbers drawn as
        :meth:`iterate` draws them), outside any iteration: what a benchmark of the update alone times. Returns
        :attr:`STATS` -> 0-dim tensors; the buffer must hold a transition."""
        if len(self.buffer) == 0:
            raise ValueError("the replay buffer is empty: collect first (iterate)")
        pattern = self._pattern(self.updates_done, count)
        bits = torch.randint(0, 2**62, (count, self.config.batch_size), generator=self.sample_rng,
                             device=self.device)
        sums = self.learn(bits, self._draw_update_noise(count), pattern)
        self.updates_done += count
        return self._metrics(sums, pattern)

    def _collect_body(self, noise, random_actions: bool, state) -> tuple[dict[str, Tensor], Tensor, object]:
        """Collect, store in the buffer: ``(episode metrics, observations [T, N, *O], final state)``."""
        transitions, state = self.collector.run(noise, random_actions, state)
        self.buffer.write(*transitions[:6])
        return episode_metrics(transitions), transitions.obs, state

    def _iteration_body(self, noise, bits: Tensor, update_noise: Tensor, state, *, random_actions: bool,
                        pattern: tuple[bool, ...]) -> tuple[dict[str, Tensor], Tensor | None, object]:
        """A functional environment's whole iteration (what one CUDA graph holds)."""
        collected, obs, state = self._collect_body(noise, random_actions, state)
        sums = self.learn(bits, update_noise, pattern) if pattern else None
        self._policy.update_normalizer(obs)
        return collected, sums, state

    def iterate(self, *, phase: PhaseTimer = no_phase) -> Iteration:
        """One iteration: T vector steps into the buffer, then U updates once the buffer holds
        ``learning_starts`` transitions, then the observations join the normaliser's statistics. Returns its
        statistics (0-dim tensors on the device), without synchronising with the host."""
        cfg, env, buffer = self.config, self.env, self.buffer
        random_actions = self.steps_done < cfg.learning_starts
        held = min(buffer.rows_written + self.num_steps, buffer.num_rows) * env.num_envs
        count = self.updates_per_iteration if held >= max(cfg.learning_starts, 1) else 0
        pattern = self._pattern(self.updates_done, count)
        noise = self.collector.draw(random_actions, self.explore_rng)
        bits = torch.randint(0, 2**62, (count, cfg.batch_size), generator=self.sample_rng, device=self.device)
        update_noise = self._draw_update_noise(count)
        if self._graphed() and self.collector.functional:
            body = partial(self._iteration_body, random_actions=random_actions, pattern=pattern)
            with phase("iterate"):
                collected, sums, state = self._graph(("iterate", random_actions, pattern), body)(
                    noise, bits, update_noise, env.state)
            env.state = state
        else:
            with phase("collect"):
                collected, obs, state = self._collect_body(noise, random_actions, None)
                if state is not None:
                    env.state = state
            with phase("update"):
                sums = None
                if pattern and self._graphed():
                    sums = self._graph(("learn", pattern), partial(self.learn, pattern=pattern))(bits, update_noise)
                elif pattern:
                    sums = self.learn(bits, update_noise, pattern)
                self._policy.update_normalizer(obs)
        buffer.count(self.num_steps)
        self.steps_done += self.num_steps * env.num_envs
        self.updates_done += count
        return Iteration(Collected.of(collected), self.lr.clone(), self._metrics(sums, pattern))

    # --- checkpoints ---------------------------------------------------------------------------------------

    def _networks(self) -> dict[str, nn.Module]:
        """Modules saved by name besides the policy (critics and targets)."""
        return {"critic": self.critic, "target_critic": self.target_critic}

    def networks(self) -> dict[str, nn.Module]:
        """Every network by name, the policy included: what a task sequence carries from one task to the next."""
        return {"policy": self._policy, **self._networks()}

    def state_dict(self) -> dict:
        """Everything the next iteration depends on: networks, targets, optimiser, random streams, counts and
        (with ``checkpoint_buffer``) the replay buffer."""
        state = {"policy": self._policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "explore_rng": self.explore_rng.get_state(), "sample_rng": self.sample_rng.get_state(),
                 "update_rng": self.update_rng.get_state(), "steps_done": self.steps_done,
                 "updates_done": self.updates_done, "noise_state": self.collector.noise_state}
        state.update({name: module.state_dict() for name, module in self._networks().items()})
        if self.config.checkpoint_buffer:
            state["replay"] = self.buffer.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output into the tensors compiled units and CUDA graphs already read. A
        state without the replay buffer leaves it empty: no update is made until it holds ``learning_starts``
        transitions again, and :attr:`resume_notes` says so."""
        self._policy.load_state_dict(state["policy"])
        for name, module in self._networks().items():
            module.load_state_dict(state[name])
        load_optimizer_state(self.optimizer, state["optimizer"], self.lr)
        for name in ("explore_rng", "sample_rng", "update_rng"):
            getattr(self, name).set_state(state[name].cpu())
        self.steps_done, self.updates_done = int(state["steps_done"]), int(state["updates_done"])
        self.collector.noise_state.copy_(state["noise_state"])
        if "replay" in state:
            self.buffer.load_state_dict(state["replay"])
            self.resume_notes = ()
        else:
            self.buffer.clear()
            self.resume_notes = ((
                f"the checkpoint holds no replay buffer (--no-checkpoint-buffer): {self.NAME} refills it and "
                f"makes no update until it holds {max(self.config.learning_starts, 1):,} transitions again, so "
                "this resume is not exact"),)
