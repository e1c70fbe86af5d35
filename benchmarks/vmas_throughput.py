"""Env-only throughput of VMAS through rl_gpu's adapter (``vmas:<scenario>``) against VMAS stepped on its own, in
one process, sides alternating.

Both sides step the same scenario with the same number of worlds, random actions drawn up front, and reset
finished worlds in the step that finishes them: VMAS alone with ``reset()`` when every world finished (the
common horizon) and ``reset_at(i)`` otherwise, as its own loops do; the adapter adds the agent axis, the critic
group, episode statistics and the stream swap. Prints worlds stepped per second and the ratio per round.

    OMP_NUM_THREADS=1 python benchmarks/vmas_throughput.py --scenario navigation --num-envs 4096 --steps 200
    OMP_NUM_THREADS=1 python benchmarks/vmas_throughput.py --scenario "sampling?n_agents=3&cov=0.05" --num-envs 128

``--scenario`` takes a ``vmas:`` id's text, its parameters included (those of benchmarks/marl_side_by_side.py's
tasks: the env's own cost under a side by side's MAPPO, the floor of its time).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def run_vmas(scenario: str, n: int, steps: int, actions: list, kwargs: dict) -> float:
    import vmas

    env = vmas.make_env(scenario, num_envs=n, continuous_actions=True, max_steps=100, seed=0, clamp_actions=True,
                        terminated_truncated=True, **kwargs)
    env.reset()
    start = time.perf_counter()
    for t in range(steps):
        _, _, terminated, truncated, _ = env.step(list(actions[t].unbind(1)))
        done = (terminated | truncated).nonzero().flatten().tolist()
        if len(done) == n:
            env.reset()
        else:
            for i in done:
                env.reset_at(i)
    return n * steps / (time.perf_counter() - start)


def run_adapter(scenario: str, n: int, steps: int, actions: list, kwargs: dict) -> float:
    from rl_gpu.envs.vmas_env import VmasEnv

    env = VmasEnv(scenario, n, seed=0, max_episode_steps=100, validate_actions=False, **kwargs)
    start = time.perf_counter()
    for t in range(steps):
        env.step(actions[t])
    return n * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="navigation", help="a scenario, with ?name=value&... parameters")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-agents", type=int, default=3, help="unless the scenario's parameters give n_agents")
    args = parser.parse_args()
    for flag in ("num_envs", "steps", "rounds", "n_agents"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    torch.set_num_threads(1)
    from rl_gpu.core.errors import UsageError
    from rl_gpu.envs.params import split_id_parameters

    try:
        args.scenario, params = split_id_parameters("vmas:", args.scenario)
    except UsageError as e:
        parser.error(str(e))
    kwargs = {"n_agents": args.n_agents, **params}
    g = torch.Generator().manual_seed(0)
    from rl_gpu.envs.vmas_env import VmasEnv

    try:
        probe = VmasEnv(args.scenario, 2, seed=0, **kwargs)
    except UsageError as e:
        parser.error(str(e))
    m, d = probe.num_agents, probe.action_shape[0]
    actions = [torch.rand(args.num_envs, m, d, generator=g) * 2 - 1 for _ in range(args.steps)]
    print(f"{args.scenario}, N={args.num_envs} worlds x {m} agents, {args.steps} steps per round, 1 thread "
          "(worlds stepped per second)")
    ratios = []
    for r in range(args.rounds):
        own = run_vmas(args.scenario, args.num_envs, args.steps, actions, kwargs)
        ours = run_adapter(args.scenario, args.num_envs, args.steps, actions, kwargs)
        ratios.append(ours / own)
        print(f"round {r + 1}: VMAS alone {own:,.0f}  adapter {ours:,.0f}  adapter/VMAS {ours / own:.2f}")
    print(f"median adapter/VMAS: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
