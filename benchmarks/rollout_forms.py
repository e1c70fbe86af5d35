"""A compiled rollout into storage on the CPU, three forms alternating in one process: the step unit's guards
checked at every step and each step's record copied into the storage as it is taken (before); the guards checked
at the first two steps only (``rl_gpu.collect.engine.GUARDS_ONCE``); that with the records kept and each field stacked
into the storage after the last step (``rl_gpu.collect.engine.STACK_BYTES``: the default for a rollout this size).

The shape of the PureJaxRL MinAtar comparison (benchmarks/purejaxrl_minatar.py): 64 environments x 128 steps of
a MinAtar game, ``--policy categorical``'s two 64-64 tanh MLPs on the flattened frames (``rl_gpu.nn.actor_critic.
mlp_for_env``, with the CPU kernels), ``--compile inductor``, one thread. Before timing, the script checks that
every form gives the same rollout, bit for bit, from the same state and noise. Prints milliseconds per rollout,
medians of ``--rounds`` [each round], and the ratios to the first form.

    OMP_NUM_THREADS=1 python benchmarks/rollout_forms.py [--game Breakout|SpaceInvaders] [--rounds 8]
"""

from __future__ import annotations

import argparse
import time

import torch
from frame_update import alternate, check_rounds, print_forms

from rl_gpu.collect import engine as engine_module
from rl_gpu.collect.engine import ROLLOUT_FIELDS, RolloutEngine
from rl_gpu.envs.registry import make
from rl_gpu.nn.actor_critic import mlp_for_env
from rl_gpu.nn.cpu_kernels import use_cpu_kernels

N, T = 64, 128
FORMS = {"guards checked at every step, copies per step": (False, 0),
         "guards checked at the first two steps, copies per step": (True, 0),
         "guards checked at the first two steps, one stack a field": (True, engine_module.STACK_BYTES)}
"""Each form: (guards checked at the first two steps only, ``STACK_BYTES``)."""


def game_and_rounds(doc: str, argv: list[str] | None) -> argparse.Namespace:
    """``--game`` and ``--rounds`` of a benchmark on a MinAtar game, checked (one line and exit 2 otherwise)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--game", default="Breakout", choices=["Breakout", "SpaceInvaders"],
                        help="the MinAtar game (default Breakout)")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds (default 8)")
    args = parser.parse_args(argv)
    check_rounds(parser, args.rounds)
    return args


def comparison_engines(game: str, forms) -> tuple:
    """The comparison's environment (``N`` rows of ``game``) and a compiled rollout engine of ``T`` steps per form,
    all sharing one policy; one torch thread."""
    torch.set_num_threads(1)
    env = make(f"MinAtar-{game}-v1", num_envs=N, device="cpu", seed=0, validate_actions=False)
    torch.manual_seed(0)
    policy = use_cpu_kernels(mlp_for_env(env.spec, (64, 64)))
    return env, {name: RolloutEngine(policy, env, T, compile="inductor") for name in forms}


def main(argv: list[str] | None = None) -> None:
    args = game_and_rounds(__doc__, argv)
    env, engines = comparison_engines(args.game, FORMS)
    storage = engines[next(iter(FORMS))].empty_rollout()
    generator = torch.Generator().manual_seed(1)

    def rollout(name: str, noise, state=None):
        engine_module.GUARDS_ONCE, engine_module.STACK_BYTES = FORMS[name]
        start = time.perf_counter()
        _, final = engines[name].run(noise, state, out=storage)
        return (time.perf_counter() - start) * 1000, final

    start_state, noise = env.state, engines[next(iter(FORMS))].draw(generator)
    first = None
    for name in FORMS:
        seconds, _ = rollout(name, noise, start_state)
        print(f"{name}: compile and first rollout {seconds / 1000:.1f} s", flush=True)
        fields = [getattr(storage, f).clone() for f in ROLLOUT_FIELDS if getattr(storage, f) is not None]
        if first is None:
            first = fields
        elif not all(torch.equal(a, b) for a, b in zip(first, fields)):
            raise SystemExit(f"{name}: its rollout differs from the first form's")
    time_rollouts(args, list(FORMS), rollout, lambda name: engines[name].draw(generator), start_state,
                  "every form's rollout from the same state and noise: the same, bit for bit")


def time_rollouts(args: argparse.Namespace, forms: list[str], rollout, draw, state, checked: str) -> None:
    """``rollout(name, draw(name), state) -> (ms, state)`` for each form, ``args.rounds`` alternating rounds, each
    rollout from where the last one ended; prints the table (``checked``: what was checked before)."""

    def timed(name: str) -> float:
        nonlocal state
        ms, state = rollout(name, draw(name), state)
        return ms

    times = alternate(forms, args.rounds, timed)
    print(f"\n{args.game}, {N} x {T} steps, ms per rollout, median [rounds]; {checked}")
    print_forms(times, "ms per rollout")



def time_close_rollouts(args: argparse.Namespace, forms: tuple[str, ...], storages: dict, rollout, engines: dict,
                        generator: torch.Generator, state) -> None:
    """Check that the forms' first rollouts (in ``storages``, from the same state and noise) are the same, the
    integer and boolean fields equal and the float ones within 1e-5 (exit otherwise), then time them
    (:func:`time_rollouts`)."""
    for field in ROLLOUT_FIELDS:
        a, b = (getattr(storages[name], field) for name in forms)
        if a is None:
            continue
        same = torch.allclose(a, b, rtol=0, atol=1e-5) if a.is_floating_point() else torch.equal(a, b)
        if not same:
            raise SystemExit(f"the two forms' rollouts differ in {field}")
    time_rollouts(args, list(forms), rollout, lambda name: engines[name].draw(generator), state,
                  "both forms' rollouts from the same state and noise: integers equal, floats within 1e-5")

if __name__ == "__main__":
    main()
