"""The replay recorder of the collector family: collecting transitions for a replay buffer (SAC, TD3): T steps of N environments with the acting policy (or uniformly
random actions before learning starts), recorded as what the buffer stores.

Shape legend: T = steps per iteration, N = environments, O = observation shape, D = action dimensions.

A functional environment (:class:`~rl_gpu.core.types.FunctionalEnv`) is stepped by one pure function per step
(:func:`transition_step`: action, transition with auto-reset, the step's record), compiled in the ``inductor``
and ``cudagraphs`` modes; every random number (action noise, fresh episode starts) is drawn before the steps
run (:meth:`TransitionCollector.draw`), so the pure steps hold no random-number generation and the eager and
compiled paths consume the same streams. A host-stepped environment is stepped through its own ``step``.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import torch
from torch import Tensor

from rl_gpu.core.pytree import tree_stack
from rl_gpu.core.types import StepResult, VecEnv
from rl_gpu.data.episodes import episode_metrics as summarise_episodes
from rl_gpu.nn.squashed import SquashedActor
from rl_gpu.runtime.compile import compile_unit, env_simd


class CollectNoise(NamedTuple):
    """Every random number of one collection of T steps, drawn before it runs."""

    action: Tensor
    """``[T, N, D]``: standard normal exploration noise, or (random actions) uniform in [0, 1)."""
    reset: Any
    """Functional environments: the inner state with fields ``[T, N, ...]``, fresh starts for rows that finish
    at step t; None for host-stepped environments (their ``step`` draws its own)."""


class Transitions(NamedTuple):
    """T steps of the N environments, ``[T, N, ...]`` each: what the replay buffer stores, and the endings of
    episodes for the iteration's statistics."""

    obs: Tensor
    """``[T, N, *O]`` observation each action was taken in."""
    action: Tensor
    """``[T, N, D]`` the action the environment received."""
    reward: Tensor
    """``[T, N]``."""
    next_obs: Tensor
    """``[T, N, *O]`` the observation reached (``final_obs``: before any auto-reset)."""
    terminated: Tensor
    """``[T, N]`` bool."""
    truncated: Tensor
    """``[T, N]`` bool."""
    episode_return: Tensor
    """``[T, N]`` return of the episode that ended at this step, 0 elsewhere."""
    episode_length: Tensor
    """``[T, N]`` int64 length of the episode that ended at this step, 0 elsewhere."""


def correlated(noise: Tensor, previous: Tensor, correlation: float) -> Tensor:
    """``[N, D]`` exploration noise of an AR(1) process of unit variance: ``rho * previous + sqrt(1 - rho^2) *
    noise`` for standard normal ``noise`` (``noise`` itself when ``rho`` is 0)."""
    if correlation == 0.0:
        return noise
    return correlation * previous + (1.0 - correlation**2) ** 0.5 * noise


def choose_action(policy: SquashedActor, obs: Tensor, noise: Tensor, random_actions: bool) -> Tensor:
    """``[N, D]`` environment actions: uniform over the bounds from ``noise`` uniform in [0, 1) when
    ``random_actions``, else the policy's exploring action for standard normal ``noise``."""
    if random_actions:
        return policy.to_env(2.0 * noise - 1.0)
    return policy.act(obs, None, None, False, noise=noise).action


def record(obs: Tensor, action: Tensor, step: StepResult) -> Transitions:
    """One step's ``[N, ...]`` slice of :class:`Transitions`."""
    done = step.terminated | step.truncated
    return Transitions(obs, action, step.reward, step.final_obs, step.terminated, step.truncated,
                       torch.where(done, step.episode_return, 0.0), torch.where(done, step.episode_length, 0))


def transition_step(policy: SquashedActor, env, random_actions: bool, correlation: float, state: Any, obs: Tensor,
                    previous: Tensor, noise: Tensor, reset_inner: Any) -> tuple[Any, Tensor, Tensor, Transitions]:
    """One step of a functional environment as a pure function: ``(next state, next obs [N, *O], the step's
    exploration noise [N, D], record)``; ``previous`` is the last step's exploration noise."""
    if not random_actions:
        noise = correlated(noise, previous, correlation)
    action = choose_action(policy, obs, noise, random_actions)
    state, step = env.step_state(state, action, reset_inner)
    return state, step.obs, noise, record(obs, action, step)


class TransitionCollector:
    """T steps of ``env`` with ``policy`` into preallocated ``[T, N, ...]`` storage, eager or compiled per step.

    Args:
        policy: the acting actor.
        env: the N environments (functional or host-stepped).
        num_steps: T.
        compile: ``off``, ``inductor`` or ``cudagraphs`` (the per-step function of a functional environment is
            compiled in the last two; graph capture of whole iterations is the algorithm's).
        noise_correlation: the exploration noise's step-to-step correlation (:func:`correlated`); the last
            step's noise is kept in :attr:`noise_state` from one collection to the next.
    """

    def __init__(self, policy: SquashedActor, env: VecEnv, num_steps: int, compile: str = "off",
                 noise_correlation: float = 0.0) -> None:
        self.policy = policy
        self.env = env
        self.num_steps = num_steps
        self.correlation = float(noise_correlation)
        self.functional = bool(env.spec.functional)
        self._steps = {}
        if self.functional:
            self._steps = {flag: compile_unit(partial(transition_step, policy, env, flag, self.correlation),
                                              compile, simd=env_simd(env)) for flag in (False, True)}
        spec, t, n, device = env.spec, num_steps, env.num_envs, env.device
        self.noise_state = torch.zeros(n, *spec.action_shape, device=device)
        """``[N, D]`` the exploration noise of each environment's last policy step (zeros at first)."""

        def empty(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        self.storage = Transitions(
            obs=empty(t, n, *spec.obs_shape, dtype=spec.obs_dtype()), action=empty(t, n, *spec.action_shape),
            reward=empty(t, n), next_obs=empty(t, n, *spec.obs_shape, dtype=spec.obs_dtype()),
            terminated=empty(t, n, dtype=torch.bool),
            truncated=empty(t, n, dtype=torch.bool), episode_return=empty(t, n),
            episode_length=empty(t, n, dtype=torch.long))
        """Reused by every collection: the returned :class:`Transitions` is overwritten by the next one."""

    def draw(self, random_actions: bool, generator: torch.Generator | None) -> CollectNoise:
        """Every random number of the next collection: the action noise (``generator``), then the fresh starts
        of a functional environment (its own generator), one call per step."""
        env, t = self.env, self.num_steps
        shape = (t, env.num_envs, *env.spec.action_shape)
        if random_actions:
            action = torch.rand(shape, generator=generator, device=env.device)
        else:
            action = torch.randn(shape, generator=generator, device=env.device)
        reset = tree_stack([env.draw_starts(env.num_envs) for _ in range(t)]) if self.functional else None
        return CollectNoise(action, reset)

    def _store(self, t: int, values: Transitions) -> None:
        # Copied at once: a host-stepped environment's results may share memory with its state.
        for slot, value in zip(self.storage, values):
            slot[t].copy_(value)

    @torch.no_grad()
    def run(self, noise: CollectNoise, random_actions: bool, state: Any = None) -> tuple[Transitions, Any]:
        """The T steps for pre-drawn ``noise``. A functional environment starts from ``state`` (default
        ``env.state``) and the state it ends in is returned (the caller stores it); a host-stepped one is
        stepped in place (None is returned for the state). No host synchronisation here; a host-stepped
        environment's own ``step`` may read actions back."""
        env = self.env
        previous = self.noise_state
        if not self.functional:
            obs = env.observe().obs
            for t in range(self.num_steps):
                step_noise = noise.action[t]
                if not random_actions:
                    step_noise = previous = correlated(step_noise, previous, self.correlation)
                action = choose_action(self.policy, obs, step_noise, random_actions)
                step = env.step(action)
                self._store(t, record(obs, action, step))
                obs = step.obs
        else:
            state = env.state if state is None else state
            obs = env.timestep(state).obs
            unit = self._steps[random_actions]
            actions = noise.action.unbind(0)
            resets = [x.unbind(0) for x in noise.reset]
            for t in range(self.num_steps):
                state, obs, step_noise, values = unit(state, obs, previous, actions[t],
                                                      type(noise.reset)(*(f[t] for f in resets)))
                self._store(t, values)
                if not random_actions:
                    previous = step_noise
        if self.correlation and not random_actions:
            self.noise_state.copy_(previous)
        return self.storage, state


def episode_metrics(transitions: Transitions) -> dict[str, Tensor]:
    """0-dim float tensors over the episodes that ended in ``transitions`` (count, mean return, mean length,
    share of positive returns) and the transitions taken (every slot is one). No host synchronisation."""
    ended = transitions.terminated | transitions.truncated
    stats = summarise_episodes(ended, transitions.episode_return, transitions.episode_length)
    return {**stats, "episodes": stats["episodes"].float(),
            "transitions": torch.full((), float(transitions.reward.numel()), device=transitions.reward.device)}
