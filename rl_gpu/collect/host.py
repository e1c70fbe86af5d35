"""The host collector: rollouts of an environment whose state lives in an engine (MuJoCo, MuJoCo Warp,
Gymnasium: ``spec.functional`` False), with the policy's half of every step compiled.

Shape legend: T = steps per rollout, N = environments, O = observation shape, A = discrete actions,
D = continuous action dimensions, C = the ``critic`` group.

The engine steps itself through ``env.step`` (eager: its state is not tensors the compiler can trace). Everything
the policy does in a step is one unit, :func:`policy_half` (the action from pre-drawn sampling noise, its
log-probability and V(obs)), and V(final_obs) of a truncated episode another, :func:`value_half`; both are
compiled with Inductor unless ``compile`` is ``off``. The noise is drawn eagerly, one call per step from the
policy's generator, exactly as :func:`rl_gpu.collect.reference.collect` draws it, so a :class:`HostCollector`
rollout equals the reference collector's for the same generator states (``tests/collect/test_host.py``).

It collects what PPO collects from such environments: one player, one agent per row, a feed-forward policy,
continuing or episodic; :func:`supports` says whether an environment and a policy are such (the reference
collector takes the rest).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from rl_gpu.collect.engine import action_noise
from rl_gpu.collect.reference import critic_kwargs
from rl_gpu.core.types import Actor, VecEnv
from rl_gpu.data.rollout import Rollout
from rl_gpu.nn.memory import is_recurrent
from rl_gpu.runtime.compile import CompileMode, compile_unit


def supports(policy: Actor, env: VecEnv) -> bool:
    """Whether :class:`HostCollector` collects ``policy`` on ``env``."""
    spec = env.spec
    return not spec.functional and spec.num_agents == 1 and env.num_players == 1 and not is_recurrent(policy)


def policy_half(policy: Actor, deterministic: bool, obs: Tensor, action_mask: Tensor, noise: Tensor | None,
                critic_obs: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """``(action, log_prob [N], value [N])`` for ``[N, *O]`` observations, from ``noise`` (``[N, A]`` uniform or
    ``[N, D]`` standard normal; None when ``deterministic``)."""
    out = policy.act(obs, action_mask, None, deterministic, noise=noise, **critic_kwargs(critic_obs))
    return out.action, out.log_prob, out.value


def value_half(policy: Actor, obs: Tensor, critic_obs: Tensor | None) -> Tensor:
    """``[N]`` V(obs)."""
    return policy.value(obs, **critic_kwargs(critic_obs))


class HostCollector:
    """``[T, N]`` rollouts of a host-stepped environment with a compiled policy half (see the module docstring).

    Args:
        policy: the learner (``act(..., noise=)`` and ``value``).
        env: N environments of one player and one agent each, stepped by their engine.
        num_steps: T.
        episodic: every row starts a fresh episode and the steps after its end are padding (as in
            :func:`~rl_gpu.collect.reference.collect`); else the batch carries on across rollouts.
        deterministic: the learner takes its most probable action.
        compile: ``off`` (eager: the same code, uncompiled), ``inductor`` or ``cudagraphs`` (both compile the
            policy half with Inductor; the engine's step stays outside any graph).
    """

    def __init__(self, policy: Actor, env: VecEnv, num_steps: int, *, episodic: bool = False,
                 deterministic: bool = False, compile: CompileMode = "off") -> None:
        if not supports(policy, env):
            raise ValueError(f"the host collector takes a feed-forward policy on a host-stepped environment of one "
                             f"player and one agent per row; {type(env).__name__} is not (use "
                             "rl_gpu.collect.reference.collect)")
        if num_steps <= 0:
            raise ValueError(f"num_steps must be positive, got {num_steps}")
        self.policy, self.env, self.num_steps = policy, env, num_steps
        self.episodic, self.deterministic = episodic, deterministic
        self._act = compile_unit(partial(policy_half, policy, deterministic), compile)
        self._value = compile_unit(partial(value_half, policy), compile)

    def _noise(self, generator: torch.Generator | None) -> Tensor | None:
        return None if self.deterministic else action_noise(self.policy, self.env, generator)

    @torch.no_grad()
    def collect(self, policy_rng: torch.Generator | None = None,
                opponent_rng: torch.Generator | None = None) -> Rollout:
        """One rollout (fresh tensors), the environment left where it ended. ``opponent_rng`` advances as the
        reference collector's does (it draws every row's seat, seat 0 here)."""
        env, n, device = self.env, self.env.num_envs, self.env.device
        step = env.reset() if self.episodic else env.observe()
        learner_seat = torch.randint(0, 1, (n,), generator=opponent_rng, device=device)
        live = torch.ones(n, dtype=torch.bool, device=device)
        names = ("obs", "action_mask", "action", "log_prob", "value", "weight", "live", "reward", "terminated",
                 "truncated", "final_value", "episode_return", "episode_length", "critic_obs")
        steps: dict[str, list[Tensor]] = {k: [] for k in names}
        bootstrap_truncated = env.max_episode_steps is not None
        for _ in range(self.num_steps):
            action, log_prob, value = self._act(step.obs, step.action_mask, self._noise(policy_rng),
                                                step.critic_obs)
            before = step
            step = env.step(action)
            terminated, truncated = step.terminated & live, step.truncated & live
            if bootstrap_truncated:
                final_value = torch.where(truncated, self._value(step.final_obs, step.final_critic_obs), 0.0)
            else:
                final_value = torch.zeros_like(step.reward)
            done = terminated | truncated
            for name, x in (("obs", before.obs), ("action_mask", before.action_mask), ("action", action),
                            ("log_prob", log_prob), ("value", value), ("weight", live.float()), ("live", live),
                            ("reward", torch.where(live, step.reward, 0.0)), ("terminated", terminated),
                            ("truncated", truncated), ("final_value", final_value),
                            ("episode_return", torch.where(done, step.episode_return, 0.0)),
                            ("episode_length", torch.where(done, step.episode_length, 0)),
                            ("critic_obs", before.critic_obs)):
                if x is not None:
                    steps[name].append(x)
            if self.episodic:
                live = live & ~done
        bootstrap = (torch.zeros(n, device=device) if self.episodic
                     else self._value(step.obs, step.critic_obs))
        stacked = {k: torch.stack(v) for k, v in steps.items() if v}
        return Rollout(**stacked, bootstrap_value=bootstrap, learner_seat=learner_seat)
