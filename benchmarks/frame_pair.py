"""A compiled MinAtar rollout on the CPU with its actor's and critic's first layers as two dense products of the
frames cast to floats (before) and as one call of the frame kernel on their stacked weights (now:
``rl_gpu.nn.frame_kernels.pair_linear``), alternating in one process.

The shape of the PureJaxRL MinAtar comparison (benchmarks/purejaxrl_minatar.py): 64 environments x 128 steps,
``--policy categorical``'s two 64-64 tanh MLPs on the flattened frames with the CPU kernels, ``--compile
inductor``, one thread. Before timing, the script checks that both forms give the same rollout from the same state
and noise: every integer and boolean field equal, the float fields within 1e-5 (the kernel sums in another order
than the product). Prints milliseconds per rollout, medians of ``--rounds`` [each round], and the ratio.

    OMP_NUM_THREADS=1 python benchmarks/frame_pair.py [--game Breakout|SpaceInvaders] [--rounds 8]
"""

from __future__ import annotations

import time

import torch
from rollout_forms import comparison_engines, game_and_rounds, time_close_rollouts

from rl_gpu.nn import frame_kernels

FORMS = ("two dense first layers (before)", "one paired kernel call (now)")


def main(argv: list[str] | None = None) -> None:
    args = game_and_rounds(__doc__, argv)
    if not frame_kernels.available():
        raise SystemExit("the frame kernel is not built on this machine (no C compiler): nothing to compare")
    env, engines = comparison_engines(args.game, FORMS)
    storages = {name: engine.empty_rollout() for name, engine in engines.items()}
    generator = torch.Generator().manual_seed(1)

    def rollout(name: str, noise, state=None):
        # Read when the form's unit compiles (and by its guards at every call).
        frame_kernels.PAIR_FIRST_LAYERS = name == FORMS[1]
        start = time.perf_counter()
        _, final = engines[name].run(noise, state, out=storages[name])
        return (time.perf_counter() - start) * 1000, final

    start_state, noise = env.state, engines[FORMS[0]].draw(generator)
    for name in FORMS:
        seconds, _ = rollout(name, noise, start_state)
        print(f"{name}: compile and first rollout {seconds / 1000:.1f} s", flush=True)
    time_close_rollouts(args, FORMS, storages, rollout, engines, generator, start_state)


if __name__ == "__main__":
    main()
