"""Why a compiled step of a grid game compiles without SIMD CPU kernels (``TensorEnv.compile_simd``): time one
environment step (``step_state``, auto-reset included) eager, compiled with Inductor's SIMD kernels and compiled
as a grid game's unit is (plain loops but for the float ones, :mod:`rl_gpu.runtime.inductor_loops`), the three
alternating round by round in one process, for each id and batch size.

    OMP_NUM_THREADS=1 python benchmarks/cpu_env_kernels.py [--ids ID ...] [--num-envs 64 4096] [--rounds 3]

Prints microseconds per step (the median of the rounds, every round in brackets) and each compiled form's speed-up
over eager; the last column is the form the environment declares.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.registry import make
from rl_gpu.runtime.compile import compile_unit, env_simd

DEFAULT_IDS = ("MinAtar-Breakout-v1", "MinAtar-SpaceInvaders-v1", "MinAtar-Asterix-v1", "MinAtar-Freeway-v1",
               "RussianRoulette-v0", "CartPole-v1", "MountainCar-v0")


def steps(env, num_steps: int) -> tuple[list, list]:
    """``num_steps`` legal random actions and fresh starts, drawn once (the same for every form)."""
    g = torch.Generator().manual_seed(0)
    actions, resets, state = [], [], env.state
    for _ in range(num_steps):
        legal = env.timestep(state).action_mask.float() if env.num_actions else None
        if legal is None:
            low, high = torch.tensor(env.action_low), torch.tensor(env.action_high)
            action = low + (high - low) * torch.rand(env.num_envs, *env.action_shape, generator=g)
        else:
            action = torch.multinomial(legal, 1, generator=g)[:, 0]
        reset = env.draw_starts(env.num_envs)
        state, _ = env.step_state(state, action, reset)
        actions.append(action)
        resets.append(reset)
    return actions, resets


def time_form(env, fn, actions, resets) -> float:
    """Microseconds per step of ``fn`` over the drawn steps."""
    state = env.state
    start = time.perf_counter()
    for action, reset in zip(actions, resets):
        state, _ = fn(state, action, reset)
    return (time.perf_counter() - start) / len(actions) * 1e6


MAX_NUM_ENVS = 65_536
"""The largest batch timed (a step's inputs for every timed step are drawn up front)."""


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, in one line (exit 2), what cannot be timed, before anything compiles."""
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    for n in args.num_envs:
        if not 1 <= n <= MAX_NUM_ENVS:
            parser.error(f"--num-envs must be between 1 and {MAX_NUM_ENVS:,}, got {n:,}")
    for env_id in args.ids:
        try:
            env = make(env_id, num_envs=1, seed=0)
        except (UsageError, ValueError, TypeError) as e:
            parser.error(f"--ids {env_id}: {str(e).splitlines()[0]}")
        if not env.spec.functional:
            parser.error(f"--ids {env_id}: steps in a host engine, not in tensors; only tensor environments compile")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", nargs="+", default=list(DEFAULT_IDS))
    parser.add_argument("--num-envs", nargs="+", type=int, default=[64, 4096])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    check_args(parser, args)
    torch.set_num_threads(1)
    print("| id | N | eager us/step | SIMD compiled | plain loops compiled | SIMD / eager | loops / eager | declared |")
    print("| --- | ---: | --- | --- | --- | ---: | ---: | --- |")
    for env_id in args.ids:
        for n in args.num_envs:
            env = make(env_id, num_envs=n, seed=0, validate_actions=False)
            actions, resets = steps(env, 400 if n <= 256 else 40)
            forms = {"eager": env.step_state, "simd": compile_unit(env.step_state, "inductor"),
                     "loops": compile_unit(env.step_state, "inductor", simd=False)}
            for fn in forms.values():  # compile and warm up
                time_form(env, fn, actions[:3], resets[:3])
            times = {name: [] for name in forms}
            for r in range(args.rounds):
                for name in (forms if r % 2 == 0 else reversed(list(forms))):
                    times[name].append(time_form(env, forms[name], actions, resets))
            med = {name: statistics.median(t) for name, t in times.items()}

            def cell(name: str) -> str:
                return f"{med[name]:,.0f} [{', '.join(f'{t:,.0f}' for t in times[name])}]"

            declared = "SIMD" if env_simd(env) else "plain loops"
            print(f"| {env_id} | {n:,} | {cell('eager')} | {cell('simd')} | {cell('loops')} | "
                  f"{med['eager'] / med['simd']:.2f}x | {med['eager'] / med['loops']:.2f}x | {declared} |", flush=True)


if __name__ == "__main__":
    main()
