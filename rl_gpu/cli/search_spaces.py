"""Hyper-parameter search spaces of ``rl-gpu tune``, one per algorithm, starting from RL-Zoo's
(``rl_zoo3/hyperparams_opt.py``: ``sample_ppo_params``, ``sample_sac_params``, ``sample_td3_params``) with our
settings' names, and narrowed where RL-Zoo's range only wastes trials (a learning rate up to 1, a buffer smaller
than one episode).

Each space maps an Optuna trial to ``rl_gpu.train`` overrides (``TrainConfig`` fields and the algorithm's
hyper-parameters). Every choice keeps a run valid for any ``--num-envs`` that is a power of two (PPO's minibatch
counts divide ``num_envs * num_steps``; SAC's and TD3's updates per vector step times ``num_steps`` are whole).
"""

from __future__ import annotations

from collections.abc import Callable

NETS = {"small": (64, 64), "medium": (256, 256), "big": (400, 300)}
"""``hidden_sizes`` by name (RL-Zoo's ``net_arch``)."""
LEARNING_RATES = (1e-5, 1e-2)
"""PPO's learning-rate range (log-uniform)."""
CLIP_COEFS = [0.1, 0.2, 0.3, 0.4]
ENT_COEFS = (1e-8, 0.1)
"""PPO's entropy-coefficient range (log-uniform)."""


def ppo_space(trial, budget: int) -> dict:
    """PPO (also MAPPO and IPPO): RL-Zoo's PPO space without its orthogonal-init and activation choices."""
    return {
        "learning_rate": trial.suggest_float("learning_rate", *LEARNING_RATES, log=True),
        "num_steps": trial.suggest_categorical("num_steps", [16, 32, 64, 128, 256, 512]),
        "num_minibatches": trial.suggest_categorical("num_minibatches", [1, 2, 4, 8, 16, 32]),
        "update_epochs": trial.suggest_categorical("update_epochs", [1, 3, 5, 10, 20]),
        "gamma": trial.suggest_categorical("gamma", [0.9, 0.95, 0.98, 0.99, 0.995, 0.999]),
        "gae_lambda": trial.suggest_categorical("gae_lambda", [0.8, 0.9, 0.92, 0.95, 0.98, 0.99, 1.0]),
        "clip_coef": trial.suggest_categorical("clip_coef", CLIP_COEFS),
        "ent_coef": trial.suggest_float("ent_coef", *ENT_COEFS, log=True),
        "vf_coef": trial.suggest_float("vf_coef", 0.0, 1.0),
        "max_grad_norm": trial.suggest_categorical("max_grad_norm", [0.3, 0.5, 0.7, 0.9, 1.0, 2.0, 5.0]),
        "hidden_sizes": NETS[trial.suggest_categorical("net", ["small", "medium"])],
    }


def ppo_member_space(trial, budget: int) -> dict:
    """PPO trials run as one population (``rl-gpu tune --population K``): only what its members may differ in
    (:data:`rl_gpu.algos.population.ppo.HYPER_PARAMETERS`), from :func:`ppo_space`'s ranges; the rest is the
    preset's (and ``--fixed``)."""
    return {"learning_rate": trial.suggest_float("learning_rate", *LEARNING_RATES, log=True),
            "clip_coef": trial.suggest_categorical("clip_coef", CLIP_COEFS),
            "ent_coef": trial.suggest_float("ent_coef", *ENT_COEFS, log=True)}


def _off_policy(trial, budget: int) -> dict:
    # A warm-up of random actions longer than a fifth of the budget leaves too little to learn with.
    starts = [s for s in (0, 500, 1000, 5000, 10_000) if s <= budget // 5] or [0]
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 1e-2, log=True),
        "gamma": trial.suggest_categorical("gamma", [0.9, 0.95, 0.98, 0.99, 0.995, 0.999]),
        "tau": trial.suggest_categorical("tau", [0.001, 0.005, 0.01, 0.02, 0.05, 0.08]),
        "batch_size": trial.suggest_categorical("batch_size", [32, 64, 128, 256, 512]),
        "buffer_size": trial.suggest_categorical("buffer_size", [10_000, 100_000, 1_000_000]),
        "learning_starts": trial.suggest_categorical("learning_starts", starts),
        "updates_per_step": trial.suggest_categorical("updates_per_step", [1.0, 2.0, 4.0, 8.0]),
        "hidden_sizes": NETS[trial.suggest_categorical("net", ["small", "medium", "big"])],
    }


def sac_space(trial, budget: int) -> dict:
    """SAC: RL-Zoo's SAC space (its ``train_freq`` and ``gradient_steps`` as our updates per vector step)."""
    return _off_policy(trial, budget)


def td3_space(trial, budget: int) -> dict:
    """TD3: RL-Zoo's TD3 space (Gaussian action noise of a chosen scale)."""
    return {**_off_policy(trial, budget),
            "exploration_noise": trial.suggest_categorical("exploration_noise", [0.05, 0.1, 0.2, 0.3, 0.5])}


SPACES: dict[str, Callable] = {"ppo": ppo_space, "mappo": ppo_space, "ippo": ppo_space, "sac": sac_space,
                               "td3": td3_space}
"""algorithm -> its search space; ``rl-gpu tune`` refuses an algorithm without one."""
MEMBER_SPACES: dict[str, Callable] = {"ppo": ppo_member_space, "mappo": ppo_member_space, "ippo": ppo_member_space}
"""algorithm -> its space under ``--population`` (algorithms whose trials can run as one population)."""
