"""Learning while collecting (``--async-collect``): the next rollout is collected by a copy of the policy in a
second thread while the learner updates on the last one.

Iteration k learns from rollout k, collected by policy version k - 1 (version 0 for the first one, collected
before learning starts), while a worker thread collects rollout k + 1 with a copy of version k. Both halves run
torch operations (and engine steps) that release the GIL, so on a machine whose cores take turns between
stepping and learning, each keeps one busy. An iteration returns only once both halves are done: between
iterations nothing runs in the background, so a checkpoint taken then holds a consistent environment state, the
random streams and the rollout collected for the next iteration (saved with it: a resumed run continues exactly).

The data learned from is one policy version old (0 for the first rollout); logged as lags in optimizer steps, Sample
Factory's measure: an update of E epochs x M minibatches takes steps of lag E*M .. 2*E*M-1, and ``max_policy_lag``
drops the steps beyond it (:mod:`~rl_gpu.algos.ppo.lag`). PPO's ratio
is taken to the collecting policy's stored log-probabilities, as Sample Factory's APPO does, and
:class:`~rl_gpu.algos.vtrace.algorithm.APPO` / ``IMPALA`` correct the targets with V-trace
(:meth:`~rl_gpu.algos.vtrace.algorithm.APPO.log_rho`). The random numbers of a collection are drawn from the same
generators in the same order as the synchronous loop draws them; what differs is only which policy acts.
"""

from __future__ import annotations

import copy
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import Tensor, nn

from rl_gpu.collect.engine import RolloutEngine
from rl_gpu.collect.reference import collect
from rl_gpu.core.types import VecEnv
from rl_gpu.data.rollout import Rollout


class AsyncCollection:
    """The behaviour policy, its rollout engine and two rollout buffers, and the worker thread of one algorithm
    (a :class:`~rl_gpu.algos.ppo.PPO`) bound to one environment."""

    def __init__(self, policy: nn.Module, env: VecEnv, num_steps: int, compile: str) -> None:
        if compile == "cudagraphs":
            raise ValueError("--async-collect collects in a second thread: --compile cudagraphs replays one graph "
                             "for both halves; use --compile off or inductor")
        self.learner = policy
        self.behaviour = copy.deepcopy(policy).requires_grad_(False)
        """Acts in the collecting thread; takes the learner's parameters and statistics before each collection."""
        self.env, self.num_steps = env, num_steps
        self.engine = RolloutEngine(self.behaviour, env, num_steps, compile=compile) if env.spec.functional else None
        self.buffers = [self.engine.empty_rollout() for _ in range(2)] if self.engine is not None else []
        self.turn = 0
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rl_gpu-collect")
        self.next: tuple[Rollout, int] | None = None
        """The rollout the next iteration learns from, and the policy version that collected it."""

    def refresh(self, learning: Rollout | None = None) -> None:
        """The behaviour policy takes the learner's current parameters and buffers; with ``learning`` (the rollout
        the learner is about to learn from), its observation statistics then take that rollout in, as the
        learner's will once its update is done: the next rollout is then normalised with the statistics the
        learner will have when it learns from it (else every stale rollout would meet statistics one update
        newer than those it was acted with, which early in training differ by far)."""
        with torch.no_grad():
            for mine, theirs in zip(self.behaviour.state_dict().values(), self.learner.state_dict().values()):
                mine.copy_(theirs)
            if learning is not None:
                extra = {} if learning.critic_obs is None else {"critic_obs": learning.critic_obs}
                self.behaviour.update_normalizer(learning.obs, learning.live.float(), **extra)

    def start(self, policy_rng: torch.Generator) -> Any:
        """Begin collecting one rollout with the behaviour policy (its random numbers drawn now, in this thread,
        for a tensor environment); returns the future of the rollout."""
        if self.engine is None:
            return self.pool.submit(self._collect_host, policy_rng)
        noise = self.engine.draw(policy_rng)
        out = self.buffers[self.turn]
        self.turn ^= 1
        return self.pool.submit(self._collect_functional, noise, out)

    def _collect_functional(self, noise, out: Rollout) -> Rollout:
        with torch.no_grad():
            rollout, state = self.engine.run(noise, out=out)
        self.env.state = state
        rollout.all_weights_one = True
        return rollout

    def _collect_host(self, policy_rng: torch.Generator) -> Rollout:
        rollout = collect(self.behaviour, self.env, self.num_steps, policy_rng)
        rollout.all_weights_one = True
        return rollout

    def first(self, policy_rng: torch.Generator, version: int) -> None:
        """Collect the first rollout (nothing to overlap it with yet)."""
        if self.next is None:
            self.refresh()
            self.next = (self.start(policy_rng).result(), version)

    def state_dict(self) -> dict[str, Any]:
        """The rollout collected for the next iteration (between iterations nothing is in flight)."""
        if self.next is None:
            return {}
        rollout, version = self.next
        return {"version": version, "rollout": {f.name: getattr(rollout, f.name) for f in dataclasses.fields(rollout)}}

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        if not state:
            self.next = None
            return
        fields = {k: (v.to(device) if isinstance(v, Tensor) else v) for k, v in state["rollout"].items()}
        self.next = (Rollout(**fields), int(state["version"]))

    def close(self) -> None:
        self.pool.shutdown(wait=True)
