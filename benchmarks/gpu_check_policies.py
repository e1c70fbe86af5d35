"""The policy layer on a device: the composed CNN policy (frames), PPO with memory (sequence minibatches) and the
host collector's compiled policy half, each timed as whole PPO iterations or collections, sides alternating.

    python benchmarks/gpu_check_policies.py --device cuda            # a stage of gpu_check.sh
    OMP_NUM_THREADS=1 python benchmarks/gpu_check_policies.py --device cpu --num-envs 64 --rounds 1

Rows: ``cnn``: PPO on a 10x10x4 bool-frame task (``rl_gpu.envs.testing.frames``: a dot to locate, MinAtar's frame
size) with the composed policy's CNN, eager / inductor / cudagraphs (CUDA only); ``breakout``: the same on
MinAtar-Breakout-v1 (the real game, bool frames), and ``breakout-bf16`` / ``breakout-fp16`` with ``--precision``
(compare their steps/s with ``breakout``'s); ``gru``: PPO with ``memory_size=64`` on CartPoleNoVel-v1, eager
against the compiled mode (CUDA graphs on CUDA: the whole iteration captured, the memory's step compiled), and
``lstm`` the same with an LSTM; ``host``: PPO's collection of ``gym:CartPole-v1`` (Gymnasium on the host, the
policy on the device), eager against the compiled policy half. ``--rows`` picks some rows (gpu_check.sh times
``gru`` and ``lstm`` in a stage of their own). One table at the end; figures are env steps/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from rl_gpu.algos.ppo import PPO, PPOConfig
from rl_gpu.envs.registry import make
from rl_gpu.envs.testing.frames import DotFrames
from rl_gpu.nn.actor_critic import policy_for_env


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rate(fn, steps_per_call: int, calls: int, device: torch.device) -> float:
    fn()  # warm-up (and compilation)
    sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync(device)
    return calls * steps_per_call / (time.perf_counter() - start)


def builders(args: argparse.Namespace, device: torch.device) -> dict[str, tuple]:
    """Row name -> (build(mode) -> callable, steps per call, modes)."""
    n, t = args.num_envs, args.num_steps
    compiled = ("off", "inductor", "cudagraphs") if device.type == "cuda" else ("off", "inductor")

    def cnn(mode):
        env = DotFrames(n, device, seed=0)
        torch.manual_seed(0)
        policy = policy_for_env(env.spec, (128,)).to(device)
        return PPO(policy, PPOConfig(num_minibatches=4, update_epochs=2), 2.5e-3, 0, mode, env=env,
                   num_steps=t).iterate

    def breakout(mode, precision="fp32"):
        env = make("MinAtar-Breakout-v1", num_envs=n, device=device, seed=0)
        torch.manual_seed(0)
        policy = policy_for_env(env.spec, (128,)).to(device)
        return PPO(policy, PPOConfig(num_minibatches=4, update_epochs=2), 5e-4, 0, mode, env=env, num_steps=t,
                   precision=precision).iterate

    def gru(mode, lstm=False):
        env = make("CartPoleNoVel-v1", num_envs=n, device=device, seed=0)
        torch.manual_seed(0)
        policy = policy_for_env(env.spec, (64,), memory_size=64, lstm=lstm).to(device)
        return PPO(policy, PPOConfig(num_minibatches=4, update_epochs=2), 1e-3, 0, mode, env=env,
                   num_steps=t).iterate

    def host(mode):
        env = make("gym:CartPole-v1", num_envs=args.host_envs, device=device, seed=0)
        torch.manual_seed(0)
        policy = policy_for_env(env.spec, (64, 64)).to(device)
        return PPO(policy, PPOConfig(), 1e-3, 0, mode, env=env, num_steps=t).collect

    fast = ("off", compiled[-1])
    return {"cnn": (cnn, n * t, compiled), "breakout": (breakout, n * t, fast),
            "breakout-bf16": (lambda mode: breakout(mode, "bf16"), n * t, fast),
            "breakout-fp16": (lambda mode: breakout(mode, "fp16"), n * t, fast),
            "gru": (gru, n * t, fast), "lstm": (lambda mode: gru(mode, lstm=True), n * t, fast),
            "host": (host, args.host_envs * t, ("off", compiled[-1]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--host-envs", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=32)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", default=None, help="write the figures here as JSON")
    parser.add_argument("--rows", nargs="+", default=None, help="only these rows (default: all)")
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = builders(args, device)
    unknown = set(args.rows or ()) - set(rows)
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; the rows are {', '.join(rows)}")
    figures: dict[str, dict[str, list[float]]] = {}
    for row, (build, steps, modes) in rows.items():
        if args.rows and row not in args.rows:
            continue
        calls = {mode: build(mode) for mode in modes}
        figures[row] = {mode: [] for mode in modes}
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                figures[row][mode].append(rate(calls[mode], steps, args.calls, device))
                print(f"{row} round {r + 1} {mode}: {figures[row][mode][-1]:,.0f} steps/s", flush=True)
    print(f"\npolicies on {device} (N={args.num_envs}, host N={args.host_envs}, T={args.num_steps}; median of "
          f"{args.rounds} rounds)")
    print("| row | mode | env steps/s | vs eager |")
    print("| --- | --- | ---: | ---: |")
    for row, by_mode in figures.items():
        eager = statistics.median(by_mode["off"])
        for mode, values in by_mode.items():
            print(f"| {row} | {mode} | {statistics.median(values):,.0f} | {statistics.median(values) / eager:.2f} |")
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"args": vars(args), "figures": figures}, f, indent=1)


if __name__ == "__main__":
    main()
