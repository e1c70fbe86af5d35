"""Whole compiled PPO iterations (collection and update) on the CPU, the rollout engine's forms alternating in one
process: each form adds one of the engine's CPU paths to the form before it.

- ``before``: a critic pass on the final observations at every step, a call of the start sampler per step, one
  step per call of the compiled unit;
- ``final values after``: V(final_obs) taken after the last step, at the steps with a truncated row only
  (``rl_gpu.collect.engine.FINAL_VALUES_AFTER``);
- ``starts at once``: the rollout's starts in one call of the sampler where that gives the same numbers
  (``RolloutEngine._starts_at_once``);
- ``two steps a call``: two steps in each call of the compiled unit (``rl_gpu.collect.engine.STEPS_PER_CALL``).

The shape of the PureJaxRL MinAtar comparison (benchmarks/purejaxrl_minatar.py): 64 environments x 128 steps of a
MinAtar game without sticky actions, ``--policy categorical``'s two 64-64 tanh MLPs on the flattened frames, 4
epochs of 8 minibatches, ``--compile inductor``, one thread. Every form starts from the same networks and seeds,
and every form's first iteration (its compilation) is left out. Prints milliseconds per iteration, medians of
``--rounds`` [each round], and the ratios to the first form.

    OMP_NUM_THREADS=1 python benchmarks/iteration_forms.py [--game Breakout|SpaceInvaders] [--rounds 8]
"""

from __future__ import annotations

import time

import torch
from frame_update import alternate, print_forms
from rollout_forms import game_and_rounds

from rl_gpu.algos.ppo import PPO, PPOConfig
from rl_gpu.collect import engine as engine_module
from rl_gpu.envs.random_draws import starts_drawn_at_once
from rl_gpu.envs.registry import make
from rl_gpu.nn.actor_critic import mlp_for_env

FORMS = {"before": (False, False, 1), "final values after": (True, False, 1),
         "starts at once": (True, True, 1), "two steps a call": (True, True, 2)}
"""Each form: (``FINAL_VALUES_AFTER``, starts drawn at once, ``STEPS_PER_CALL``)."""


def main(argv: list[str] | None = None) -> None:
    args = game_and_rounds(__doc__, argv)
    torch.set_num_threads(1)
    config = PPOConfig(update_epochs=4, num_minibatches=8, gamma=0.99, gae_lambda=0.95, clip_coef=0.2,
                       ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, norm_adv=True, clip_vloss=True)
    algos = {}
    for name in FORMS:
        env = make(f"MinAtar-{args.game}-v1", num_envs=64, device="cpu", seed=0, validate_actions=False,
                   sticky_action_prob=0.0)
        torch.manual_seed(0)
        algos[name] = PPO(mlp_for_env(env.spec, (64, 64)), config, 5e-4, seed=0, compile="inductor", env=env,
                          num_steps=128)

    def iteration(name: str) -> float:
        final_after, at_once, steps = FORMS[name]
        engine_module.FINAL_VALUES_AFTER, engine_module.STEPS_PER_CALL = final_after, steps
        algo = algos[name]
        for engine in algo._engines.values():
            engine._starts_at_once = at_once and starts_drawn_at_once(engine.env)
        start = time.perf_counter()
        algo.iterate()
        return (time.perf_counter() - start) * 1000

    for name in FORMS:
        print(f"{name}: compile and first iteration {iteration(name) / 1000:.1f} s", flush=True)
    times = alternate(list(FORMS), args.rounds, iteration)
    print(f"\n{args.game}, 64 x 128 steps and 4 x 8 minibatches, ms per iteration, median [rounds]")
    print_forms(times, "ms per iteration")


if __name__ == "__main__":
    main()
