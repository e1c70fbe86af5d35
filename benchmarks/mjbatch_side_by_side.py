"""Our MuJoCo tasks' environment step against mjbatch's raw ``Batch.step`` on the same model, batch size, substeps
and thread count: what the engine path costs above the physics itself.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mjbatch_side_by_side.py --mjbatch-python /tmp/mjbvenv/bin/python \
        [--tasks HalfCheetah-v5 Hopper-v5 Walker2d-v5 Ant-v5 Humanoid-v5] [--num-envs 1024] [--steps 50] [--rounds 3]

mjbatch (``pip install mjbatch``) pins its own MuJoCo, so it runs in its own virtual environment
(``--mjbatch-python``); each side of each round is a fresh process, and the sides alternate which goes first.

- **ours**: ``rl_gpu.make(TASK, num_envs=N, num_threads=T)`` stepped with uniform random actions: the whole
  environment step (controls in, ``frame_skip`` MuJoCo steps, observations, rewards, terminations, auto-resets).
- **mjbatch**: the task's MJCF compiled by mjbatch's MuJoCo (Gymnasium's HalfCheetah file keeps its
  ``settotalmass``, which that MuJoCo still applies), ``Batch(model, N, num_threads=T)``, random controls written
  through ``bind("ctrl")``, then ``step(nstep=frame_skip)``: physics only, no observation, no reward, no reset.

Each side times ``--steps`` steps after 5 untimed ones and reports seconds per step; the table gives the median over
rounds and the ratio ours / mjbatch (the issue's target: at most 1.3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")


def ours(task: str, num_envs: int, steps: int, threads: int) -> dict:
    import torch

    from rl_gpu import make

    torch.set_num_threads(1)
    env = make(task, num_envs=num_envs, device="cpu", seed=0, num_threads=threads)
    env.reset()
    g = torch.Generator().manual_seed(0)
    low, high = torch.tensor(env.spec.action_low), torch.tensor(env.spec.action_high)
    actions = [low + (high - low) * torch.rand(num_envs, *env.action_shape, generator=g) for _ in range(steps + 5)]
    for a in actions[:5]:
        env.step(a)
    start = time.perf_counter()
    for a in actions[5:]:
        env.step(a)
    seconds = (time.perf_counter() - start) / steps
    out = {"seconds": seconds, "frame_skip": env.frame_skip, "xml": env.model_path(), "threads": env.engine.num_threads}
    env.close()
    return out


def mjbatch_side(xml: str, frame_skip: int, num_envs: int, steps: int, threads: int) -> dict:
    import mjbatch
    import mujoco
    import numpy as np

    model = mujoco.MjModel.from_xml_path(xml)
    batch = mjbatch.Batch(model, num_envs, num_threads=threads)
    batch.reset()
    ctrl = batch.bind("ctrl")
    rng = np.random.default_rng(0)
    low, high = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    controls = [low + (high - low) * rng.random((num_envs, model.nu)) for _ in range(steps + 5)]
    for c in controls[:5]:
        ctrl[:] = c
        batch.step(nstep=frame_skip)
    start = time.perf_counter()
    for c in controls[5:]:
        ctrl[:] = c
        batch.step(nstep=frame_skip)
    return {"seconds": (time.perf_counter() - start) / steps, "mujoco": mujoco.__version__,
            "threads": batch.num_threads}


def _run(python: str, args: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([python, os.path.join(HERE, "mjbatch_side_by_side.py"), *args], capture_output=True,
                         text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{args[:2]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("ours", "mjbatch"), help=argparse.SUPPRESS)
    parser.add_argument("--xml", help=argparse.SUPPRESS)
    parser.add_argument("--frame-skip", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="worker threads of both engines")
    parser.add_argument("--mjbatch-python", default=sys.executable, help="the interpreter that imports mjbatch")
    args = parser.parse_args()
    if args.side == "ours":
        print(json.dumps(ours(args.task, args.num_envs, args.steps, args.threads)))
        return
    if args.side == "mjbatch":
        print(json.dumps(mjbatch_side(args.xml, args.frame_skip, args.num_envs, args.steps, args.threads)))
        return
    common = ["--num-envs", str(args.num_envs), "--steps", str(args.steps), "--threads", str(args.threads)]
    rows = []
    for task in args.tasks:
        times: dict[str, list[float]] = {"ours": [], "mjbatch": []}
        info: dict = {}
        for r in range(args.rounds):
            order = ("ours", "mjbatch") if r % 2 == 0 else ("mjbatch", "ours")
            if not info:  # the task's MJCF and substeps come from our side
                info = _run(sys.executable, ["--side", "ours", "--task", task, *common, "--steps", "2"])
            for side in order:
                if side == "ours":
                    res = _run(sys.executable, ["--side", "ours", "--task", task, *common])
                else:
                    res = _run(args.mjbatch_python, ["--side", "mjbatch", "--xml", info["xml"], "--frame-skip",
                                                     str(info["frame_skip"]), *common])
                    info["mujoco"] = res["mujoco"]
                times[side].append(res["seconds"])
        a, b = statistics.median(times["ours"]), statistics.median(times["mjbatch"])
        rows.append((task, info["frame_skip"], a, b, times))
        print(f"{task}: ours {[f'{x * 1e3:.2f}' for x in times['ours']]} ms, mjbatch (MuJoCo {info['mujoco']}) "
              f"{[f'{x * 1e3:.2f}' for x in times['mjbatch']]} ms per step", flush=True)
    import mujoco

    print(f"\nN={args.num_envs}, {args.threads} thread(s), {args.steps} steps per side and round, medians of "
          f"{args.rounds} rounds; ours on MuJoCo {mujoco.__version__}")
    print(f"{'task':<16} {'substeps':>8} {'ours ms':>9} {'mjbatch ms':>11} {'ours/mjbatch':>13}")
    for task, skip, a, b, _ in rows:
        print(f"{task:<16} {skip:>8} {a * 1e3:>9.2f} {b * 1e3:>11.2f} {a / b:>13.2f}")


if __name__ == "__main__":
    main()
