"""A compiled MinAtar rollout on the CPU with its step unit's loops all plain (before) and with the float loops, the
policy's layers, as SIMD code and the rest plain (now: :mod:`rl_gpu.runtime.inductor_loops`), alternating in one
process.

The shape of the PureJaxRL MinAtar comparison (benchmarks/purejaxrl_minatar.py): 64 environments x 128 steps,
``--policy categorical``'s two 64-64 tanh MLPs on the flattened frames with the CPU kernels, ``--compile
inductor``, one thread. Before timing, the script checks that both forms give the same rollout from the same state
and noise: every integer and boolean field equal, the float fields within 1e-5 (SIMD and scalar code may round a
tanh's last bit apart). Prints milliseconds per rollout, medians of ``--rounds`` [each round], and the ratio.

    OMP_NUM_THREADS=1 python benchmarks/grid_unit_loops.py [--game Breakout|SpaceInvaders] [--rounds 8]
"""

from __future__ import annotations

import time

import torch
from rollout_forms import comparison_engines, game_and_rounds, time_close_rollouts

from rl_gpu.runtime import inductor_loops

FORMS = ("every loop plain (before)", "float loops SIMD, the rest plain (now)")


def main(argv: list[str] | None = None) -> None:
    args = game_and_rounds(__doc__, argv)
    env, engines = comparison_engines(args.game, FORMS)
    storages = {name: engine.empty_rollout() for name, engine in engines.items()}
    generator = torch.Generator().manual_seed(1)

    def rollout(name: str, noise, state=None):
        start = time.perf_counter()
        _, final = engines[name].run(noise, state, out=storages[name])
        return (time.perf_counter() - start) * 1000, final

    start_state, noise = env.state, engines[FORMS[0]].draw(generator)
    now_options = inductor_loops.grid_unit_options
    inductor_loops.grid_unit_options = lambda: {**inductor_loops.INDUCTOR_OPTIONS,
                                                **inductor_loops.SCALAR_CPU_KERNELS}
    try:  # the units compile at their first call
        seconds, _ = rollout(FORMS[0], noise, start_state)
    finally:
        inductor_loops.grid_unit_options = now_options
    print(f"{FORMS[0]}: compile and first rollout {seconds / 1000:.1f} s", flush=True)
    seconds, _ = rollout(FORMS[1], noise, start_state)
    print(f"{FORMS[1]}: compile and first rollout {seconds / 1000:.1f} s", flush=True)
    time_close_rollouts(args, FORMS, storages, rollout, engines, generator, start_state)


if __name__ == "__main__":
    main()
