"""How fast an eager torch CartPole step can be at all, against Gymnasium's NumPy ``CartPoleVectorEnv``.

A hand-minimised step outside the env contract: the state one ``[4, N]`` float64 tensor, the physics in
Gymnasium's operation order, no action validation, no ``StepResult``, legal actions or statistics, and fresh
starts drawn only for the rows that finished (``nonzero`` + ``index_copy_``; another random stream than
``TensorEnv.step``'s). It is not an API: it measures the floor an eager ``TensorEnv.step`` could reach with
every service removed (benchmarks/HISTORY.md, section 15). Before timing, one step from an injected state is
checked against Gymnasium's on the rows that did not finish.

    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/eager_step_floor.py [--num-envs 4096] [--rounds 3]

``--compiled`` adds the library's own step, eager (``TensorEnv.step``) and through Inductor (its pure
``step_state`` compiled, fresh starts drawn eagerly before each call as ``TensorEnv.step`` draws them; checked
equal to the eager step first), and the same compiled step with its boolean results returned as bytes
(``bool -> float32 -> uint8`` inside the graph, viewed as bool outside): Inductor's CPU code stores a
comparison's boolean result element by element through its vector-mask type, which the last line times
against eager PyTorch.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASSPOLE + MASSCART
POLEMASS_LENGTH = MASSPOLE * LENGTH
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4


class MinimalCartPole:
    """N cart-poles with auto-reset and a 500-step limit, in as few torch calls as the physics allows."""

    def __init__(self, num_envs: int, seed: int = 0) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.state = self._starts(num_envs)
        self.steps = torch.zeros(num_envs, dtype=torch.long)
        self.forces = torch.tensor([-FORCE_MAG, FORCE_MAG], dtype=torch.float64)

    def _starts(self, n: int) -> torch.Tensor:
        return torch.rand(4, n, dtype=torch.float64, generator=self.generator).mul_(0.1).sub_(0.05)

    def step(self, action: torch.Tensor):
        x_dot, theta, theta_dot = self.state[1], self.state[2], self.state[3]
        force = self.forces.index_select(0, action)
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot.square() * sin) / TOTAL_MASS
        theta_acc = (GRAVITY * sin - cos * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * cos.square() / TOTAL_MASS))
        x_acc = temp - POLEMASS_LENGTH * theta_acc * cos / TOTAL_MASS
        state = self.state + TAU * torch.stack((x_dot, x_acc, theta_dot, theta_acc))
        terminated = (state[0].abs() > X_LIMIT) | (state[2].abs() > THETA_LIMIT)
        steps = self.steps.add_(1)
        done = terminated | (steps >= 500)
        reward = torch.ones(action.shape[0])
        final_obs = obs = state.t().float()
        rows = done.nonzero().squeeze(1)
        if rows.numel():
            fresh = self._starts(rows.numel())
            state.index_copy_(1, rows, fresh)
            obs = final_obs.index_copy(0, rows, fresh.t().float())
            steps.index_fill_(0, rows, 0)
        self.state = state
        return obs, reward, terminated, done ^ terminated, final_obs


def check_against_gymnasium(num_envs: int) -> None:
    """One step from the same state and actions: the same observations (float32) on the rows that continue."""
    gym = CartPoleVectorEnv(num_envs=num_envs)
    gym.reset(seed=1)
    ours = MinimalCartPole(num_envs, seed=1)
    start = np.random.default_rng(0).uniform(-0.2, 0.2, (4, num_envs))
    gym.state = start.copy()
    ours.state = torch.from_numpy(start.copy())
    actions = np.random.default_rng(1).integers(0, 2, num_envs)
    gym_obs, _, gym_terminated, _, _ = gym.step(actions)
    obs, _, terminated, _, _ = ours.step(torch.from_numpy(actions))
    assert np.array_equal(terminated.numpy(), gym_terminated), "termination differs from Gymnasium's"
    keep = ~gym_terminated
    # float32 rounding of float64 states apart from 1-ulp differences between torch's and libm's sin/cos.
    np.testing.assert_allclose(obs.numpy()[keep], gym_obs[keep], rtol=1e-6, atol=1e-7,
                               err_msg="observations differ from Gymnasium's")


def seconds_per_step(step, actions, steps: int) -> float:
    for i in range(50):
        step(actions[i % len(actions)])
    start = time.perf_counter()
    for i in range(steps):
        step(actions[i % len(actions)])
    return (time.perf_counter() - start) / steps


def compiled_steps(n: int):
    """``(eager step, compiled step, compiled step with byte outputs)`` of the library's CartPole-v1 at N=n,
    each a callable taking ``[N]`` actions, after checking one compiled step against the eager one."""
    from torch.utils import _pytree as pytree

    from rl_gpu.envs.registry import make

    env = make("CartPole-v1", num_envs=n, device="cpu", seed=1, validate_actions=False)

    def bytes_out(*args):
        out = env.step_state(*args)
        return pytree.tree_map(
            lambda x: x.float().to(torch.uint8) if torch.is_tensor(x) and x.dtype == torch.bool else x, out)

    compiled = torch.compile(env.step_state, dynamic=False, fullgraph=True)
    as_bytes = torch.compile(bytes_out, dynamic=False, fullgraph=True)
    action = torch.randint(0, 2, (n,), generator=torch.Generator().manual_seed(2))
    reset = env.draw_starts(n)
    leaves, spec = pytree.tree_flatten(env.step_state(env.state, action, reset))
    was_bool = [torch.is_tensor(x) and x.dtype == torch.bool for x in leaves]
    def as_bools(out) -> list:
        """``out``'s leaves with those that were boolean viewed as bool again."""
        return [x.view(torch.bool) if b else x for x, b in zip(pytree.tree_leaves(out), was_bool)]

    for got in (compiled(env.state, action, reset), as_bytes(env.state, action, reset)):
        for want, have in zip(leaves, as_bools(got)):
            torch.testing.assert_close(have, want, msg="compiled step differs from eager")

    def compiled_step(a):
        env.state, _ = compiled(env.state, a, env.draw_starts(n))

    def bytes_step(a):
        env.state, _ = pytree.tree_unflatten(as_bools(as_bytes(env.state, a, env.draw_starts(n))), spec)

    return env.step, compiled_step, bytes_step


def bool_store_ns(n: int = 1 << 16, calls: int = 300) -> tuple[float, float]:
    """Nanoseconds per element of ``x > 0.5`` (float64 in, bool out): eager, and as one Inductor kernel."""
    x = torch.rand(n, dtype=torch.float64)
    compiled = torch.compile(lambda v: v > 0.5, dynamic=False)
    times = []
    for fn in (lambda v: v > 0.5, compiled):
        for _ in range(10):
            fn(x)
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        times.append((time.perf_counter() - start) / calls / n * 1e9)
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=2000, help="timed steps per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compiled", action="store_true",
                        help="also time TensorEnv.step eager and its step compiled by Inductor")
    args = parser.parse_args()
    for name, value, most in (("--num-envs", args.num_envs, 1 << 24), ("--steps", args.steps, 10**7),
                              ("--rounds", args.rounds, 1000)):
        if not 1 <= value <= most:
            parser.error(f"{name} must be in 1..{most}, got {value}")
    torch.set_num_threads(1)
    check_against_gymnasium(args.num_envs)
    n = args.num_envs
    library = compiled_steps(n) if args.compiled else None
    for _ in range(args.rounds):
        gym = CartPoleVectorEnv(num_envs=n)
        gym.reset(seed=0)
        gym_s = seconds_per_step(gym.step, np.random.randint(0, 2, (64, n)), args.steps)
        ours_s = seconds_per_step(MinimalCartPole(n).step, torch.randint(0, 2, (64, n)), args.steps)
        print(f"N={n}: Gymnasium {gym_s * 1e6:.0f} us/step, minimal eager torch {ours_s * 1e6:.0f} us/step "
              f"= {gym_s / ours_s:.2f}x Gymnasium")
        if library is not None:
            actions = torch.randint(0, 2, (64, n))
            for name, step in zip(("TensorEnv.step, eager", "step_state, Inductor",
                                   "step_state, Inductor, bytes out"), library):
                took = seconds_per_step(step, actions, args.steps)
                print(f"    {name:<32} {took * 1e6:5.0f} us/step = {gym_s / took:.2f}x Gymnasium")
    if library is not None:
        eager_ns, inductor_ns = bool_store_ns()
        print(f"x > 0.5 on 65,536 float64 values, bool out: eager {eager_ns:.2f} ns/element, "
              f"Inductor {inductor_ns:.2f} ns/element")


if __name__ == "__main__":
    main()
