"""Side by side on one core, alternating, several rounds: PureJaxRL's own PPO against ``rl-gpu bench --measure
train`` at the same configuration (``train``), and rl_gpu's eager ``TensorEnv.step`` against Gymnasium's numpy
``CartPoleVectorEnv`` (``env-step``).

``train``: CartPole-v1, N=4096 environments, T=16 steps per rollout, 4 epochs of 4 minibatches, two 64-64 tanh
MLPs (actor and critic), Adam. PureJaxRL runs its unmodified ``ppo.py`` and ``wrappers.py`` from the folder
given (a checkout of luchris429/purejaxrl, never copied into this repository) in its own interpreter
(``--jax-python``: a separate environment with JAX), its whole training loop one XLA program; the
``jax.jit(make_train(config)).lower(rng).compile()`` is timed apart from the runs. rl_gpu runs
``python -m rl_gpu bench --measure train`` from this checkout (each timed call one ``PPO.iterate``: collect,
GAE, update). Each round starts one process per side, one after the other, each pinned with ``taskset`` to the
same core, single-threaded (XLA: ``--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``;
torch: ``OMP_NUM_THREADS=1``, ``--threads 1``); every round gets a fresh Inductor cache, so both compile times
are cold.
wrappers.py imports brax and navix, which CartPole never uses: when the JAX interpreter has neither, empty
stand-ins go on its path.

``env-step``: one process pinned to one core steps Gymnasium's ``CartPoleVectorEnv`` and rl_gpu's CartPole-v1
(built by ``make`` as a user gets it, which validates actions, and with ``validate_actions=False`` as
``rl-gpu bench`` times it) in turn with the same fixed random actions, several rounds. Transitions are counted
as ``rl-gpu bench`` counts them (Gymnasium's reset-only steps are not transitions). ``--profile`` adds
torch.profiler's table of where an eager step's time goes.

Figures are medians over rounds; ratios are taken within each round. The machine may be shared: only ratios
measured in one run mean much.

    python benchmarks/purejaxrl_compare.py train ../shared/peers/purejaxrl --jax-python .venv-pjr/bin/python
    python benchmarks/purejaxrl_compare.py env-step --profile
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INSTALL = ("python3 -m venv .venv-pjr && .venv-pjr/bin/pip install jax flax optax distrax chex six gymnax==0.0.9"
           "  (then pass --jax-python .venv-pjr/bin/python)")
XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
JAX_MODULES = ("jax", "flax", "optax", "distrax", "six", "gymnax")
"""gymnax 0.0.9 imports six without declaring it."""

PUREJAXRL_CONFIG = {
    "LR": 2.5e-4, "NUM_ENVS": 4096, "NUM_STEPS": 16, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True, "DEBUG": False,
}
"""PureJaxRL's own CartPole settings, with N, T, epochs and minibatches those compared (``TOTAL_TIMESTEPS``
comes from ``--total-timesteps``)."""

JAX_START = textwrap.dedent("""
    import json, sys, time
    args = json.loads(sys.argv[1])
    sys.path[:0] = args["path"]
    import jax
""")
"""The JAX side's imports and its arguments (JSON, ``args``; ``path``: the folders to import from)."""

JAX_COMPILE = textwrap.dedent("""
    import ppo  # PureJaxRL's ppo.py, unmodified
    config = dict(args["config"])
    rng = jax.random.PRNGKey(args["seed"])
    start = time.perf_counter()
    train = jax.jit(ppo.make_train(dict(config))).lower(rng).compile()
    compile_s = time.perf_counter() - start
""")
JAX_PRELUDE = JAX_START + JAX_COMPILE
"""The JAX side's start: its arguments (JSON: ``path``, ``config``, ``seed``), PureJaxRL's training compiled as
``train`` (``compile_s`` seconds)."""

JAX_DRIVER = JAX_PRELUDE + textwrap.dedent("""
    times = []
    for _ in range(args["runs"]):
        start = time.perf_counter()
        jax.block_until_ready(train(rng))
        times.append(time.perf_counter() - start)
    updates = int(config["TOTAL_TIMESTEPS"]) // config["NUM_STEPS"] // config["NUM_ENVS"]
    print(json.dumps({"compile_s": compile_s, "run_s": times,
                      "transitions": updates * config["NUM_STEPS"] * config["NUM_ENVS"],
                      "jax": jax.__version__, "backend": jax.default_backend()}))
""")

STUBS = {
    "brax/__init__.py": "",
    "brax/envs/__init__.py": "",
    "brax/envs/wrappers/__init__.py": "",
    "brax/envs/wrappers/training.py": "class EpisodeWrapper:\n    pass\n\n\nclass AutoResetWrapper:\n"
                                      "    pass\n",
    "navix/__init__.py": "",
}
"""Empty stand-ins for the two packages wrappers.py imports at module level and CartPole never uses."""

PROBE = ("import importlib.util, sys; "
         "print(','.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))")


def missing(message: str) -> None:
    print(f"purejaxrl_compare: {message}", file=sys.stderr)
    sys.exit(2)


def pinned(command: list[str], core: int) -> list[str]:
    if shutil.which("taskset") is None:
        missing("taskset is not installed (util-linux): it pins each side to one core")
    return ["taskset", "-c", str(core), *command]


def default_core() -> int:
    """The last core this process may run on (core 0 tends to take the interrupts)."""
    return max(os.sched_getaffinity(0))


def check_jax(folder: Path, python: str, workdir: Path) -> list[str]:
    """Exit 2, saying what is missing, unless ``folder`` holds PureJaxRL's ppo.py and wrappers.py and
    ``python`` imports JAX and PureJaxRL's dependencies. Returns the JAX side's extra path: the folder, and
    stand-ins for brax and navix (written under ``workdir``) when that interpreter has neither."""
    absent = [name for name in ("ppo.py", "wrappers.py") if not (folder / name).is_file()]
    if absent:
        missing(f"{folder} has no {' and no '.join(absent)}: give the folder of a PureJaxRL checkout (the "
                "one holding ppo.py and wrappers.py, e.g. ../shared/peers/purejaxrl)")
    if shutil.which(python) is None and not Path(python).is_file():
        missing(f"no Python interpreter {python!r} for the JAX side; install one with: {INSTALL}")
    out = subprocess.run([python, "-c", PROBE, *JAX_MODULES, "brax", "navix"], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        missing(f"{python} failed to start: {out.stderr.strip()[-300:]}")
    lacking = [m for m in out.stdout.strip().split(",") if m]
    needed = [m for m in lacking if m in JAX_MODULES]
    if needed:
        missing(f"{python} cannot import {', '.join(needed)}; install the JAX side with: {INSTALL}")
    path = [str(folder.resolve())]
    if "brax" in lacking or "navix" in lacking:
        stubs = workdir / "stubs"
        for name, text in STUBS.items():
            (stubs / name).parent.mkdir(parents=True, exist_ok=True)
            (stubs / name).write_text(text)
        path.insert(0, str(stubs))
    return path


def run_jax(python: str, core: int, driver: str, payload: dict) -> dict:
    """Run ``driver`` (a :data:`JAX_PRELUDE`-started script) in the JAX interpreter, pinned to ``core`` and single
    threaded, with ``payload`` as its JSON argument; returns the JSON object it prints last."""
    env = {**os.environ, "XLA_FLAGS": XLA_FLAGS, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"}
    out = subprocess.run(pinned([python, "-c", driver, json.dumps(payload)], core), env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"PureJaxRL run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_purejaxrl(args, path: list[str]) -> dict:
    config = {**PUREJAXRL_CONFIG, "NUM_ENVS": args.num_envs, "TOTAL_TIMESTEPS": args.total_timesteps}
    result = run_jax(args.jax_python, args.core, JAX_DRIVER,
                     {"path": path, "config": config, "seed": args.seed, "runs": args.jax_runs})
    result["transitions_per_s"] = result["transitions"] / statistics.median(result["run_s"])
    return result


def run_rl_gpu(args, workdir: Path, round_index: int) -> dict:
    output = workdir / f"bench-{round_index}.json"
    minibatch = 16 * args.num_envs // 4
    command = [sys.executable, "-m", "rl_gpu", "bench", "--env", "CartPole-v1", "--device", "cpu",
               "--num-envs", str(args.num_envs), "--num-steps", "16", "--minibatch-size", str(minibatch),
               "--measure", "train", "--compile", *args.compile, "--repeats", str(args.repeats),
               "--threads", "1", "--seed", str(args.seed), "--output", str(output)]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "TORCHINDUCTOR_CACHE_DIR": str(workdir / f"inductor-cache-{round_index}")}
    out = subprocess.run(pinned(command, args.core), env=env, cwd=REPO, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"rl-gpu bench failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    cells = json.loads(output.read_text())["results"]
    return {c["compile"]: c for c in cells if c["measure"] == "train"}


def train(args) -> None:
    with tempfile.TemporaryDirectory(prefix="purejaxrl_compare_") as tmp:
        rows = run_rounds(args, check_jax(Path(args.purejaxrl), args.jax_python, Path(tmp)), Path(tmp))
    summarize(args, rows)


def run_rounds(args, path: list[str], workdir: Path) -> list[dict]:
    rows: list[dict] = []
    print(f"CartPole-v1, N={args.num_envs}, T=16, 4 epochs x 4 minibatches, 64-64 tanh actor and critic, "
          f"Adam; each side pinned to core {args.core}, one thread; {args.rounds} rounds, PureJaxRL first; "
          f"PureJaxRL: {args.total_timesteps:,} steps per run, median of {args.jax_runs} runs; rl_gpu: "
          f"median of {args.repeats} iterations per compile mode")
    for r in range(args.rounds):
        theirs = run_purejaxrl(args, path)
        ours = run_rl_gpu(args, workdir, r)
        rows.append({"round": r, "purejaxrl": theirs, "rl_gpu": ours})
        line = (f"round {r}: PureJaxRL {theirs['transitions_per_s']:,.0f}/s "
                f"(compile {theirs['compile_s']:.1f} s)")
        for mode, cell in ours.items():
            ratio = cell["transitions_per_s"] / theirs["transitions_per_s"]
            line += (f" | rl_gpu {mode} {cell['transitions_per_s']:,.0f}/s = {ratio:.2f}x "
                     f"(first call {cell['first_call_s']:.1f} s)")
        print(line, flush=True)
    return rows


def summarize(args, rows: list[dict]) -> None:
    jax_rates = [row["purejaxrl"]["transitions_per_s"] for row in rows]
    compile_s = statistics.median(row["purejaxrl"]["compile_s"] for row in rows)
    first = rows[0]["purejaxrl"]
    print("\nmedians over rounds (ratios: rl_gpu / PureJaxRL within a round, then the median):")
    print(f"  PureJaxRL       {statistics.median(jax_rates):>10,.0f} transitions/s   "
          f"compile {compile_s:.1f} s (lower + compile; jax {first['jax']} on {first['backend']})")
    for mode in args.compile:
        rates = [row["rl_gpu"][mode]["transitions_per_s"] for row in rows]
        ratios = [ours / theirs for ours, theirs in zip(rates, jax_rates)]
        first_call = statistics.median(row["rl_gpu"][mode]["first_call_s"] for row in rows)
        print(f"  rl_gpu {mode:<9}{statistics.median(rates):>10,.0f} transitions/s   "
              f"{statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f})   "
              f"first call {first_call:.1f} s{' (compile, cold cache)' if mode != 'off' else ''}")
    if args.output:
        Path(args.output).write_text(json.dumps({"args": vars(args), "rounds": rows}, indent=1) + "\n")
        print(f"wrote {args.output}")


def env_step(args) -> None:
    os.sched_setaffinity(0, {args.core})
    import numpy as np
    import torch

    torch.set_num_threads(1)
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    from rl_gpu.envs.registry import make

    n = args.num_envs
    steps = max(16, math.ceil(args.env_transitions / n))
    actions = torch.randint(0, 2, (16, n), generator=torch.Generator().manual_seed(args.seed))
    np_actions = actions.numpy()
    gym = CartPoleVectorEnv(num_envs=n)
    gym.reset(seed=args.seed)
    ours = {"validating actions": make("CartPole-v1", num_envs=n, seed=args.seed),
            "validate_actions=False": make("CartPole-v1", num_envs=n, seed=args.seed, validate_actions=False)}
    prev_done = np.zeros(n, dtype=bool)

    def gym_block() -> float:
        nonlocal prev_done
        counted = 0
        start = time.perf_counter()
        for i in range(steps):
            _, _, terminated, truncated, _ = gym.step(np_actions[i % 16])
            counted += n - int(prev_done.sum())
            prev_done = terminated | truncated
        return counted / (time.perf_counter() - start)

    def ours_block(env) -> float:
        start = time.perf_counter()
        for i in range(steps):
            env.step(actions[i % 16])
        return steps * n / (time.perf_counter() - start)

    sides = {"gymnasium": gym_block, **{name: partial(ours_block, env) for name, env in ours.items()}}
    for block in sides.values():
        block()  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, block in sides.items():
            rates[name].append(block())
    print(f"CartPole-v1, N={n}, {steps} steps per block, {args.rounds} rounds alternating, core {args.core}, "
          f"one thread (torch {torch.__version__}, numpy {np.__version__}); transitions/s, median over "
          "rounds")
    gym_rate = statistics.median(rates["gymnasium"])
    print(f"  Gymnasium CartPoleVectorEnv                    {gym_rate:>12,.0f}")
    for name in ours:
        ratios = [o / g for o, g in zip(rates[name], rates["gymnasium"])]
        print(f"  rl_gpu TensorEnv.step ({name:<22})  {statistics.median(rates[name]):>12,.0f}   "
              f"{statistics.median(ratios):.2f}x Gymnasium (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    if args.profile:
        profile(ours["validate_actions=False"], actions, steps)


def profile(env, actions, steps: int) -> None:
    """torch.profiler's self CPU time per eager step by operator (the profiler's own cost included)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            env.step(actions[i % 16])
    rows = [(e.key, e.count / steps, e.self_cpu_time_total / steps) for e in prof.key_averages()]
    total = sum(us for _, _, us in rows)
    # The step's own calls, not those an operator makes inside (aten::to calling aten::copy_).
    calls = sum(1 for e in prof.events() if e.cpu_parent is None) / steps
    print(f"\nwhere an eager step's time goes (validate_actions=False, torch.profiler over {steps} steps): "
          f"{total:.0f} us of operator self time per step, {calls:.0f} operator calls (views included)")
    print(f"  {'operator':<24} {'calls/step':>10} {'us/step':>9} {'share':>6}")
    for key, count, us in sorted(rows, key=lambda r: -r[2])[:15]:
        print(f"  {key:<24} {count:>10.1f} {us:>9.1f} {us / total:>6.0%}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="PureJaxRL's PPO against rl-gpu bench --measure train")
    t.add_argument("purejaxrl", help="folder of a PureJaxRL checkout holding ppo.py and wrappers.py")
    t.add_argument("--jax-python", default="python3",
                   help="interpreter with jax, flax, optax, distrax, gymnax==0.0.9 (a separate environment)")
    t.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    t.add_argument("--total-timesteps", type=int, default=2**21,
                   help="PureJaxRL steps per run (default 2**21)")
    t.add_argument("--jax-runs", type=int, default=2, help="PureJaxRL runs per round after its compile")
    t.add_argument("--repeats", type=int, default=5, help="rl-gpu bench timed iterations per compile mode")
    t.add_argument("--compile", nargs="+", default=["off", "inductor"], choices=["off", "inductor"])
    t.add_argument("--output", help="JSON file for every round's figures")
    e = sub.add_parser("env-step", help="eager TensorEnv.step against Gymnasium's CartPoleVectorEnv")
    e.add_argument("--rounds", type=int, default=15, help="alternating rounds (default 15)")
    e.add_argument("--env-transitions", type=int, default=262144, help="transitions per block")
    e.add_argument("--profile", action="store_true", help="also print where an eager step's time goes")
    for p in (t, e):
        p.add_argument("--num-envs", type=int, default=4096)
        p.add_argument("--core", type=int, default=default_core(), help="core to pin to (default: the last)")
        p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "train":
        train(args)
    else:
        env_step(args)


if __name__ == "__main__":
    main()
