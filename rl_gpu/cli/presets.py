"""Per-environment training defaults: the one place that says how each built-in environment is trained.
Command-line flags override them."""

from __future__ import annotations

from rl_gpu.algos.registry import algorithm_spec
from rl_gpu.training.config import DEFAULT_ENV, TrainConfig

__all__ = ["CUSTOM_DEFAULTS", "DEFAULT_ENV", "GYMNASIUM_DEFAULTS", "LM_PRESETS", "MULTI_AGENT_PRESETS",
           "OFF_POLICY_PRESETS", "PRESETS", "describe_custom_defaults", "has_preset", "preset_config"]

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
# Rough terrain: Go1's settings over a longer budget (the curriculum needs the flat gait first).
_LOCOMOTION_TASKS["Go1-Rough-v0"] = {**_LOCOMOTION_TASKS["Go1-Velocity-v0"], "total_timesteps": 20_000_000}

_MINATAR = {
    # PureJaxRL's MinAtar PPO (64 envs x 128 steps, 4 epochs of 8 minibatches, lr 5e-4 decayed to 0, entropy 0.01),
    # with MinAtar's network: the composed policy's CNN (one 3x3 conv of 16 channels) and one hidden layer of 128.
    # A budget sized for this CPU; MinAtar's own experiments run 5M frames.
    **_CLASSIC, "num_envs": 64, "num_steps": 128, "learning_rate": 5e-4, "anneal_lr": True, "hidden_sizes": (128,),
    "total_timesteps": 2_000_000, "max_updates": 1000, "min_updates": 1, "eval_every": 25, "eval_episodes": 32,
    "final_eval_episodes": 256,
    "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 8, "ent_coef": 0.01},
}

# MuJoCo Playground's PandaPickCube PPO: 2048 arms x 10 steps per update, 8 epochs of 32 minibatches, lr 1e-3,
# gamma 0.97, entropy 0.02, normalised observations, a 20M-step budget; here 8 epochs of 16 minibatches and
# 128-128 networks (Playground: a 4 x 32 policy, a 5 x 256 value; 256-256 networks with 32 minibatches are much
# slower on a CPU: benchmarks/learning.md). Evaluated on 100 fresh randomised episodes.
_PANDA = {
    "num_envs": 2048,
    "num_steps": 10,
    "learning_rate": 1e-3,
    "anneal_lr": True,
    "normalize_obs": True,
    "hidden_sizes": (128, 128),
    "min_updates": 1,
    "max_updates": 100_000,
    "total_timesteps": 20_000_000,
    "eval_every": 50,
    "eval_episodes": 64,
    "final_eval_episodes": 100,
    "consecutive_passes": 2,
    "deterministic_eval": True,
    "ppo": {"gamma": 0.97, "gae_lambda": 0.95, "update_epochs": 8, "num_minibatches": 16, "ent_coef": 0.02},
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
    "CartPoleNoVel-v1": {
        # CartPole's, with 4 minibatches: with --memory each is 16 whole environments' sequences.
        **_CLASSIC, "num_envs": 64, "max_updates": 200, "solve_threshold": 475.0,
        "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 4, "ent_coef": 0.01},
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
    "PendulumNoVel-v1": {
        # Pendulum's, with 32 environments and 4 minibatches (with --memory, 8 whole environments' sequences each):
        # twice the gradient steps per sample of 64 environments (RL-Zoo's ppo_lstm takes 4 x 1024 here); 16
        # environments got near -200 sooner but ended lower.
        **_CLASSIC, "num_envs": 32, "num_steps": 256, "max_updates": 200, "eval_every": 10,
        "solve_threshold": -200.0, "normalize_obs": True,
        "ppo": {"gamma": 0.9, "gae_lambda": 0.95, "update_epochs": 10, "num_minibatches": 4, "ent_coef": 0.0,
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
    # Playground's policy distribution too: a tanh-squashed Gaussian (its bounded entropy bonus; the plain Gaussian
    # with the same bonus grows wide and saturates at the bounds): 96/100 against 85/100 (benchmarks/learning.md).
    "PandaPickCube-v0": {**_PANDA, "policy": "tanh_gaussian"},
    # The quick arm task: the same settings for a 3M-step budget.
    "PandaReach-v0": {**_PANDA, "total_timesteps": 3_000_000, "eval_every": 25},
    **{env_id: _MINATAR for env_id in ("MinAtar-Breakout-v1", "MinAtar-SpaceInvaders-v1", "MinAtar-Asterix-v1",
                                       "MinAtar-Seaquest-v1")},
    # A game of Freeway lasts 2,500 steps: fewer evaluation episodes for the same cost.
    "MinAtar-Freeway-v1": {**_MINATAR, "eval_episodes": 8, "final_eval_episodes": 64},
}
"""Per-environment defaults over :class:`TrainConfig`'s; command-line flags override them."""

GYMNASIUM_DEFAULTS: dict = {**_CLASSIC, "num_envs": 16}
"""Defaults for a ``gym:`` id without a preset: a single-player task whose sub-environments step in Python on
the host, so a small batch (the global defaults are the roulette game's 4096 rows and 24,576 final episodes)."""

CUSTOM_DEFAULTS: dict = {
    **_CLASSIC, "num_envs": 256, "total_timesteps": 1_000_000, "max_updates": 500, "eval_every": 10,
    "final_eval_episodes": 256,
    "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 8, "ent_coef": 0.01},
}
"""Defaults for an environment of the user's own (``module:Class``, or an id registered outside rl_gpu): a small
task, 256 rows x 128 steps per update, a budget of a million steps and a few hundred evaluation episodes (the
global defaults are the roulette game's 4096 rows and 24,576 final episodes). Flags override them; ``rl-gpu
train`` prints them at the start."""


_VMAS = {
    # MAPPO / IPPO on VMAS, sized for a CPU: 128 worlds x 100 steps (one episode per world and update),
    # 8 epochs of 8 minibatches over every agent's decisions, no entropy bonus, a budget of 1M world steps.
    # BenchMARL's VMAS settings (600 worlds, 45 epochs of 4096-step minibatches, lr 5e-5, gamma 0.9) are sized
    # for a GPU: 45 epochs over 60,000 world steps per update.
    "num_envs": 128,
    "num_steps": 100,
    "learning_rate": 3e-4,
    "anneal_lr": True,
    "min_updates": 1,
    "max_updates": 100_000,
    "total_timesteps": 1_000_000,
    "eval_every": 10,
    "eval_episodes": 64,
    "final_eval_episodes": 256,
    "consecutive_passes": 2,
    "deterministic_eval": True,
    "ppo": {"gamma": 0.99, "gae_lambda": 0.95, "update_epochs": 8, "num_minibatches": 8, "ent_coef": 0.0},
}
_SEATS = {
    # A game's seats as agents (RussianRoulette-v0?seats_as_agents=1): self-play, the learner playing both seats;
    # continuing rollouts of 32 steps (several games per row), no discount (games are short and end by
    # themselves), a step budget, validations scored by exact exploitability of the sampled policy.
    "num_envs": 1024,
    "num_steps": 32,
    "learning_rate": 1e-3,
    "anneal_lr": True,
    "min_updates": 1,
    "max_updates": 100_000,
    "total_timesteps": 3_000_000,
    "eval_every": 10,
    "eval_episodes": 4096,
    "final_eval_episodes": 16384,
    "deterministic_eval": False,
    "ppo": {"gamma": 1.0, "gae_lambda": 0.95, "update_epochs": 4, "num_minibatches": 4, "ent_coef": 0.01},
}
MULTI_AGENT_PRESETS: dict[str, dict] = {
    # Keyed by scenario: the parameters in an id (vmas:navigation?n_agents=3) keep the scenario's preset.
    "vmas:navigation": _VMAS,
    "vmas:sampling": _VMAS,
    "vmas:balance": _VMAS,
    "vmas:transport": _VMAS,
    "RussianRoulette-v0": _SEATS,
    # Leduc's as its --self-play preset: a smaller step and ten times the entropy bonus.
    "LeducHoldem-v0": {**_SEATS, "learning_rate": 3e-4, "total_timesteps": 2_500_000, "eval_every": 20,
                       "eval_episodes": 2048, "final_eval_episodes": 8192, "ppo": {**_SEATS["ppo"], "ent_coef": 0.1}},
}
"""Defaults of ``--algo mappo`` and ``--algo ippo`` per multi-agent task; another multi-agent id takes
:data:`CUSTOM_DEFAULTS`."""


# Language-model policies on text tasks (rl_gpu.envs.text), per algorithm: a 4-block transformer of width 128,
# validated on the task's held-out validation problems (the same id with split=valid), greedy, by exact-match
# accuracy; `rl-gpu evaluate --env 'ID?split=test'` measures the test problems.
_TEXT = {"hidden_sizes": (128, 128, 128, 128), "anneal_lr": False, "min_updates": 1, "max_updates": 100_000,
         "eval_every": 25, "eval_episodes": 1000, "final_eval_episodes": 4000, "deterministic_eval": True}
LM_PRESETS: dict[str, dict[str, dict]] = {
    "Addition-v0": {
        "sft": {**_TEXT, "num_envs": 256, "learning_rate": 1e-3, "total_timesteps": 250_000},
        "grpo": {**_TEXT, "num_envs": 512, "learning_rate": 1e-4, "total_timesteps": 500_000, "eval_every": 10,
                 "grpo": {"group_size": 8}},
        "rlhf_ppo": {**_TEXT, "num_envs": 512, "learning_rate": 1e-4, "total_timesteps": 500_000, "eval_every": 10},
    },
}
"""Defaults of ``--algo sft``, ``grpo`` and ``rlhf_ppo`` per text task; validations play :func:`held_out`'s id."""


def held_out(env_id: str) -> str:
    """``env_id`` with ``split=valid`` among its parameters: the task's held-out validation problems."""
    base, _, query = env_id.partition("?")
    kept = [part for part in query.split("&") if part and not part.startswith("split=")]
    return f"{base}?{'&'.join([*kept, 'split=valid'])}"


def _scenario(env_id: str) -> str:
    for prefix in ("multitask:", "multitask-noid:"):  # several tasks: the first task's preset
        if env_id.startswith(prefix):
            first = env_id[len(prefix):].split("|")[0]
            return _scenario(first.rpartition("@")[0] if "@" in first else first)
    return env_id.partition("?")[0]


def has_preset(env_id: str, algo: str | None = None) -> bool:
    """Whether ``env_id`` (or, for ``gym:X``, ``X``; for ``vmas:X?k=v``, ``vmas:X``; for ``X?obs_mask=...``,
    ``X``) has defaults of its own in :data:`PRESETS` or :data:`MULTI_AGENT_PRESETS`, or (a text task) in
    :data:`LM_PRESETS` for ``algo`` (any of its algorithms when None)."""
    base = _scenario(env_id)
    if base in LM_PRESETS:
        return algo is None or algo in LM_PRESETS[base]
    return base in PRESETS or base.removeprefix("gym:") in PRESETS or base in MULTI_AGENT_PRESETS


def describe_custom_defaults(env_id: str) -> str:
    """The line ``rl-gpu train`` prints for an environment without a preset."""
    text = LM_PRESETS.get(_scenario(env_id))
    if text is not None:
        return (f"{env_id} has presets for --algo {', '.join(text)}; other algorithms take generic defaults "
                "(--policy transformer reads its tokens); flags override them")
    shown = ", ".join(f"--{k.replace('_', '-')} {CUSTOM_DEFAULTS[k]}" for k in (
        "num_envs", "num_steps", "total_timesteps", "eval_every", "eval_episodes", "final_eval_episodes"))
    return (f"{env_id} has no preset: generic defaults for a small task ({shown}; PPO gamma 0.99); "
            "flags override them")


_OFF_POLICY = {
    # SAC and TD3: iterations of 16 vector steps of 16 environments, each followed by 16 updates of 256
    # transitions (one update per 16 transitions), two 256-wide hidden layers, no learning-rate decay.
    "num_envs": 16,
    "num_steps": 16,
    "learning_rate": 1e-3,
    "anneal_lr": False,
    "hidden_sizes": (256, 256),
    "normalize_obs": False,
    "min_updates": 1,
    "max_updates": 100_000,
    "eval_every": 25,
    "eval_episodes": 16,
    "final_eval_episodes": 100,
    "consecutive_passes": 2,
    "checkpoint_every": 100,
    "deterministic_eval": True,
}
_TASK_KEYS = ("solve_threshold", "total_timesteps", "eval_episodes", "final_eval_episodes", "consecutive_passes",
              "deterministic_eval")
"""What an environment's (PPO) preset says about the task itself, which SAC and TD3 keep: its goal, budget and
evaluation."""

OFF_POLICY_PRESETS: dict[str, dict[str, dict]] = {
    "Pendulum-v1": {
        # A small task that needs few samples: 4 environments, two updates per transition after 500 random ones,
        # 64-wide networks (cheap updates; the task needs no more).
        "sac": {"num_envs": 4, "num_steps": 16, "hidden_sizes": (64, 64), "eval_every": 8, "max_updates": 2000,
                "sac": {"learning_starts": 500, "updates_per_step": 8.0}},
        "td3": {"num_envs": 4, "num_steps": 16, "hidden_sizes": (64, 64), "eval_every": 8, "max_updates": 2000,
                "td3": {"learning_starts": 500, "updates_per_step": 8.0}},
    },
    "MountainCarContinuous-v0": {
        # The reward needs a sustained push up the hill, which noise drawn afresh each step never gives (the
        # policy settles on standing still): exploration noise correlated over time (0.95 from one step to the
        # next), normalised observations, one update per two transitions.
        "sac": {"num_envs": 8, "num_steps": 32, "hidden_sizes": (64, 64), "normalize_obs": True, "eval_every": 20,
                "max_updates": 1000,
                "sac": {"learning_starts": 5000, "updates_per_step": 4.0, "noise_correlation": 0.95}},
        "td3": {"num_envs": 8, "num_steps": 32, "hidden_sizes": (64, 64), "normalize_obs": True, "eval_every": 20,
                "max_updates": 1000,
                "td3": {"learning_starts": 5000, "updates_per_step": 4.0, "noise_correlation": 0.95,
                        "exploration_noise": 0.5}},
    },
    **{env_id: {algo: {"num_envs": 4, "num_steps": 64, "learning_rate": 3e-4, "total_timesteps": 300_000,
                       "eval_every": 50, algo: {"learning_starts": 5000, "updates_per_step": 4.0}}
                for algo in ("sac", "td3")}
       for env_id in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5")},
}
"""Per-(environment, algorithm) defaults of SAC and TD3, over :data:`_OFF_POLICY` and the task keys of the
environment's preset; command-line flags override them."""

NEURD_PRESET = {
    # Full-width NeuRD (benchmarks/learning.md): a plain gradient step of 0.01 (0.03 left one seed of four stuck
    # near a pure policy), 10,000 iterations of about 10 ms, a validation (and OpenSpiel's exploitability) every
    # 500; the training environment is only the template of the game's tree, so it has one row.
    "num_envs": 1,
    "learning_rate": 0.01,
    "anneal_lr": False,
    "min_updates": 1,
    "max_updates": 10_000,
    "eval_every": 500,
    "checkpoint_every": 500,
    "log_every": 500,
    "eval_episodes": 4096,
    "final_eval_episodes": 16384,
}
"""NeuRD's settings (the evaluation keys of the environment's preset are kept: its games, its budget of games)."""

SELF_PLAY_PRESETS: dict[str, dict] = {
    # Self-play (--self-play) trains for a step budget (no validation passes, rl_gpu.training.goals) and
    # keeps the least exploitable validation; the learning rate decays over the budget.
    "RussianRoulette-v0": {"total_timesteps": 3_000_000, "anneal_lr": True, "max_updates": 100_000,
                           "eval_every": 10, "eval_episodes": 4096, "final_eval_episodes": 16384},
    # Leduc: twice the rows and ten times the entropy bonus of the PPO preset (without it the policy turns
    # nearly deterministic and exploitable), few games against uniform random (it is only the rating anchor).
    "LeducHoldem-v0": {"num_envs": 2048, "total_timesteps": 2_500_000, "max_updates": 100_000, "eval_every": 20,
                       "eval_episodes": 2048, "final_eval_episodes": 8192, "baseline_share": 0.05,
                       "ppo": {"ent_coef": 0.1}},
}
"""Per-environment settings over the PPO preset when training with ``--self-play``."""


def preset_config(env_id: str, algo: str = "ppo", self_play: bool = False) -> TrainConfig:
    """The default configuration for ``env_id`` trained by ``algo`` (the global defaults for an id without a
    preset).

    ``gym:X`` takes ``X``'s preset when there is one: the same task, stepped by Gymnasium on the host; other
    ``gym:`` ids take :data:`GYMNASIUM_DEFAULTS`; ``self_play`` adds :data:`SELF_PLAY_PRESETS` (PPO). SAC and
    TD3 take the task keys of the environment's preset (goal, budget, evaluation) under their own settings
    (:data:`OFF_POLICY_PRESETS`), NeuRD its validation sizes under :data:`NEURD_PRESET`, the multi-agent algorithms
    (MAPPO, IPPO) :data:`MULTI_AGENT_PRESETS` (else :data:`CUSTOM_DEFAULTS`), an algorithm whose spec names
    ``preset_of="ppo"`` (APPO, IMPALA) PPO's presets (its section, or the keys its spec names), and any other
    registered algorithm the task keys over the global defaults; an unknown ``algo`` is a ``UsageError`` (a
    ``ValueError``).
    """
    spec = algorithm_spec(algo)
    params = spec.config_class()
    text = LM_PRESETS.get(_scenario(env_id), {}).get(algo)
    if text is not None:
        preset = dict(text)
        return TrainConfig(env=env_id, algo=algo, algo_params=params(**preset.pop(algo, {})),
                           eval_env=held_out(env_id), **preset)
    if spec.agents:
        preset = dict(MULTI_AGENT_PRESETS.get(_scenario(env_id), CUSTOM_DEFAULTS))
        section = params(**preset.pop("ppo", {}))
        return TrainConfig(env=env_id, algo=algo, algo_params=section, self_play=self_play, **preset)
    fallback = GYMNASIUM_DEFAULTS if env_id.startswith("gym:") else CUSTOM_DEFAULTS
    base = _scenario(env_id)  # an observation-wrapped id (CartPole-v1?obs_mask=0,2) is the same task
    preset = dict(PRESETS.get(base, PRESETS.get(base.removeprefix("gym:"), fallback)))
    if algo == "ppo" or spec.preset_of == "ppo":
        if self_play and algo == "ppo":
            extra = dict(SELF_PLAY_PRESETS.get(base, {}))
            ppo_extra = extra.pop("ppo", {})
            preset.update(extra, self_play=True, ppo={**preset.get("ppo", {}), **ppo_extra})
        values = preset.pop("ppo", {})
        if spec.preset_section is not None:
            values = {k: v for k, v in values.items() if k in spec.preset_section}
        return TrainConfig(env=env_id, algo=algo, algo_params=params(**values), **preset)
    if algo == "neurd":
        evaluation = {k: preset[k] for k in ("eval_episodes", "final_eval_episodes") if k in preset}
        return TrainConfig(env=env_id, algo="neurd", self_play=self_play, **{**NEURD_PRESET, **evaluation})
    task = {k: preset[k] for k in _TASK_KEYS if k in preset}
    if algo not in ("sac", "td3"):
        return TrainConfig(env=env_id, algo=algo, self_play=self_play, **task)
    own = OFF_POLICY_PRESETS.get(base, OFF_POLICY_PRESETS.get(base.removeprefix("gym:"), {})).get(algo, {})
    merged = {**_OFF_POLICY, **task, **own}
    section = params(**merged.pop(algo, {}))
    return TrainConfig(env=env_id, algo=algo, algo_params=section, **merged)
