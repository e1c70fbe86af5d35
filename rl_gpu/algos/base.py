"""The :class:`Algorithm` protocol: everything the training loop, evaluation, export, the benchmark and
checkpoints need from an algorithm, and nothing more.

An algorithm is built bound to its environments (:class:`Setup`), owns its networks, optimisers, storage and
compiled units, and does one whole iteration per :meth:`Algorithm.iterate` call (collect, then learn), so a
single CUDA graph can cover both and the runner runs exactly the path ``rl-gpu bench`` times.

How the next algorithms plug in, without touching the runner:

- SAC / TD3 (:mod:`rl_gpu.algos.sac`, :mod:`rl_gpu.algos.td3`): ``iterate`` steps the environments
  ``num_steps`` times into an on-device replay ring buffer and runs ``num_steps * updates_per_step`` gradient
  steps on sampled batches (an ensemble of Q critics evaluated as batched matrix multiplies); ``policy`` is the
  tanh-squashed actor, whose squashed mean is what evaluation and export act with; ``metric_names`` adds
  ``q_loss``, ``actor_loss``, ``alpha``, ... (its :class:`Iteration`'s ``learner`` statistics)
- MAPPO: the environment's spec carries ``num_agents`` and a ``critic`` observation group; ``iterate`` collects
  ``[T, N, agents]`` and trains a centralised critic on the critic group while ``policy`` (the per-agent actor)
  is evaluated and exported.
- A population: one algorithm object whose parameters carry a leading ``[K]`` axis (``torch.func.stack_module_state``
  + ``vmap``), whose ``iterate`` reports an :class:`Iteration` of ``[K]`` tensors (``member(k)`` is one run's)
  and whose ``policy`` selects member ``k`` for evaluation; a league of opponents is a goal's baseline (:mod:`rl_gpu.train.goals`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from rl_gpu.algos.iteration import COLLECTION_METRICS, Collected, Iteration  # noqa: F401 -- the protocol's types
from rl_gpu.algos.schedules import LRSchedule
from rl_gpu.core.seeding import derive_seed
from rl_gpu.core.types import VecEnv
from rl_gpu.data.rollout import Rollout

PhaseTimer = Callable[[str], AbstractContextManager]
"""``phase(name)``: a context manager that times one phase of an iteration (``collect``, ``update``, ...)."""


def no_phase(name: str) -> AbstractContextManager:
    """A :data:`PhaseTimer` that times nothing."""
    return contextlib.nullcontext()


@dataclass(frozen=True)
class Setup:
    """What every algorithm is built from, besides its own hyper-parameters."""

    env: VecEnv
    """The training environments (the algorithm steps them)."""
    seed: int
    """Seeds the algorithm's own random streams (sampling, shuffling, opponents)."""
    learning_rate: float = 1e-3
    """Initial learning rate."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over training (see :meth:`Algorithm.set_progress`)."""
    precision: str = "fp32"
    """``fp32``, ``bf16``, ``fp16`` or ``auto``: the update's networks under autocast (:mod:`rl_gpu.algos.precision`),
    for algorithms that take it."""
    lr_schedule: LRSchedule | None = None
    """How the learning rate moves over training (:mod:`rl_gpu.algos.schedules`); given, it replaces
    ``anneal_lr``. An algorithm without that schedule refuses it when built."""
    num_steps: int | None = None
    """Environment steps per iteration (None: the algorithm's default for the environment)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the networks."""
    normalize_obs: bool = False
    """Normalise observations by running statistics kept in the policy (and so in its exports)."""
    init_log_std: float = 0.0
    """Continuous actions: initial log standard deviation of a Gaussian policy."""
    policy: str = "auto"
    """The policy kind to build (:mod:`rl_gpu.nn.kinds`), for algorithms that take any (``auto``: their own)."""
    memory_size: int = 0
    """A policy with memory, for algorithms that take any policy: the units of a GRU after each encoder of the
    composed policy (:mod:`rl_gpu.nn.composed`); 0: none."""
    lstm: bool = False
    """That memory is an LSTM rather than a GRU."""
    compile: str = "off"
    """``off``, ``inductor`` or ``cudagraphs`` (already resolved for the device)."""
    opponent: Callable[[nn.Module], Any] | None = None
    """The opponent slot of turn-based games: ``opponent(policy)`` returns the actor that plays the other seats,
    called once, by an algorithm whose spec says ``self_play``, as soon as it has built its policy (self-play: a
    league of that policy's snapshots, :mod:`rl_gpu.training.league`); None: uniform random legal actions."""
    async_collect: bool = False
    """Collect the next rollout in a second thread while the learner updates (algorithms whose spec says
    ``asynchronous``)."""
    double_buffer: bool = False
    """Collect in two halves of the rows, overlapping the environment on one with the policy on the other
    (:mod:`rl_gpu.collect.double_buffer`; algorithms whose spec says ``asynchronous``)."""
    make_env: Callable[[int, int], VecEnv] | None = None
    """``make_env(num_envs, seed)``: a fresh batch of the run's environment with its own reset stream, on the
    run's device, for collectors of the algorithm's own (other threads or processes, a second buffer); None
    where the caller has no factory (an environment handed over alone)."""

    def seed_for(self, purpose: str) -> int:
        """The seed of one named random stream of the algorithm (disjoint across purposes), e.g. the
        ``make_env`` seed of a second collector."""
        return derive_seed(self.seed, purpose)


class ExportablePolicy(Protocol):
    """The policy an algorithm hands to evaluation and export: it acts, and it can be rebuilt from its
    ``config()`` and ``state_dict()`` alone."""

    is_continuous: bool

    def act(self, obs: Tensor, action_mask: Tensor | None = None, generator: torch.Generator | None = None,
            deterministic: bool = False, noise: Tensor | None = None) -> Any: ...

    def config(self) -> dict: ...

    def state_dict(self) -> dict: ...


class Algorithm(Protocol):
    """What the runner talks to."""

    metric_names: tuple[str, ...]
    """The names of the metrics :meth:`iterate` returns (its :class:`Iteration`'s keys), for those that want to
    know them before the first iteration."""
    num_steps: int
    """Environment steps per iteration."""
    resume_notes: tuple[str, ...]
    """What the run's log should say after :meth:`load_state_dict` (state a checkpoint left out, so that the
    resume is not exact); empty when the resume is exact."""

    @property
    def policy(self) -> nn.Module:
        """The acting policy (:class:`ExportablePolicy`): evaluated, checkpointed as ``policy`` and exported."""

    def iterate(self, *, phase: PhaseTimer = no_phase) -> Iteration:
        """One iteration: collect from the bound environments, then learn. Returns its statistics, 0-dim tensors
        on the device, without synchronising with the host (a plain mapping of ``metric_names`` to tensors is
        accepted too, read by :meth:`Iteration.of`). ``phase(name)`` wraps each phase the algorithm can tell
        apart, for the progress view's time split."""

    def initial_policy(self) -> nn.Module:
        """A frozen copy of the policy as it is now (the baseline validations compare against; also the
        template best.pt's weights are loaded into)."""

    def set_progress(self, fraction: float | Tensor) -> None:
        """Training progress in [0, 1] (updates or steps done over the budget), for schedules such as the
        learning rate's. Called before each iteration; with a step budget it is a 0-dim float64 tensor on the
        device (the steps done are counted there, so reading it would synchronise)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything the next iteration depends on (networks, optimisers, random streams, normalisers), as
        tensors and plain values."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def collection_metrics(rollout: Rollout) -> Collected:
    """What one rollout collected, as 0-dim float tensors (no host synchronisation)."""
    return Collected.of({**rollout.episode_stats(), "transitions": rollout.transitions()})
