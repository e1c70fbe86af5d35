"""What resetting finished VMAS worlds costs: VMAS's ``reset_at(i)`` one world at a time, without observations (what
the adapter does for the worlds that finish early, then observes every world once) against one vectorised
``reset()`` of every world (what a common horizon with frozen rows would do once per episode), and against a step
of every world.

    OMP_NUM_THREADS=1 python benchmarks/vmas_resets.py --scenario navigation --num-envs 4096

Prints milliseconds for one step of all N worlds, one ``reset()`` of all N, and ``reset_at`` of k worlds for a few
k; the per-row loop costs k times one ``reset_at``, a frozen row costs a share of every step until the horizon.
"""

from __future__ import annotations

import argparse
import time

import torch


def ms(fn, repeats: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return 1000 * (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="navigation")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[128, 4096])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import vmas

    for n in args.num_envs:
        measure(vmas, args, n)


def measure(vmas, args: argparse.Namespace, n: int) -> None:
    env = vmas.make_env(args.scenario, num_envs=n, continuous_actions=True, max_steps=100, seed=0,
                        terminated_truncated=True)
    env.reset()
    actions = [torch.zeros(n, *a.shape) for a in env.action_space.spaces]
    step = ms(lambda: env.step(actions), args.repeats)
    full = ms(lambda: env.reset(return_observations=False), args.repeats)
    print(f"vmas:{args.scenario}, N={n} worlds, {env.n_agents} agents, 1 thread")
    print(f"step of all N worlds: {step:.2f} ms; reset() of all N: {full:.2f} ms")
    for k in (1, 16, min(256, n)):
        rows = list(range(k))
        loop = ms(lambda rows=rows: [env.reset_at(i, return_observations=False) for i in rows],
                  max(args.repeats // max(k // 16, 1), 2))
        print(f"reset_at of {k} worlds: {loop:.2f} ms ({loop / k:.3f} ms each; {loop / step:.2f} steps' worth)")


if __name__ == "__main__":
    main()
