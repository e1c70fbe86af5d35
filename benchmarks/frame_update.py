"""A compiled PPO update on boolean frames on the CPU, five forms alternating in one process: the loss gathering
and casting the minibatch's frames itself (inside compiled code), the frames gathered and cast eagerly
(``UpdateUnits.gather_frames``), that with fused Adam stepped without ``optimizer.step()``'s Python
(``fused_adam_steps``), that with the frames kept boolean for the first layers' sum of the set cells' weights
(``rl_gpu.nn.frame_kernels``), and that with each minibatch's forward, gradients and clipping as one compiled graph
(``UpdateUnits.minibatch``; all four are the default).

The shape of the PureJaxRL MinAtar comparison (benchmarks/purejaxrl_minatar.py): 64 environments x 128 steps,
4 epochs of 8 minibatches of 1,024 slots, two 64-64 tanh MLPs on the flattened ``10 x 10 x C`` frames
(``--obs-size``: 400 is Breakout's, 600 SpaceInvaders'), ``--compile inductor``, one thread. The rollout's frames
are random (10% set), or with ``--frames played`` those of 128 steps of the game of that size under random actions
(after 172 steps from reset); its other fields are random. Every form starts from the same weights and the script
checks that their first updates give the same parameters (the frame kernel's: to 1e-5, its sums run in another
order) before timing. Prints milliseconds per update, medians of ``--rounds`` [each round], and the ratios to the
first form.

    OMP_NUM_THREADS=1 python benchmarks/frame_update.py [--obs-size 600] [--frames random|played] [--rounds 8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rl_gpu.algos.optim import make_adam
from rl_gpu.algos.ppo import update as ppo_update
from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.data.rollout import Rollout
from rl_gpu.envs.registry import make
from rl_gpu.nn import frame_kernels
from rl_gpu.nn.actor_critic import ActorCritic
from rl_gpu.nn.cpu_kernels import use_cpu_kernels

T, N, A = 128, 64, 6
FORMS = {"loss gathers frames": (False, False, False, False), "eager frame gather": (True, False, False, False),
         "eager frame gather + fused Adam step": (True, True, False, False),
         "eager frame gather + fused Adam step + frame kernel": (True, True, True, False),
         "+ one graph per minibatch": (True, True, True, True)}
"""Each form: (frames gathered eagerly, fused Adam stepped directly, boolean frames into the frame kernel, a
minibatch as one graph)."""
GAMES = {400: "MinAtar-Breakout-v1", 600: "MinAtar-SpaceInvaders-v1"}
MAX_ROUNDS = 1000
"""The most ``--rounds`` taken (a round of the four forms is about a second)."""


def played_frames(obs_size: int) -> torch.Tensor:
    """``[T, N, obs_size]``: the frames of T steps of the game of that size under random actions, after 172 steps
    from reset."""
    env = make(GAMES[obs_size], num_envs=N, device="cpu", seed=0)
    env.reset()
    g = torch.Generator().manual_seed(0)
    frames = []
    for t in range(172 + T):
        obs = env.step(torch.randint(0, env.spec.num_actions, (N,), generator=g)).obs
        if t >= 172:
            frames.append(obs.reshape(N, -1).clone())
    return torch.stack(frames)


def rollout(obs_size: int, played: bool = False) -> Rollout:
    g = torch.Generator().manual_seed(0)
    false = torch.zeros(T, N, dtype=torch.bool)
    obs = played_frames(obs_size) if played else torch.rand(T, N, obs_size, generator=g) < 0.1
    return Rollout(obs=obs, action_mask=torch.ones(T, N, A, dtype=torch.bool),
                   action=torch.randint(0, A, (T, N), generator=g), log_prob=torch.full((T, N), -1.79),
                   value=torch.randn(T, N, generator=g), reward=torch.randn(T, N, generator=g),
                   terminated=torch.rand(T, N, generator=g) < 0.01, truncated=false, final_value=torch.zeros(T, N),
                   bootstrap_value=torch.zeros(N), weight=torch.ones(T, N), live=~false,
                   learner_seat=torch.zeros(N, dtype=torch.long), episode_return=torch.zeros(T, N),
                   episode_length=torch.zeros(T, N, dtype=torch.long), all_weights_one=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--obs-size", type=int, default=600, help="flattened frame size (default 600)")
    parser.add_argument("--frames", default="random", choices=["random", "played"],
                        help="random frames (10%% set) or a game's under random actions (default random)")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds (default 8)")
    args = parser.parse_args(argv)
    check_rounds(parser, args.rounds)
    if not 1 <= args.obs_size <= 4096:
        parser.error(f"--obs-size must be between 1 and 4,096, got {args.obs_size:,}")
    if args.frames == "played" and args.obs_size not in GAMES:
        parser.error(f"--frames played takes --obs-size {' or '.join(map(str, GAMES))} (a game's frames), "
                     f"got {args.obs_size:,}")
    torch.set_num_threads(1)
    batch = rollout(args.obs_size, args.frames == "played")
    config = PPOConfig(update_epochs=4, num_minibatches=8)
    permutations = ppo_update.draw_permutations(T * N, 4, torch.Generator().manual_seed(1), torch.device("cpu"))
    fused_ready = ppo_update.fused_adam_ready
    units = {}
    for name, (gather, _, _, one_graph) in FORMS.items():
        torch.manual_seed(0)
        policy = use_cpu_kernels(ActorCritic(args.obs_size, A, (64, 64)))
        optimizer = make_adam(policy.parameters(), torch.tensor(5e-4), torch.device("cpu"))
        units[name] = ppo_update.UpdateUnits(policy, optimizer, config, mode="inductor")
        if not gather:
            units[name].gather_frames = lambda flat, idx: {}
        if not one_graph:
            units[name].minibatch = None

    def update(name: str) -> float:
        ppo_update.fused_adam_ready = fused_ready if FORMS[name][1] else (lambda optimizer: False)
        frame_kernels.USE_FRAME_KERNEL = FORMS[name][2]  # read when the form's units compile, and by gather_frames
        start = time.perf_counter()
        ppo_update.run_update(units[name], batch, permutations, weighted=False).loss.item()
        return (time.perf_counter() - start) * 1000

    for name in FORMS:
        print(f"{name}: compile and first update {update(name) / 1000:.1f} s", flush=True)
    first = [p.detach() for p in units["loss gathers frames"].policy.parameters()]
    for name in FORMS:
        tolerance = 1e-5 if FORMS[name][2] else 0.0  # the kernel sums in another order than the dense product
        same = all((p - q).abs().max() <= tolerance for p, q in zip(first, units[name].policy.parameters()))
        if not same:
            raise SystemExit(f"{name}: the first update's parameters differ from the loss gathering its frames")
    times = alternate(list(FORMS), args.rounds, update)
    print(f"\nobs size {args.obs_size}, {args.frames} frames, ms per update, median [rounds]; every form's first "
          "update: the same parameters (the frame kernel's to 1e-5)")
    print_forms(times, "ms per update")


def check_rounds(parser: argparse.ArgumentParser, rounds: int) -> None:
    """Refuse ``--rounds`` below 1 or above :data:`MAX_ROUNDS` (one line and exit 2)."""
    if rounds < 1:
        parser.error(f"--rounds must be at least 1, got {rounds}")
    if rounds > MAX_ROUNDS:
        parser.error(f"--rounds must be at most {MAX_ROUNDS:,}, got {rounds:,}")


def alternate(names: list[str], rounds: int, run) -> dict[str, list[float]]:
    """``run(name)`` for every name, ``rounds`` times, in order and then in reverse order by turns; the values
    returned, by name."""
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else reversed(names)):
            times[name].append(run(name))
    return times


def print_forms(times: dict[str, list[float]], unit: str) -> None:
    """A table of each form's median [every round] and its speed-up over the first form."""
    base = statistics.median(next(iter(times.values())))
    print(f"| form | {unit} | speed-up |\n| --- | --- | ---: |")
    for name, t in times.items():
        print(f"| {name} | {statistics.median(t):,.1f} [{', '.join(f'{x:,.1f}' for x in t)}] | "
              f"{base / statistics.median(t):.2f}x |")


if __name__ == "__main__":
    main()
