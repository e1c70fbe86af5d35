"""Per-environment training defaults: the one place that says how each built-in environment is trained.
Command-line flags override them."""

from __future__ import annotations

from rl_gpu.algos.ppo.config import PPOConfig
from rl_gpu.training.config import DEFAULT_ENV, TrainConfig

__all__ = ["DEFAULT_ENV", "GYMNASIUM_DEFAULTS", "PRESETS", "preset_config"]

_CLASSIC = {
    "num_steps": 128,
    "learning_rate": 1e-3,
    "anneal_lr": True,
    "min_updates": 1,
    "eval_every": 5,
    "eval_episodes": 64,
    "final_eval_episodes": 1000,
    "consecutive_passes": 2,
    "deterministic_eval": True,
}

_LOCOMOTION = {
    # MuJoCo robots: observations and rewards normalised (returns of thousands would swamp the value loss),
    # small initial action noise (torques of ±1 at random make a cheetah flip), a short horizon of 64 steps
    # over a few dozen worlds, 10 epochs on 4 minibatches.
    "num_envs": 64,
    "num_steps": 64,
    "learning_rate": 3e-4,
    "anneal_lr": True,
    "normalize_obs": True,
    "init_log_std": -1.0,
    "min_updates": 1,
    "max_updates": 100_000,
    "total_timesteps": 10_000_000,
    "eval_every": 25,
    "eval_episodes": 8,
    "final_eval_episodes": 32,
    "consecutive_passes": 2,
    "deterministic_eval": True,
    "ppo": {"gamma": 0.98, "gae_lambda": 0.92, "update_epochs": 10, "num_minibatches": 4, "ent_coef": 0.0,
            "norm_reward": True},
}
_LONGER_HORIZON = {
    "init_log_std": -0.5,
    "ppo": {**_LOCOMOTION["ppo"], "gamma": 0.99, "gae_lambda": 0.95, "num_minibatches": 16},
}
_LOCOMOTION_TASKS: dict[str, dict] = {
    "HalfCheetah-v5": {"solve_threshold": 3000.0},
    # Tasks that end when the robot falls: a longer horizon (gamma 0.99) values staying up, and 16 minibatches
    # give 4x the gradient steps per sample.
    "Hopper-v5": {**_LONGER_HORIZON, "solve_threshold": 2000.0},
    "Walker2d-v5": {**_LONGER_HORIZON, "solve_threshold": 2500.0},
    "Ant-v5": {**_LONGER_HORIZON, "solve_threshold": 2000.0},
    "Humanoid-v5": {**_LONGER_HORIZON, "solve_threshold": 1000.0},
    # Velocity tracking: no return threshold (the reward is a sum of per-second weighted terms), a step budget;
    # rsl_rl's short horizon of 24 steps over more worlds, 5 epochs, a little entropy.
    "Go1-Velocity-v0": {"num_envs": 128, "num_steps": 24, "learning_rate": 1e-3, "total_timesteps": 3_000_000,
                        "init_log_std": -0.5, "hidden_sizes": (128, 128), "eval_every": 50, "eval_episodes": 16,
                        "ppo": {**_LOCOMOTION["ppo"], "gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 5,
                                "ent_coef": 0.005}},
}

PRESETS: dict[str, dict] = {
    "RussianRoulette-v0": {
        "num_envs": 4096,
        "learning_rate": 1e-3,
        "min_updates": 150,
        "max_updates": 1000,
        "eval_every": 25,
        # Games last at most 10 actions, so future rewards need no discount.
        "ppo": {"gamma": 1.0, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 4, "ent_coef": 0.01},
    },
    "LeducHoldem-v0": {
        # Games of at most 8 actions with rewards in chips at the end: no discount, as for roulette.
        "num_envs": 1024,
        "learning_rate": 3e-4,
        "min_updates": 50,
        "max_updates": 500,
        "eval_every": 25,
        "eval_episodes": 8192,
        "final_eval_episodes": 16384,
        "ppo": {"gamma": 1.0, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 4, "ent_coef": 0.01},
    },
    "CartPole-v1": {
        **_CLASSIC, "num_envs": 64, "max_updates": 200, "solve_threshold": 475.0,
        "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 16, "ent_coef": 0.01},
    },
    "Acrobot-v1": {
        **_CLASSIC, "num_envs": 64, "max_updates": 300, "solve_threshold": -100.0,
        "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 16, "ent_coef": 0.01},
    },
    "Pendulum-v1": {
        # Pendulum's rewards reach -16 per step and its value scale is large: scaled rewards and normalised
        # observations, a short horizon (gamma 0.9) and 10 epochs, as RL-Zoo's tuned PPO does.
        **_CLASSIC, "num_envs": 64, "num_steps": 256, "max_updates": 200, "eval_every": 10,
        "solve_threshold": -200.0, "normalize_obs": True,
        "ppo": {"gamma": 0.9, "gae_lambda": 0.95, "update_epochs": 10, "num_minibatches": 16, "ent_coef": 0.0,
                "reward_scale": 0.1},
    },
    "MountainCar-v0": {
        **_CLASSIC, "num_envs": 128, "max_updates": 300, "eval_every": 10, "solve_threshold": -110.0,
        "normalize_obs": True,
        "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 16, "ent_coef": 0.01},
    },
    "MountainCarContinuous-v0": {
        **_CLASSIC, "num_envs": 64, "num_steps": 256, "max_updates": 200, "eval_every": 10,
        "solve_threshold": 90.0, "normalize_obs": True,
        "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 10, "num_minibatches": 16, "ent_coef": 0.0,
                "reward_scale": 0.1},
    },
    **{env_id: {**_LOCOMOTION, **extra} for env_id, extra in _LOCOMOTION_TASKS.items()},
}
"""Per-environment defaults over :class:`TrainConfig`'s; command-line flags override them."""

GYMNASIUM_DEFAULTS: dict = {**_CLASSIC, "num_envs": 16}
"""Defaults for a ``gym:`` id without a preset: a single-player task whose sub-environments step in Python on
the host, so a small batch (the global defaults are the roulette game's 4096 rows and 24,576 final episodes)."""


def preset_config(env_id: str) -> TrainConfig:
    """The default configuration for ``env_id`` (the global defaults for an id without a preset).

    ``gym:X`` takes ``X``'s preset when there is one: the same task, stepped by Gymnasium on the host; other
    ``gym:`` ids take :data:`GYMNASIUM_DEFAULTS`.
    """
    fallback = GYMNASIUM_DEFAULTS if env_id.startswith("gym:") else {}
    preset = dict(PRESETS.get(env_id, PRESETS.get(env_id.removeprefix("gym:"), fallback)))
    ppo = PPOConfig(**preset.pop("ppo", {}))
    return TrainConfig(env=env_id, ppo=ppo, **preset)
