"""``rl-gpu bench --compare``: other libraries' vector environments of the same id, timed as
:mod:`rl_gpu.cli.bench` times rl_gpu's (the timing helpers both use live here).

``cfg`` arguments are :class:`rl_gpu.cli.bench.BenchConfig` (``env``, ``seed``, ``threads``, ``repeats``,
``env_transitions``).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

from rl_gpu.core.device import synchronize


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of ``fn()``, with the device synchronised before and after."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def cell(measure: str, n: int, mode: str, first: float, second: float, times: list[float],
         transitions_per_call: float, **extra) -> dict:
    """One result: the timings of a measurement at one N and compile mode (or baseline), and its throughput
    (transitions per call over the median call)."""
    median = statistics.median(times)
    return {"measure": measure, "num_envs": n, "compile": mode, "first_call_s": first, "second_call_s": second,
            "call_s": times, "median_call_s": median, "transitions_per_call": transitions_per_call,
            "transitions_per_s": transitions_per_call / median, **extra}


def run_calls(fn: Callable[[], object], device: torch.device, repeats: int) -> tuple[float, float, list[float]]:
    """``(first call, second call, [repeats timed calls])`` in seconds."""
    first = timed(fn, device)
    second = timed(fn, device)
    return first, second, [timed(fn, device) for _ in range(repeats)]


def baseline_id(env_id: str) -> str:
    """The id other libraries know ``env_id`` by: a ``gym:`` id's Gymnasium id, else the id itself (rl_gpu's
    CartPole-v1, HalfCheetah-v5, ... reimplement Gymnasium's task of the same id)."""
    return env_id[len("gym:"):] if env_id.startswith("gym:") else env_id


def baseline_unavailable(baseline: str, env_id: str) -> str | None:
    """Why ``baseline`` cannot be timed on ``env_id`` here (one line), or None when it can."""
    other = baseline_id(env_id)
    if baseline == "gymnasium":
        try:
            import gymnasium
        except ImportError:
            return "gymnasium is not installed (pip install 'rl-gpu[bench]')"
        if other not in gymnasium.registry:
            return f"Gymnasium has no {other}"
        return None
    try:
        import envpool
    except ImportError as e:
        return f"envpool is not installed here ({' '.join(str(e).split())[:80]}; pip install envpool)"
    if other not in envpool.list_all_envs():
        return f"envpool {getattr(envpool, '__version__', '')} has no {other}"
    return None


def time_next_step_autoreset(cfg, n: int, step_fn: Callable, space) -> tuple:
    """Time ``step_fn(actions)`` of a vector environment that autoresets on the *next* step: a row that finished
    spends its next step resetting, which is not a transition, so those row-steps are not counted. Returns
    ``(first, second, times, transitions per call, steps per call)``."""
    import numpy as np

    rng = np.random.default_rng(cfg.seed)
    if hasattr(space, "n"):
        actions = rng.integers(0, space.n, size=(16, n))
    else:
        actions = rng.uniform(space.low, space.high, size=(16, n, *space.shape)).astype(space.dtype)
    steps = max(16, math.ceil(cfg.env_transitions / n))
    counted = [0]
    prev_done = np.zeros(n, dtype=bool)

    def run() -> None:
        nonlocal prev_done
        for i in range(steps):
            _, _, terminated, truncated, _ = step_fn(actions[i % 16])
            counted[0] += n - int(prev_done.sum())
            prev_done = np.asarray(terminated | truncated, dtype=bool)

    first, second, times = run_calls(run, torch.device("cpu"), cfg.repeats)
    return first, second, times, counted[0] / (cfg.repeats + 2), steps


def bench_gymnasium(cfg, n: int) -> dict:
    """Gymnasium's vector environment of the same id stepped with fixed random actions, timed like
    ``bench_env``: its numpy ``CartPoleVectorEnv`` for CartPole-v1, else ``make_vec(id, "sync")`` (one world
    after another on one core; Gymnasium's own MuJoCo v5 tasks for HalfCheetah-v5 and the like)."""
    import gymnasium

    other = baseline_id(cfg.env)
    if other == "CartPole-v1":
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

        envs, kind = CartPoleVectorEnv(num_envs=n), "gymnasium.envs.classic_control.cartpole.CartPoleVectorEnv"
    else:
        envs = gymnasium.make_vec(other, num_envs=n, vectorization_mode="sync")
        kind = "gymnasium.vector.SyncVectorEnv"
    try:
        envs.reset(seed=cfg.seed)
        first, second, times, per_call, steps = time_next_step_autoreset(cfg, n, envs.step,
                                                                          envs.single_action_space)
    finally:
        envs.close()
    return cell("env", n, "gymnasium", first, second, times, per_call, steps_per_call=steps, implementation=kind,
                gymnasium_id=other, gymnasium_version=gymnasium.__version__)


def bench_envpool(cfg, n: int) -> dict:
    """envpool's batch of the same id (``env_type="gymnasium"``, all N rows per call, ``--threads`` worker
    threads), timed like :func:`bench_gymnasium` (envpool also resets a finished row on the next call)."""
    import envpool

    other = baseline_id(cfg.env)
    envs = envpool.make(other, env_type="gymnasium", num_envs=n, num_threads=cfg.threads, seed=cfg.seed)
    try:
        envs.reset()
        first, second, times, per_call, steps = time_next_step_autoreset(cfg, n, envs.step, envs.action_space)
    finally:
        close = getattr(envs, "close", None)
        if close is not None:
            close()
    return cell("env", n, "envpool", first, second, times, per_call, steps_per_call=steps,
                implementation=f"envpool.make({other!r}, env_type='gymnasium', num_threads={cfg.threads})",
                envpool_version=getattr(envpool, "__version__", None))


BASELINES = {"gymnasium": bench_gymnasium, "envpool": bench_envpool}


def ratios(cells: list[dict], baseline: str = "gymnasium") -> list[dict]:
    """Env-only throughput of each compile mode over ``baseline``'s (gymnasium, envpool), per N (same process,
    same kind of actions)."""
    other = {c["num_envs"]: c for c in cells if c["compile"] == baseline}
    out = []
    for c in cells:
        if c["measure"] == "env" and c["compile"] not in BASELINES and c["num_envs"] in other:
            base = other[c["num_envs"]]["transitions_per_s"]
            out.append({"num_envs": c["num_envs"], "compile": c["compile"], "ratio": c["transitions_per_s"] / base,
                        "transitions_per_s": c["transitions_per_s"], "baseline_transitions_per_s": base})
    return out


BASELINE_NAMES = {"gymnasium": "Gymnasium", "envpool": "envpool"}
"""How the summary names each baseline."""
