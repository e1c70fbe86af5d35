"""Checks of a training run that need no files, made before anything is written: the machine's limits, the
environment id, the device, and whether the run fits in the device's memory."""

from __future__ import annotations

import torch

from rl_gpu.algos.registry import algorithm_names, algorithm_spec
from rl_gpu.core.device import resolve_device
from rl_gpu.core.errors import UsageError
from rl_gpu.envs.params import EnvContractError
from rl_gpu.envs.registry import FAMILIES, is_known, make, registered_ids
from rl_gpu.envs.testing.preflight import check_run_env
from rl_gpu.runtime.allocator import keep_freed_host_memory
from rl_gpu.training.config import TrainConfig, check_machine_limits
from rl_gpu.training.resources import check_memory


def check_env_id(env_id: str) -> None:
    """Refuse an environment id that is neither registered, nor of a prefixed family, nor ``module:Class``."""
    if not is_known(env_id):
        raise UsageError(f"unknown environment {env_id!r}; known: {', '.join(registered_ids())}, {FAMILIES}, "
                         "or package.module:ClassName")


def prepare(config: TrainConfig) -> torch.device:
    """Checks that need no files, in the order a user would fix them; returns the device."""
    check_machine_limits(config)
    algorithm_spec(config.algo).check_start(config)
    check_env_id(config.env)
    if config.eval_env is not None:
        check_env_id(config.eval_env)
    device = resolve_device(config.device)
    torch.set_num_threads(config.threads)
    keep_freed_host_memory()
    return device


def check_agents(env, config: TrainConfig) -> None:
    """Refuse (closing ``env``) an environment of several agents acting at once for an algorithm of one."""
    agents = env.spec.num_agents
    if agents > 1 and not algorithm_spec(config.algo).agents:
        env.close()
        able = " or ".join(f"--algo {n}" for n in algorithm_names() if algorithm_spec(n).agents) or "none yet"
        raise UsageError(f"{config.env} has {agents} agents acting at once, and --algo {config.algo} trains one "
                         f"agent per row: train it with {able}")


def check_env_and_memory(config: TrainConfig, device: torch.device) -> None:
    """Refuse a run too large for ``device``, judged from a few environments (nothing large allocated). An
    environment that is not one of rl_gpu's own is checked first (:func:`rl_gpu.envs.testing.preflight.
    check_run_env`: a few steps, every output against the contract): a broken one is refused in one line,
    before any file is written."""
    try:
        probe = make(config.env, num_envs=PROBE_ROWS, device=device, seed=0, validate_actions=False)
    except ImportError as e:
        raise UsageError(str(e)) from None
    except EnvContractError as e:
        raise UsageError(f"--env {config.env}: {e}") from None
    try:
        if not _own_env(type(probe)):
            check_run_env(probe)
        spec = probe.spec
    except EnvContractError as e:
        raise UsageError(f"--env {config.env} breaks the environment contract: {e}") from None
    finally:
        close = getattr(probe, "close", None)
        if callable(close):
            close()
    if config.eval_env is not None:
        check_eval_env(config, spec, device)
    check_memory(config, spec, device)


def check_eval_env(config: TrainConfig, spec, device: torch.device) -> None:
    """Refuse an ``--eval-env`` whose observations or actions differ from ``--env``'s (the policy plays both)."""
    try:
        probe = make(config.eval_env, num_envs=PROBE_ROWS, device=device, seed=0, validate_actions=False)
    except (ImportError, EnvContractError) as e:
        raise UsageError(f"--eval-env {config.eval_env}: {e}") from None
    other = probe.spec
    getattr(probe, "close", lambda: None)()
    keys = ("obs_shape", "obs_dtypes", "num_actions", "action_shape", "num_agents", "num_players")
    differ = [k for k in keys if getattr(other, k, None) != getattr(spec, k, None)]
    if differ:
        raise UsageError(f"--eval-env {config.eval_env} differs from --env {config.env} in {', '.join(differ)}: the "
                         f"policy trained on one must play the other")


PROBE_ROWS = 4
"""Rows of the environment a run builds to check it before training."""


def _own_env(cls: type) -> bool:
    """rl_gpu's own environments (checked against their references by the test suite), not the Gymnasium bridge
    (whatever Gymnasium environment it wraps is the user's)."""
    return cls.__module__.startswith("rl_gpu.envs.") and not cls.__module__.startswith("rl_gpu.envs.gymnasium")


def env_fault(env) -> str | None:
    """After a numerical fault: whether the environment's own output is what went non-finite (its observation
    now, or its episode returns, which sum the rewards), as ``"<field> in env row R"``; None when it looks finite.
    Reads the environment's state back once (only after a fault)."""
    try:
        step = env.observe()
    except Exception:  # noqa: BLE001 -- a diagnosis must never hide the fault it explains
        return None
    for field in ("obs", "critic_obs", "episode_return"):
        x = getattr(step, field, None)
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            bad = ~torch.isfinite(x.reshape(x.shape[0], -1)).all(1)
            if bool(bad.any()):
                what = "reward (the episode return sums it)" if field == "episode_return" else field
                return f"{what} in env row {int(bad.nonzero()[0, 0])}"
    return None
