"""``rl-gpu bench`` / ``python -m rl_gpu bench``: honest throughput of the hot loop over a sweep of N.

Three measurements per N and compile mode, each counting *transitions* (environment steps actually taken by one
environment row; padding slots after an episodic game ends are not counted, and neither are Gymnasium's
reset-only steps):

- ``env``: environment steps alone (random actions drawn once up front, auto-reset included);
- ``collect``: a rollout of T steps: policy inference, environment step, storage (``PPO.collect``);
- ``train``: one iteration of the algorithm exactly as the runner calls it (``Algorithm.iterate``: collect + GAE +
  the full update).

Every timed region is bracketed by a device synchronisation. The first two calls of every cell are reported
apart (the first pays compilation, the second CUDA-graph capture) and are not in the medians; the figure is the
median over ``--repeats`` timed calls.

``--compare`` times other implementations of the same id in the same process, env-only, with the same kind of
random actions: ``gymnasium`` (Gymnasium's numpy ``CartPoleVectorEnv`` for CartPole-v1, else
``gymnasium.make_vec(id, vectorization_mode="sync")``: MuJoCo ids such as HalfCheetah-v5 against Gymnasium's own
v5 task, one world after another on one core) and ``envpool`` (``envpool.make(id, env_type="gymnasium")`` with
``--threads`` worker threads, where envpool is installed and has the id). An id the other library lacks is
skipped with a line saying so.

Host-stepped environments (``spec.functional`` False: MuJoCo's engine, ``gym:`` ids) step eagerly: their env-only
cell runs with ``off`` only, and their engine's worker threads follow ``--threads``. For an environment with an
``engine`` (MuJoCo), the ``off`` env-only cell also reports the share of ``env.step`` spent in ``engine.step``
(MuJoCo's stepping and the host copies around it); the rest is the task's torch code (observation, reward,
resets).
"""

from __future__ import annotations

import datetime
import inspect
import json
import math
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Literal

import torch
import tyro

from rl_gpu.algos.base import Setup
from rl_gpu.core.errors import UsageError
from rl_gpu.algos.registry import algorithm_spec
from rl_gpu.cli.bench_baselines import (BASELINE_NAMES, BASELINES, baseline_unavailable, cell, ratios, run_calls,
                                        timed)
from rl_gpu.cli.parsing import fail, parse
from rl_gpu.core.schema import check_bounds, check_fields, flag_name
from rl_gpu.training.config import MAX_NUM_STEPS
from rl_gpu.collect.stepper import EnvStepper
from rl_gpu.data.rollout import empty_rollout
from rl_gpu.envs.registry import make
from rl_gpu.runtime.files import atomic_write_bytes, check_output as check_output_file

PROG = "rl-gpu bench"
MAX_NUM_ENVS = 2**21
"""Largest N swept (about 2 GB of CartPole rollout storage and pre-drawn noise; a benchmark, not a run)."""
MAX_REPEATS = 1000
MAX_ENV_TRANSITIONS = 10**10
MEASURES = ("env", "collect", "train")
CHUNK = 16
MAX_RESULTS_BYTES = 64 * 2**20
"""A results file to be replaced is read to check that it is JSON; anything larger is not one of ours."""


@dataclass(frozen=True)
class BenchConfig:
    """Measure env-only, env + inference and full-training throughput (transitions per second) over N."""

    env: str = "CartPole-v1"
    """environment id"""
    num_envs: tuple[int, ...] = (16, 256, 4096, 65536)
    """N values to sweep (one or several, each at most 2,097,152)"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, else CPU"""
    threads: int = 1
    """torch intra-op CPU threads (1 by default: on small machines more threads stalled whenever another core was busy)"""
    compile: Annotated[tuple[Literal["off", "inductor", "cudagraphs"], ...],
                       tyro.conf.arg(help_behavior_hint="")] = ()
    """compile modes to measure; none given: off inductor on CPU, off inductor cudagraphs on CUDA"""
    measure: tuple[Literal["env", "collect", "train"], ...] = MEASURES
    """which measurements to run"""
    num_steps: int | None = None
    """T, steps per rollout (default 16; the longest game for turn-based games)"""
    repeats: int = 5
    """timed calls per cell (at most 1000); the median is reported"""
    minibatch_size: int = 16384
    """train measurement: PPO minibatch slots (4 epochs of minibatches of at most this size, so the update's
    work per transition and its memory do not grow with N)"""
    env_transitions: int = 262144
    """env measurement: transitions per timed call (rounded up to whole steps of N rows; at most 10**10)"""
    compare: Annotated[tuple[Literal["none", "gymnasium", "envpool"], ...],
                       tyro.conf.arg(help_behavior_hint="(default: none)")] = ()
    """also time other implementations of the id env-only in this process: gymnasium (its numpy
    CartPoleVectorEnv for CartPole-v1, else make_vec(id, vectorization_mode="sync"), MuJoCo ids included),
    envpool (where installed; --threads worker threads)"""
    output: Path = Path("artifacts/bench.json")
    """JSON results file (an existing file is replaced only when it is JSON, checked before measuring)"""
    seed: int = 0
    """seeds environments, policy and generators"""

    def __post_init__(self) -> None:
        check_fields(self, label=flag_name)
        if not 0 <= self.seed <= 2**63 - 1:
            raise UsageError(f"--seed must be between 0 and 2**63 - 1 (as train's --seeds), got {self.seed}")
        if not self.num_envs or any(n <= 0 or n > MAX_NUM_ENVS for n in self.num_envs):
            raise ValueError(f"--num-envs must be integers from 1 to {MAX_NUM_ENVS:,}, got {list(self.num_envs)}")
        check_bounds(self, {"threads": None, "repeats": MAX_REPEATS, "env_transitions": MAX_ENV_TRANSITIONS,
                            "minibatch_size": MAX_NUM_ENVS, "num_steps": MAX_NUM_STEPS}, label=flag_name)
        if not self.measure:
            raise ValueError("--measure needs at least one of env, collect, train")

    @property
    def baselines(self) -> tuple[str, ...]:
        """The implementations ``--compare`` names, in order, without ``none`` or repeats."""
        return tuple(dict.fromkeys(c for c in self.compare if c != "none"))


def peak_host_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def env_options(env_id: str, threads: int) -> dict:
    """Keyword arguments for :func:`make` so that a host engine's worker threads follow ``--threads``
    (``num_threads`` for classes that take it, such as the MuJoCo tasks); empty for the others."""
    from rl_gpu.envs.registry import env_class

    try:
        parameters = inspect.signature(env_class(env_id)).parameters
    except (TypeError, ValueError):
        return {}
    return {"num_threads": threads} if "num_threads" in parameters else {}


class EngineTimer:
    """Accumulates the wall time of ``env.engine.step`` while installed (an instance attribute shadowing the
    method; removed by :meth:`remove`)."""

    def __init__(self, engine) -> None:
        self.engine, self.seconds, self.calls = engine, 0.0, 0
        step = engine.step

        def timed_step(*args, **kwargs):
            start = time.perf_counter()
            try:
                return step(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        engine.step = timed_step

    def remove(self) -> None:
        self.engine.__dict__.pop("step", None)


def bench_env(cfg: BenchConfig, device: torch.device, n: int, mode: str) -> dict:
    env = make(cfg.env, num_envs=n, device=device, seed=cfg.seed, validate_actions=False,
               **env_options(cfg.env, cfg.threads))
    g = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    actions = random_actions(env, CHUNK, g)
    chunks = max(1, math.ceil(cfg.env_transitions / (n * CHUNK)))
    steps = chunks * CHUNK
    if mode == "off":
        def call() -> None:
            for i in range(steps):
                env.step(actions[i % CHUNK])
        how = "TensorEnv.step (a fresh start drawn for every row at every step)"
        stepper = None
    else:
        stepper = EnvStepper(env, mode, chunk=CHUNK)

        def call() -> None:
            for _ in range(chunks):
                stepper.step(actions)
        how = f"EnvStepper: {CHUNK} compiled steps per call, {stepper.slots} fresh starts per row per call"
    engine = getattr(env, "engine", None)
    timer = None
    if stepper is None and engine is not None and callable(getattr(engine, "step", None)):
        first = timed(call, device)
        second = timed(call, device)
        timer = EngineTimer(engine)
        try:
            times = [timed(call, device) for _ in range(cfg.repeats)]
        finally:
            timer.remove()
    else:
        first, second, times = run_calls(call, device, cfg.repeats)
    extra = {"steps_per_call": steps, "how": how}
    if stepper is not None:
        extra["reused_starts"] = int(stepper.reused)
    if timer is not None:
        # Over the timed calls: engine.step (MuJoCo's stepping and the host copies around it) against the
        # whole env.step, the rest being the task's torch code (observation, reward, resets, auto-reset).
        extra["engine_seconds_per_call"] = timer.seconds / cfg.repeats
        extra["engine_share"] = timer.seconds / sum(times)
        extra["engine_threads"] = getattr(engine, "num_threads", None)
    close = getattr(env, "close", None)
    if close is not None:
        close()
    # Every row-step of a same-step auto-reset batch is a transition.
    return cell("env", n, mode, first, second, times, float(steps * n), **extra)


def random_actions(env, k: int, generator: torch.Generator) -> torch.Tensor:
    """``[k, N]`` random actions: uniform over all actions (continuous: uniform within the bounds)."""
    if env.is_continuous:
        low = torch.tensor(env.action_low, device=env.device)
        high = torch.tensor(env.action_high, device=env.device)
        u = torch.rand((k, env.num_envs, *env.action_shape), generator=generator, device=env.device)
        return low + (high - low) * u
    return torch.randint(0, env.num_actions, (k, env.num_envs), generator=generator, device=env.device)


def _algo(cfg: BenchConfig, device: torch.device, n: int, mode: str):
    env = make(cfg.env, num_envs=n, device=device, seed=cfg.seed, validate_actions=False,
               **env_options(cfg.env, cfg.threads))
    # Turn-based games are collected as whole games (PPO's own T); other tasks in rollouts of 16 steps.
    ppo = algorithm_spec("ppo")
    steps = cfg.num_steps or (ppo.num_steps_for(env.spec) if env.spec.num_players > 1 else 16)
    torch.manual_seed(cfg.seed)
    slots = steps * n
    minibatches = max(1, slots // cfg.minibatch_size)
    while slots % minibatches:
        minibatches += 1
    # Built exactly as the runner builds its algorithm, and timed through the same iterate().
    setup = Setup(env=env, seed=cfg.seed, learning_rate=1e-3, num_steps=steps, compile=mode)
    algo = ppo.build(setup, ppo.config_class()(num_minibatches=minibatches, update_epochs=4))
    return env, algo, steps


def bench_rollouts(cfg: BenchConfig, device: torch.device, n: int, mode: str, measure: str) -> dict:
    env, algo, steps = _algo(cfg, device, n, mode)
    live = torch.zeros((), device=device)
    calls = 0
    storage: list[int] = []

    def call() -> None:
        nonlocal live, calls
        if measure == "collect":
            rollout = algo.collect()
            transitions = rollout.transitions()
            if not storage:
                storage.append(rollout.storage_bytes())
        else:
            transitions = algo.iterate().collected.transitions
        # Summed on the device and read once after the timing: no host read inside timed calls.
        live = live + transitions
        calls += 1

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    first, second, times = run_calls(call, device, cfg.repeats)
    transitions = float(live) / calls
    episodic = env.spec.num_players > 1  # as PPO collects turn-based games: whole games
    rollout_bytes = storage[0] if storage else empty_rollout(env.spec, steps, n, device).storage_bytes()
    extra = {"num_steps": steps, "episodic": episodic, "num_minibatches": algo.config.num_minibatches,
             "update_epochs": algo.config.update_epochs, "rollout_bytes": rollout_bytes,
             "rollout_bytes_per_env": rollout_bytes / n,
             "noise_bytes_per_env": _noise_bytes(algo, env, steps, episodic) / n,
             "peak_host_bytes": peak_host_bytes()}
    if device.type == "cuda":
        extra["peak_device_bytes"] = torch.cuda.max_memory_allocated(device)
    return cell(measure, n, mode, first, second, times, transitions, **extra)


def _noise_bytes(algo, env, steps: int, episodic: bool) -> int:
    from rl_gpu.collect.engine import noise_bytes

    engine = algo.engine(env, steps, episodic)
    state = (env.generator.get_state(), algo.policy_rng.get_state())
    size = noise_bytes(engine.draw(algo.policy_rng, torch.Generator(device=env.device)))
    env.generator.set_state(state[0])
    algo.policy_rng.set_state(state[1])
    return size


def probe_spec(env_id: str, threads: int):
    """The spec of a one-row batch of ``env_id`` (built and closed)."""
    env = make(env_id, num_envs=1, **env_options(env_id, threads))
    try:
        return env.spec
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()


def format_table(cells: list[dict]) -> str:
    header = (f"{'measure':<8} {'N':>7} {'compile':<10} {'transitions/s':>14} {'median call':>12} "
              f"{'1st call':>9} {'2nd call':>9} {'rollout B/env':>13}")
    lines = [header, "-" * len(header)]
    for c in cells:
        per_env = c.get("rollout_bytes_per_env")
        lines.append(f"{c['measure']:<8} {c['num_envs']:>7} {c['compile']:<10} {c['transitions_per_s']:>14,.0f} "
                     f"{c['median_call_s'] * 1e3:>10.2f}ms {c['first_call_s']:>8.2f}s {c['second_call_s']:>8.2f}s "
                     f"{'' if per_env is None else f'{per_env:,.0f}':>13}")
    return "\n".join(lines)


def summary_lines(cfg: BenchConfig, cells: list[dict]) -> list[str]:
    """The comparison in words: per N, rl_gpu's env-only figure next to each baseline's with the ratio, the
    engine's share of a step, and the training figure."""
    lines = []
    for baseline in cfg.baselines:
        for r in ratios(cells, baseline):
            lines.append(f"env-only N={r['num_envs']}: rl_gpu ({r['compile']}) {r['transitions_per_s']:,.0f}/s "
                         f"/ {BASELINE_NAMES[baseline]} {r['baseline_transitions_per_s']:,.0f}/s = "
                         f"{r['ratio']:.2f}x")
    for c in cells:
        if "engine_share" in c:
            lines.append(f"env-only N={c['num_envs']}: engine.step {c['engine_share']:.0%} of env.step "
                         f"({c['engine_threads']} engine thread(s): MuJoCo stepping and host copies), torch task "
                         f"code {1 - c['engine_share']:.0%}")
    for c in cells:
        if c["measure"] == "train":
            lines.append(f"train N={c['num_envs']}: rl_gpu ({c['compile']}) {c['transitions_per_s']:,.0f} "
                         "transitions/s (whole PPO iteration: collect + update)")
    return lines


def check_output(path: Path) -> None:
    """Refuse ``--output`` before anything is measured when writing it would replace something that is not a
    results file: anything but a regular file (a directory, ``/dev/null``), or an existing file that is not JSON
    (a checkpoint, a script)."""
    target = check_output_file(path)
    if not target.exists():
        return
    try:
        with open(target, "rb") as f:
            head = f.read(MAX_RESULTS_BYTES + 1)
        if len(head) > MAX_RESULTS_BYTES:
            raise ValueError("too large")
        json.loads(head.decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        raise UsageError(f"--output {path} exists and is not a JSON results file; refusing to replace it "
                         "(choose another path)") from None


def run(cfg: BenchConfig, log: Callable[[str], None] = print) -> dict:
    """Run the benchmark described by ``cfg``; returns (and writes to ``cfg.output``) the JSON document."""
    from rl_gpu.core.device import check_threads, resolve_device
    from rl_gpu.runtime.allocator import keep_freed_host_memory
    from rl_gpu.runtime.hardware import run_environment

    check_threads(cfg.threads)
    torch.set_num_threads(cfg.threads)
    keep_freed_host_memory()
    device = resolve_device(cfg.device)
    modes = cfg.compile or (("off", "inductor", "cudagraphs") if device.type == "cuda" else ("off", "inductor"))
    if "cudagraphs" in modes and device.type != "cuda":
        raise ValueError("--compile cudagraphs needs a CUDA device")
    check_output(cfg.output)
    started = time.perf_counter()
    cells: list[dict] = []
    spec = probe_spec(cfg.env, cfg.threads)
    engine_threads = env_options(cfg.env, cfg.threads).get("num_threads")
    log(f"{PROG}: {cfg.env} on {device}, {torch.get_num_threads()} thread(s)"
        f"{f' (and {engine_threads} engine thread(s))' if engine_threads else ''}, N in {list(cfg.num_envs)}, "
        f"compile {list(modes)}; figures are transitions per second (one environment row taking one step), "
        f"median of {cfg.repeats} synchronised calls after 2 untimed ones (first = compile, second = capture)")
    baselines = []
    if "env" in cfg.measure:
        for baseline in cfg.baselines:
            why = baseline_unavailable(baseline, cfg.env)
            if why is None:
                baselines.append(baseline)
            else:
                log(f"--compare {baseline} skipped: {why}")
    env_modes = modes if spec.functional else tuple(m for m in modes if m == "off")
    if "env" in cfg.measure and env_modes != modes:
        log(f"env-only {', '.join(m for m in modes if m not in env_modes)} skipped: {cfg.env} is stepped on the "
            "host (not a functional environment), so its step is not compiled")
    for n in cfg.num_envs:
        for baseline in baselines:
            cells.append(BASELINES[baseline](cfg, n))
            log(format_table(cells[-1:]).splitlines()[-1])
        for measure in cfg.measure:
            if measure == "env" and spec.has_action_mask:
                log(f"env-only skipped: {cfg.env} has illegal actions, and random actions would step it "
                    "outside its rules")
                continue
            for mode in (env_modes if measure == "env" else modes):
                if measure == "env":
                    cell = bench_env(cfg, device, n, mode)
                else:
                    cell = bench_rollouts(cfg, device, n, mode, measure)
                cells.append(cell)
                log(format_table([cell]).splitlines()[-1])
    doc = {
        "command": "rl-gpu bench " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "config": {k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
                   for k, v in asdict(cfg).items()},
        "environment": run_environment(device),
        "threads": torch.get_num_threads(),
        # glibc's allocator settings change CPU figures (see benchmarks/README.md): recorded with the results.
        "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_") or k == "LD_PRELOAD"},
        "counts": "transitions: environment rows that took a real step (no padding, no reset-only steps)",
        "results": cells,
        "gymnasium_ratios": ratios(cells, "gymnasium"),
        "envpool_ratios": ratios(cells, "envpool"),
        "total_seconds": time.perf_counter() - started,
    }
    log("")
    log(format_table(cells))
    for line in summary_lines(cfg, cells):
        log(line)
    atomic_write_bytes(cfg.output, (json.dumps(doc, indent=1) + "\n").encode())
    log(f"wrote {cfg.output}")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    from rl_gpu.envs.registry import registered_ids

    args = list(sys.argv[1:] if argv is None else argv)
    cfg = parse(BenchConfig, PROG, args, description=BenchConfig.__doc__)
    if cfg.env not in registered_ids():
        fail(PROG, f"unknown environment {cfg.env!r}; known: {', '.join(registered_ids())}")
    try:
        run(cfg)
    except (UsageError, ValueError) as e:
        fail(PROG, str(e))
    return 0


if __name__ == "__main__":
    from rl_gpu.cli.safe_path import drop_cwd_from_path

    drop_cwd_from_path()
    sys.exit(main())
