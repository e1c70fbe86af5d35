"""The environment check a training run makes before it writes anything: a few rows, a few steps of random legal
actions, each output held to the contract (shapes and dtypes against the spec, ``reward`` float32, ``terminated``
and ``truncated`` bool, masks bool with a legal action in every row, finite values, a state that saves and loads).

A :class:`~rl_gpu.envs.base.TensorEnv`'s own hooks (``_sample_initial_state``, ``_observe``, ``_legal_actions``,
``_transition``) are called first and their outputs checked, so that a wrong type is named where the environment
made it rather than where the base class first used it. Each failure raises :class:`EnvContractError`: one line
naming the environment class, the output, what was expected and what it got. An exception raised inside the
environment's own code is not caught: its traceback points at the user's line.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_gpu.core.types import VecEnv
from rl_gpu.envs.base import TensorEnv
from rl_gpu.envs.params import EnvContractError, check_starts
from rl_gpu.envs.testing.compare import check_result
from rl_gpu.envs.testing.drive import sample_actions
from rl_gpu.envs.testing.report import EnvCheckError

__all__ = ["EnvContractError", "check_run_env"]


def _describe(x: object) -> str:
    if isinstance(x, Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    return f"a {type(x).__name__}"


def _expect(env: object, what: str, x: object, shape: tuple, dtypes: tuple[torch.dtype, ...]) -> None:
    ok = isinstance(x, Tensor) and tuple(x.shape) == tuple(shape) and x.dtype in dtypes
    if not ok:
        names = " or ".join(str(d) for d in dtypes)
        raise EnvContractError(f"{type(env).__name__}: {what} must be a {names} tensor of shape {tuple(shape)}, "
                               f"got {_describe(x)}")


def _check_hooks(env: TensorEnv, seed: int) -> None:
    n = env.num_envs
    # The hooks draw on the environment's device, which must be the generator's device too (a CUDA env refuses a
    # CPU generator).
    generator = torch.Generator(device=env.device).manual_seed(seed)
    inner = check_starts(env, env._sample_initial_state(n, generator), n)
    agents = () if env.num_agents == 1 else (env.num_agents,)
    _expect(env, "_observe(state)", env._observe(inner), (n, *agents, *env.obs_shape), (env.obs_dtype,))
    if not env.is_continuous:
        mask = env._legal_actions(inner)
        _expect(env, "_legal_actions(state)", mask, (n, *agents, env.num_actions), (torch.bool,))
    result = env._transition(inner, _any_action(env, inner))
    if not isinstance(result, tuple) or len(result) != 3:
        size = f" of {len(result)}" if isinstance(result, tuple) else ""
        raise EnvContractError(f"{type(env).__name__}: _transition must return (next_state, reward, terminated), "
                               f"got {_describe(result)}{size}")
    _, reward, terminated = result
    _expect(env, "_transition's reward", reward, env.reward_shape, (torch.float32,))
    _expect(env, "_transition's terminated", terminated, (n,), (torch.bool,))
    if env.critic_obs_shape is not None:
        _expect(env, "_observe_critic(state)", env._observe_critic(inner), (n, *env.critic_obs_shape),
                (torch.float32,))


def _any_action(env: TensorEnv, inner: tuple) -> Tensor:
    """A legal action per row (the first legal one), without drawing from any generator."""
    if env.is_continuous:
        return torch.zeros((env.num_envs, *env._agents, *env.action_shape), device=env.device)
    mask = env._legal_actions(inner)
    return mask.to(torch.int8).argmax(-1)


def check_run_env(env: VecEnv, num_steps: int = 16, seed: int = 0) -> None:
    """Drive ``env`` (a small batch built for the check) for ``num_steps`` steps of random legal actions and raise
    :class:`EnvContractError` at the first output that breaks the contract. The environment is left stepped."""
    name = type(env).__name__
    generator = torch.Generator().manual_seed(seed)
    if isinstance(env, TensorEnv):
        _check_hooks(env, seed)
    try:
        step = env.reset()
        _check_step(env, step, 0)
        for t in range(1, num_steps + 1):
            action = sample_actions(env, step.action_mask, generator)
            step = env.step(action)
            _check_step(env, step, t)
        saved = env.state_dict()
        if env.spec.exact_resume:  # (an engine that restarts its environments on load declares it inexact)
            before = env.observe().obs.clone()
            env.load_state_dict(saved)
            if not torch.equal(before, env.observe().obs):
                raise EnvContractError(f"{name}: load_state_dict(state_dict()) changed the observation")
    except EnvCheckError as e:
        raise EnvContractError(f"{name}: " + " ".join(str(e).split())) from None


def _check_step(env: VecEnv, step, t: int) -> None:
    for field in ("obs", "reward", "final_obs", "critic_obs"):
        x = getattr(step, field, None)
        if isinstance(x, Tensor) and x.is_floating_point():
            bad = ~torch.isfinite(x).reshape(x.shape[0], -1).all(1)
            if bool(bad.any()):
                row = int(bad.nonzero()[0, 0])
                raise EnvContractError(f"{type(env).__name__}: {field} is not finite in env row {row} at step {t} "
                                       f"(got {x[row].tolist()})")
    if env.spec.num_agents == 1:
        check_result("environment check", env, step, t)
    if not env.spec.is_continuous:
        legal = step.action_mask.reshape(env.num_envs, -1, env.spec.num_actions).any(-1).all(-1)
        if not bool(legal.all()):
            row = int((~legal).nonzero()[0, 0])
            raise EnvContractError(f"{type(env).__name__}: every action is masked in env row {row} at step {t} "
                                   "(a row needs at least one legal action)")
