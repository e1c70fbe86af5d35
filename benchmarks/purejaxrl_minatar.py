"""PPO on MinAtar side by side with PureJaxRL's ``ppo.py`` on gymnax's MinAtar ports, one core, sides alternating
seed by seed: training transitions per second and the return at equal steps.

Both sides: the same configuration (PureJaxRL's MinAtar PPO shape: 64 environments x 128 steps per update, 4 epochs
of 8 minibatches, lr 5e-4 decayed linearly to 0, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, value
coefficient 0.5, gradient-norm clip 0.5, advantages normalised per minibatch, clipped value loss) and the same
network: ppo.py's two 64-64 tanh MLPs (actor and critic) on the flattened frames (``--policy categorical`` here).
PureJaxRL runs its unmodified ``ppo.py`` and ``wrappers.py`` from the folder given (a checkout, never copied into
this repository) in its own interpreter with JAX and gymnax 0.0.9 (``--jax-python``), its whole training one XLA
program; compiling it is timed apart. rl_gpu runs ``rl-gpu train`` (``--compile off`` by default, or
``inductor``: its compile time, how much longer the first update took than the median one, is then timed apart,
as PureJaxRL's is); its seconds are the training time of ``summary.json`` (validations and the final evaluation
excluded).

Return at equal steps: the mean return of the episodes that ended in the last tenth of the updates (each side's
own training episodes, sampled actions), per seed; the table gives each seed and the IQM, and with 4 or more
seeds a side the share of random relabellings of the pooled seeds whose IQMs lie as far apart (a permutation
test). No sticky actions (gymnax's ports have none; rl_gpu's default, MinAtar's, is 0.1) and 1,000-step limits on
both sides (gymnax ends an episode at its limit as a termination, rl_gpu as a truncation it bootstraps).

The game: gymnax 0.0.9's SpaceInvaders differs from MinAtar's (rl_gpu's is MinAtar's, tested against the ``minatar``
package) in two rules: its first wave has 4 x 7 aliens (columns 2-8; MinAtar's and every later wave: 4 x 6), and
an enemy bullet is checked against the cannon's column before the cannon moves (MinAtar: after). With ``--rules
minatar`` (the default) the JAX side runs gymnax's port with both rules set to MinAtar's (the port's
``reset_env`` and ``step_agent`` replaced in that process, PureJaxRL's files untouched), and before training the
script checks the two games equal: 16 episodes' worth of random actions stepped on both, every observation,
reward and episode end compared (exit 2 on the first difference). ``--rules gymnax`` runs the port as it is.
Breakout's rules are the same in both.

    OMP_NUM_THREADS=1 python benchmarks/purejaxrl_minatar.py ../shared/peers/purejaxrl --jax-python JAX/bin/python \\
        --games Breakout SpaceInvaders --seeds 0 1 2 --total-timesteps 1000000 [--rules minatar|gymnax]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from purejaxrl_compare import (  # noqa: E402
    JAX_COMPILE,
    JAX_START,
    check_jax,
    default_core,
    missing,
    pinned,
    run_jax,
)

REPO = Path(__file__).resolve().parent.parent
CONFIG = {"LR": 5e-4, "NUM_ENVS": 64, "NUM_STEPS": 128, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 8, "GAMMA": 0.99,
          "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
          "ACTIVATION": "tanh", "ANNEAL_LR": True, "DEBUG": False}
IDS = {game: (f"{game}-MinAtar", f"MinAtar-{game}-v1?sticky_action_prob=0")
       for game in ("Breakout", "SpaceInvaders", "Asterix", "Freeway")}
"""gymnax's id and ours per game; gymnax's MinAtar ports have no sticky actions, so ours run without them here."""

MINATAR_RULES = textwrap.dedent("""
    if args["rules"] == "minatar":
        import jax.numpy as jnp
        from gymnax.environments.minatar import space_invaders as si
        _reset_env, _step_agent = si.MinSpaceInvaders.reset_env, si.step_agent

        def reset_env(self, key, params):
            # MinAtar's first wave: rows 0-3, columns 2-7 (gymnax 0.0.9 fills columns 2-8).
            _, state = _reset_env(self, key, params)
            state = state.replace(alien_map=jnp.zeros((10, 10)).at[0:4, 2:8].set(1))
            return self.get_obs(state), state

        def step_agent(action, state, params):
            # MinAtar checks an enemy bullet in the bottom row against the cannon's column after it moves.
            moved = _step_agent(action, state, params)
            return moved.replace(terminal=jnp.logical_or(state.terminal, moved.e_bullet_map[9, moved.pos]))

        si.MinSpaceInvaders.reset_env, si.step_agent = reset_env, step_agent
""")
"""Set gymnax's SpaceInvaders to MinAtar's rules in the JAX process (``args["rules"] == "minatar"``); gymnax's
``step_env`` looks ``step_agent`` up in its module at each trace, so the replacement is what gets compiled."""

CHECK_DRIVER = JAX_START + MINATAR_RULES + textwrap.dedent("""
    import gymnax
    import numpy as np
    actions = np.load(args["actions"])                     # [T, K]
    env, params = gymnax.make(args["env"])
    key, *keys = jax.random.split(jax.random.PRNGKey(0), actions.shape[1] + 1)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.numpy.stack(keys), params)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    frames, rewards, dones = [np.asarray(obs, bool)], [], []
    for t in range(actions.shape[0]):
        keys = jax.random.split(jax.random.fold_in(key, t), actions.shape[1])
        obs, state, reward, done, _ = step(keys, state, jax.numpy.asarray(actions[t]), params)
        frames.append(np.asarray(obs, bool)); rewards.append(np.asarray(reward)); dones.append(np.asarray(done))
    np.savez_compressed(args["out"], obs=np.stack(frames), reward=np.stack(rewards), done=np.stack(dones))
    print(json.dumps({"steps": int(actions.shape[0])}))
""")
"""Step gymnax's port (auto-resetting) with the given actions from its start, saving every observation (the reset
one first), reward and episode end."""

JAX_DRIVER = JAX_START + MINATAR_RULES + JAX_COMPILE + textwrap.dedent("""
    import numpy as np
    start = time.perf_counter()
    out = jax.block_until_ready(train(rng))
    run_s = time.perf_counter() - start
    metrics = out["metrics"]
    done = np.asarray(metrics["returned_episode"])          # [updates, steps, envs]
    ret = np.asarray(metrics["returned_episode_returns"])
    updates = done.shape[0]
    tail = slice(updates - max(1, updates // 10), updates)
    final = float(ret[tail][done[tail]].mean()) if done[tail].any() else float("nan")
    print(json.dumps({"compile_s": compile_s, "run_s": run_s, "final_return": final,
                      "transitions": updates * config["NUM_STEPS"] * config["NUM_ENVS"], "jax": jax.__version__}))
""")


def run_purejaxrl(args, path: list[str], game: str, seed: int) -> dict:
    config = {**CONFIG, "ENV_NAME": IDS[game][0], "TOTAL_TIMESTEPS": args.total_timesteps}
    result = run_jax(args.jax_python, args.core, JAX_DRIVER,
                     {"path": path, "config": config, "seed": seed, "rules": args.rules})
    return {"seconds": result["run_s"], "compile_s": result["compile_s"], "final_return": result["final_return"],
            "transitions": result["transitions"]}


def run_rl_gpu(args, workdir: Path, game: str, seed: int) -> dict:
    c = CONFIG
    output = workdir / f"{game}-{seed}"
    command = [sys.executable, "-m", "rl_gpu", "train", "--env", IDS[game][1], "--device", "cpu", "--policy",
               "categorical", "--hidden-sizes", "64", "64", "--num-envs", str(c["NUM_ENVS"]), "--num-steps",
               str(c["NUM_STEPS"]), "--update-epochs", str(c["UPDATE_EPOCHS"]), "--num-minibatches",
               str(c["NUM_MINIBATCHES"]), "--learning-rate", str(c["LR"]), "--anneal-lr", "--gamma", str(c["GAMMA"]),
               "--gae-lambda", str(c["GAE_LAMBDA"]), "--clip-coef", str(c["CLIP_EPS"]), "--ent-coef",
               str(c["ENT_COEF"]), "--vf-coef", str(c["VF_COEF"]), "--max-grad-norm", str(c["MAX_GRAD_NORM"]),
               "--norm-adv", "--clip-vloss", "--no-norm-reward", "--no-normalize-obs", "--total-timesteps",
               str(args.total_timesteps), "--eval-every", "100000", "--eval-episodes", "8",
               "--final-eval-episodes", "8", "--compile", args.compile, "--threads", "1", "--seeds", str(seed),
               "--output", str(output), "--quiet"]
    out = subprocess.run(pinned(command, args.core), env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=REPO,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"rl-gpu train failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    run = output / f"seed-{seed}"
    summary = json.loads((run / "summary.json").read_text())
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lines = [r for r in lines if "episode_return" in r]
    updates = max(r["update"] for r in lines)
    tail = [r for r in lines if r["update"] > updates - max(1, updates // 10)]
    episodes = sum(r.get("episodes", 1) for r in tail)
    final = sum(r["episode_return"] * r.get("episodes", 1) for r in tail) / max(episodes, 1)
    compile_s = compile_seconds(run / "metrics.jsonl") if args.compile != "off" else 0.0
    return {"seconds": summary["train_seconds"] - compile_s, "compile_s": compile_s, "final_return": final,
            "transitions": updates * c["NUM_ENVS"] * c["NUM_STEPS"]}


def compile_seconds(metrics: Path) -> float:
    """A compiled run's compile time, timed apart as PureJaxRL's is: how much longer its first update (collection
    and update, where Inductor compiles) took than its median update."""
    times = {}
    for line in metrics.read_text().splitlines():
        r = json.loads(line)
        if "collect_seconds" in r and "update_seconds" in r:
            times[r["update"]] = r["collect_seconds"] + r["update_seconds"]
    if 1 not in times or len(times) < 2:
        return 0.0
    return max(0.0, times[1] - statistics.median(t for u, t in times.items() if u != 1))


def check_same_game(args, path: list[str], workdir: Path, game: str, envs: int = 16, steps: int = 1000) -> int:
    """Step gymnax's port (under ``--rules``) and rl_gpu's env with the same random actions (fire twice as likely
    as each other action, so waves get cleared) and exit 2 at the first observation, reward or episode end that
    differs; returns the number of episodes that ended. Only for games without random draws (SpaceInvaders:
    which alien shoots is decided by the board), where equal actions must give equal games."""
    import numpy as np
    import torch

    from rl_gpu.envs.registry import make

    rng = np.random.default_rng(0)
    actions = rng.choice(4, size=(steps, envs), p=[0.2, 0.2, 0.2, 0.4]).astype(np.int32)
    np.save(workdir / "actions.npy", actions)
    run_jax(args.jax_python, args.core, CHECK_DRIVER, {"path": path, "rules": args.rules, "env": IDS[game][0],
                                                        "actions": str(workdir / "actions.npy"),
                                                        "out": str(workdir / "gymnax.npz")})
    theirs = np.load(workdir / "gymnax.npz")
    env = make(IDS[game][1], num_envs=envs, device="cpu", seed=0)
    obs = env.reset(seed=0).obs

    def differ(what: str, t: int, ours, gymnax) -> None:
        rows = np.flatnonzero((np.asarray(ours) != np.asarray(gymnax)).reshape(envs, -1).any(1))
        missing(f"{game}: gymnax's port under --rules {args.rules} differs from rl_gpu's env in the {what} at "
                f"step {t} (environments {rows.tolist()[:8]}); the side by side would compare two games")

    for t in range(steps + 1):
        if not np.array_equal(obs.numpy().astype(bool), theirs["obs"][t]):
            differ("observation", t, obs.numpy().astype(bool), theirs["obs"][t])
        if t == steps:
            break
        result = env.step(torch.as_tensor(actions[t], dtype=torch.long))
        done = (result.terminated | result.truncated).numpy()
        if not np.array_equal(result.reward.numpy(), theirs["reward"][t]):
            differ("reward", t + 1, result.reward.numpy(), theirs["reward"][t])
        if not np.array_equal(done, theirs["done"][t]):
            differ("episode end", t + 1, done, theirs["done"][t])
        obs = result.obs
    return int(theirs["done"].sum())


def iqm(values: list[float]) -> float:
    """Interquartile mean (the middle half; all of them for fewer than 4)."""
    v = sorted(values)
    k = len(v) // 4
    middle = v[k:len(v) - k] or v
    return sum(middle) / len(middle)


def permutation_p(a: list[float], b: list[float], rounds: int = 20_000, seed: int = 0) -> float:
    """Two-sided permutation test of the IQM difference: the share of random relabellings of the pooled seeds
    into groups of ``len(a)`` and ``len(b)`` whose |IQM difference| is at least the observed one."""
    observed = abs(iqm(a) - iqm(b))
    pool, rng, hits = list(a) + list(b), random.Random(seed), 0
    for _ in range(rounds):
        rng.shuffle(pool)
        hits += abs(iqm(pool[:len(a)]) - iqm(pool[len(a):])) >= observed - 1e-12
    return hits / rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("purejaxrl", type=Path, help="the folder of a PureJaxRL checkout (ppo.py, wrappers.py)")
    parser.add_argument("--jax-python", required=True, help="an interpreter with jax, flax, optax, distrax, gymnax")
    parser.add_argument("--games", nargs="+", default=["Breakout", "SpaceInvaders"], choices=sorted(IDS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--total-timesteps", type=int, default=1_000_000)
    parser.add_argument("--core", type=int, default=default_core())
    parser.add_argument("--compile", default="off", choices=["off", "inductor"], help="rl_gpu's compile mode")
    parser.add_argument("--rules", default="minatar", choices=["minatar", "gymnax"],
                        help="SpaceInvaders' rules on the JAX side: MinAtar's (default; checked equal to rl_gpu's "
                             "before training) or gymnax 0.0.9's port as it is")
    args = parser.parse_args(argv)
    per_update = CONFIG["NUM_ENVS"] * CONFIG["NUM_STEPS"]
    if args.total_timesteps < per_update:
        parser.error(f"--total-timesteps must be at least one update's {per_update:,} steps, "
                     f"got {args.total_timesteps}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        path = check_jax(args.purejaxrl, args.jax_python, workdir)
        if "SpaceInvaders" in args.games and args.rules == "minatar":
            ended = check_same_game(args, path, workdir, "SpaceInvaders")
            print(f"SpaceInvaders: gymnax's port under MinAtar's rules equals rl_gpu's env over 16 x 1,000 random "
                  f"steps ({ended} episodes), observations, rewards and episode ends")
        rules = f", SpaceInvaders under {args.rules}'s rules" if "SpaceInvaders" in args.games else ""
        print(f"{args.total_timesteps:,} steps per run, core {args.core}, load {os.getloadavg()[0]:.2f}{rules}")
        rows = []
        for game in args.games:
            for i, seed in enumerate(args.seeds):
                order = ("purejaxrl", "rl_gpu") if i % 2 == 0 else ("rl_gpu", "purejaxrl")
                for side in order:
                    r = (run_purejaxrl(args, path, game, seed) if side == "purejaxrl"
                         else run_rl_gpu(args, workdir, game, seed))
                    r.update(game=game, side=side, seed=seed, load=os.getloadavg()[0])
                    rows.append(r)
                    print(f"  {game} seed {seed} {side}: {r['seconds']:.1f} s (+{r['compile_s']:.1f} s compile), "
                          f"{r['transitions'] / r['seconds']:,.0f} transitions/s, return {r['final_return']:.2f}, "
                          f"load {r['load']:.2f}", flush=True)
    print("\n| game | side | return per seed | IQM | transitions/s per seed | median | rl_gpu / PureJaxRL |")
    print("|---|---|---|---:|---|---:|---:|")
    for game in args.games:
        speed = {}
        for side in ("rl_gpu", "purejaxrl"):
            mine = [r for r in rows if r["game"] == game and r["side"] == side]
            rates = [r["transitions"] / r["seconds"] for r in mine]
            speed[side] = statistics.median(rates)
            returns = ", ".join(f"{r['final_return']:.2f}" for r in mine)
            ratio = f"{speed['rl_gpu'] / speed['purejaxrl']:.2f}" if side == "purejaxrl" else ""
            print(f"| {game} | {side} | {returns} | {iqm([r['final_return'] for r in mine]):.2f} | "
                  f"{', '.join(f'{v:,.0f}' for v in rates)} | {speed[side]:,.0f} | {ratio} |")
    for game in args.games:
        ours, theirs = ([r["final_return"] for r in rows if r["game"] == game and r["side"] == side]
                        for side in ("rl_gpu", "purejaxrl"))
        if min(len(ours), len(theirs)) >= 4:   # fewer seeds have too few relabellings to say anything
            print(f"{game}: IQM difference rl_gpu - PureJaxRL {iqm(ours) - iqm(theirs):+.2f}, two-sided permutation "
                  f"p = {permutation_p(ours, theirs):.2f}")


if __name__ == "__main__":
    main()
