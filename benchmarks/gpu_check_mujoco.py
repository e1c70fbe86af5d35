"""The MuJoCo Warp backend on a GPU: build time, env-only and PPO training steps/s, agreement with the C engine.

    python benchmarks/gpu_check_mujoco.py           # on a CUDA machine, from the repository root (~5 min, H200)
    python benchmarks/gpu_check_mujoco.py --quick   # small N, a few steps; runs on Warp's CPU device too

For each task of :data:`ENVS` (``--envs``; HalfCheetah, Ant, Go1 on flat ground, the Panda's reach and pick-up),
at each N (4096 and 16384): the build, the first step (the first one of each model compiles MuJoCo Warp's
kernels, minutes on a cold ``~/.cache/warp``; then the graph capture), env-only steps/s (``env.step`` with random
actions: the engine's graph replay plus the task's torch code) and the engine alone (``engine.step``), PPO
training steps/s (``PPO.iterate``: collect + update, as the runner calls it), PPO's collection eager and with
the policy half compiled (:class:`rl_gpu.collect.host.HostCollector`, what ``--compile auto`` runs) and the worlds
whose contacts overflowed MuJoCo Warp's capacities. Then the C engine against MuJoCo Warp from the same starts
with the same actions: the largest qpos/qvel differences after 1 and 10 steps, with the MJCF's (pyramidal)
friction cone and with an elliptic one (Ant's feet differ with the pyramidal cone: MuJoCo Warp's plane-capsule
contact frames, see rl_gpu/envs/mujoco/warp_engine.py). One line per figure; the exit status is 1 when
a stage fails, 2 when an ``--envs`` id is not available here, 0 otherwise (and on a machine without CUDA,
without ``--quick``: nothing to check).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

ENVS = ("HalfCheetah-v5", "Ant-v5", "Go1-Velocity-v0", "PandaReach-v0", "PandaPickCube-v0")
"""The MuJoCo tasks checked on MuJoCo Warp. Go1 runs there with an elliptic friction cone
(rl_gpu/envs/mujoco/quadruped.py); Go1-Rough-v0 is refused (its height-field contacts disagree with the C
engine's: benchmarks/warp_hfield_check.py)."""


def line(*parts) -> None:
    print(*parts, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rate(fn, device: torch.device, items: int, min_calls: int, budget_s: float) -> tuple[float, int]:
    """``(items per second, calls)`` of ``fn`` after one warm-up call: at least ``min_calls`` calls, more while
    under ``budget_s`` seconds."""
    fn()
    sync(device)
    calls, start = 0, time.perf_counter()
    while calls < min_calls or time.perf_counter() - start < budget_s:
        fn()
        calls += 1
        if calls >= 10 * min_calls:
            break
    sync(device)
    return items * calls / (time.perf_counter() - start), calls


def env_classes(names: list[str]) -> dict:
    """``{id: class}`` of the registered ids (one line for each that cannot be imported here)."""
    from rl_gpu.envs.registry import env_class

    classes = {}
    for name in names:
        try:
            classes[name] = env_class(name)
        except (ImportError, ValueError) as e:
            line(f"{name}: skipped ({type(e).__name__}: {e})")
    return classes


def bench_env(name: str, cls, n: int, device: torch.device, args) -> None:
    from rl_gpu.algos.base import Setup
    from rl_gpu.algos.ppo import PPO, PPOConfig

    start = time.perf_counter()
    env = cls(n, device=device, seed=0, backend="mujoco-warp", validate_actions=False)
    sync(device)
    line(f"{name} N={n}: build {time.perf_counter() - start:.1f} s")
    g = torch.Generator(device=device).manual_seed(0)
    actions = [torch.rand(n, *env.action_shape, generator=g, device=device) * 2 - 1 for _ in range(8)]
    start = time.perf_counter()
    env.step(actions[0])
    sync(device)
    line(f"{name} N={n}: first step {time.perf_counter() - start:.2f} s (kernel compile on a cold cache, graph "
         f"capture)")
    i = 0

    def env_step():
        nonlocal i
        env.step(actions[i % len(actions)])
        i += 1

    sps, calls = rate(env_step, device, n, args.min_calls, args.budget)
    line(f"{name} N={n}: env-only {sps:,.0f} env-steps/s ({sps * env.frame_skip:,.0f} physics steps/s; "
         f"{calls} calls)")
    inner = env.state.inner
    ctrl = actions[0].double()

    def engine_step():
        env.engine.step(inner.physics, ctrl, inner.variant)

    sps, calls = rate(engine_step, device, n, args.min_calls, args.budget)
    line(f"{name} N={n}: engine only {sps:,.0f} env-steps/s ({calls} calls)")
    overflow = int(env.engine.overflowed().sum())
    line(f"{name} N={n}: worlds with contact/constraint overflow: {overflow}")
    torch.manual_seed(0)
    steps = args.ppo_steps
    setup = Setup(env=env, seed=0, learning_rate=3e-4, num_steps=steps, compile="off")
    algo = PPO.from_setup(setup, PPOConfig(num_minibatches=4, update_epochs=4))
    sps, calls = rate(lambda: algo.iterate(), device, n * steps, max(1, args.min_calls // 8), args.budget)
    line(f"{name} N={n}: PPO training {sps:,.0f} env-steps/s (num_steps={steps}, 4 epochs x 4 minibatches; "
         f"{calls} iterations)")
    # The host collector: PPO's collection with the policy half compiled (what --compile auto runs) and eager.
    compiled = PPO.from_setup(dataclasses.replace(setup, compile="inductor"),
                              PPOConfig(num_minibatches=4, update_epochs=4))
    compiled.collect()  # compiles
    for label, algo_c in (("eager", algo), ("compiled policy half", compiled)):
        sps, calls = rate(algo_c.collect, device, n * steps, max(1, args.min_calls // 8), args.budget)
        line(f"{name} N={n}: PPO collection, {label}: {sps:,.0f} env-steps/s ({calls} rollouts)")
    env.close()


def agreement(name: str, cls, n: int, device: torch.device, cone: str) -> None:
    """C engine vs MuJoCo Warp from the same starts with the same actions, with the MJCF's friction cone
    (``"mjcf"``) or an elliptic one (where MuJoCo Warp's plane-capsule contact frames do not matter)."""
    if cone == "elliptic":
        import mujoco

        class Elliptic(cls):
            def load_model(self):
                model = super().load_model()
                model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
                return model

        cls = Elliptic
    c = cls(n, device=device, seed=1, num_threads=min(8, os.cpu_count() or 1))
    w = cls(n, device=device, seed=1, backend="mujoco-warp")
    cones = [("pyramidal", "elliptic")[int(env.model.opt.cone)] for env in (c, w)]
    label = f"{name} N={n} on {device}, C engine {cones[0]} cone vs MuJoCo Warp {cones[1]}"
    lay = c.layout
    g = torch.Generator(device=device).manual_seed(1)
    for step in range(1, 11):
        action = torch.rand(n, *c.action_shape, generator=g, device=device) * 2 - 1
        c.step(action)
        w.step(action)
        if step in (1, 10):
            diff = (c.state.inner.physics - w.state.inner.physics).abs()
            line(f"{label}, after {step} step(s): qpos "
                 f"{diff[:, lay.qpos].max():.2e}, qvel {diff[:, lay.qvel].max():.2e} (max abs)")
    c.close()
    w.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N and few calls (CPU allowed)")
    parser.add_argument("--device", default=None, help="torch device (default: cuda, or cpu with --quick)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    args = parser.parse_args()
    try:
        import mujoco_warp  # noqa: F401
        import warp
    except ImportError:
        line("MuJoCo Warp is not installed: pip install 'rl-gpu[mujoco-warp]'")
        return 0
    cuda = torch.cuda.is_available()
    if args.device is None:
        args.device = "cuda" if cuda else "cpu"
    device = torch.device(args.device)
    if device.type == "cuda" and not cuda:
        line("no CUDA device: nothing to check (run with --quick for a CPU smoke run)")
        return 0
    if device.type != "cuda" and not args.quick:
        line("no CUDA device: nothing to check (run with --quick for a CPU smoke run)")
        return 0
    args.sizes = args.sizes or ([64] if args.quick else [4096, 16384])
    args.min_calls, args.budget = (2, 0.0) if args.quick else (20, 3.0)
    args.ppo_steps = 4 if args.quick else 16
    torch.set_num_threads(1)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    line(f"device {device} ({name}); torch {torch.__version__}, warp {warp.__version__}, "
         f"mujoco_warp {mujoco_warp.__version__}")
    started = time.perf_counter()
    failed = []
    classes = env_classes(args.envs)
    if len(classes) < len(args.envs):
        line(f"--envs: {', '.join(n for n in args.envs if n not in classes)} not available here (see above)")
        return 2
    for env_name, cls in classes.items():
        for n in args.sizes:
            try:
                bench_env(env_name, cls, n, device, args)
            except Exception:  # report and go on: one line per failure, then the traceback
                failed.append(f"{env_name} N={n}")
                line(f"{env_name} N={n}: FAILED")
                traceback.print_exc()
    for env_name, cls in classes.items():
        for cone in ("mjcf", "elliptic"):
            try:
                agreement(env_name, cls, 16 if args.quick else 256, device, cone)
            except Exception:
                failed.append(f"{env_name} agreement ({cone} cone)")
                line(f"{env_name} agreement ({cone} cone): FAILED")
                traceback.print_exc()
    outcome = f"FAILED: {', '.join(failed)}" if failed else "all passed"
    line(f"total {time.perf_counter() - started:.0f} s; {outcome}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
