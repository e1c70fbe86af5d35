"""Gymnasium's MuJoCo environments as references for :class:`~rl_gpu.envs.mujoco.base.MujocoEnv` tasks.

:func:`check_mujoco_parity` replays each row of a batch on one ``gymnasium.make(gym_id)`` environment: every
row keeps its own Gymnasium ``MjData`` (started as Gymnasium's ``reset`` does: ``mj_resetData``, then
``set_state`` with the row's start), so what a Gymnasium env reads from ``MjData`` before a step (body
positions for a velocity, left over from the previous step's last substep) is what that env would hold. Before
each step the row's ``qpos``/``qvel`` are copied in, both sides step with the same action, and observation,
reward, reward terms, termination and the next physics state are compared. With ``zero_warmstart`` (the
default) Gymnasium's solver warm-start is cleared before each step, which is what the engine does (each
control step's solve starts cold), so the two run the same floating-point operations; without it the row's
Gymnasium ``MjData`` keeps its own warm-start and the difference is the warm-start's effect on the solver's
answer.
Requires ``gymnasium[mujoco]``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from rl_gpu.envs.mujoco.base import MujocoEnv


@dataclass(frozen=True)
class MujocoParity:
    """Largest absolute differences over every compared row and step."""

    obs: float
    reward: float
    qpos: float
    qvel: float
    terminated_mismatches: int
    transitions: int
    obs_rel: float = 0.0
    """Largest observation difference relative to ``max(1, |Gymnasium's value|)`` (float32 rounding: 6e-8)."""
    terms: float = 0.0
    """Largest difference of a reward term from Gymnasium's ``info["reward_<term>"]`` (``healthy``:
    ``reward_survive``)."""
    terminations: int = 0
    """Transitions Gymnasium terminated."""

    @property
    def worst(self) -> float:
        return max(self.obs, self.reward, self.qpos, self.qvel, self.terms)


def make_gym_reference(gym_id: str, **kwargs):
    """``gymnasium.make(gym_id, **kwargs).unwrapped`` reset once (MuJoCo's compiler warnings silenced)."""
    import gymnasium

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gymnasium.make(gym_id, **kwargs).unwrapped
    env.reset(seed=0)
    return env


def check_mujoco_parity(env: MujocoEnv, gym_id: str, num_steps: int, *, zero_warmstart: bool = True,
                        action_scale: float = 1.0, seed: int = 0, **gym_kwargs) -> MujocoParity:
    """Step ``env`` (``autoreset`` on, every row at the start of an episode: built or reset) ``num_steps``
    times with uniform random actions (``action_scale`` times the control range, so values beyond it test
    clamping), replaying every row on Gymnasium (see the module); returns the largest differences. Reset
    observations are compared too; rows that finish are compared through ``final_obs``, then restarted on both
    sides."""
    import mujoco

    if not env.autoreset:
        raise ValueError("check_mujoco_parity needs an environment with autoreset on")
    if bool((env.state.episode_step != 0).any()):
        raise ValueError("check_mujoco_parity needs every row at the start of an episode (build or reset it)")
    gym = make_gym_reference(gym_id, **gym_kwargs)
    model, data = gym.model, gym.data
    lay = env.layout
    gen = torch.Generator().manual_seed(seed)
    low = torch.tensor(env.action_low, dtype=torch.float64)
    high = torch.tensor(env.action_high, dtype=torch.float64)
    errs = {"obs": 0.0, "obs_rel": 0.0, "reward": 0.0, "qpos": 0.0, "qvel": 0.0, "terms": 0.0}
    mismatches = transitions = terminations = 0
    info_keys = [f"reward_{'survive' if name == 'healthy' else name}" for name in env.reward_terms]
    rows = [mujoco.MjData(model) for _ in range(env.num_envs)]

    def note_obs(gym_obs: np.ndarray, ours: torch.Tensor) -> None:
        diff = np.abs(gym_obs - ours.double().cpu().numpy())
        errs["obs"] = max(errs["obs"], float(diff.max()))
        errs["obs_rel"] = max(errs["obs_rel"], float((diff / np.maximum(1.0, np.abs(gym_obs))).max()))

    def restart(i: int, physics: np.ndarray, obs: torch.Tensor) -> None:
        mujoco.mj_resetData(model, data)
        gym.set_state(physics[lay.qpos], physics[lay.qvel])
        note_obs(gym._get_obs(), obs)
        mujoco.mj_copyData(rows[i], model, data)

    first = env.observe()
    physics = env.state.inner.physics.cpu().numpy()
    for i in range(env.num_envs):
        restart(i, physics[i], first.obs[i])
    for _ in range(num_steps):
        physics = env.state.inner.physics.cpu().numpy().copy()
        u = torch.rand(env.num_envs, len(env.action_low), dtype=torch.float64, generator=gen)
        mid, half = (low + high) / 2, (high - low) / 2
        action = (mid + action_scale * half * (2 * u - 1)).float()
        result = env.step(action.to(env.device))
        ours_next = physics_after_step(env, result)
        ours_terms = env._step_terms.cpu().numpy()
        done = (result.terminated | result.truncated).cpu().numpy()
        restarted = env.state.inner.physics.cpu().numpy()
        for i in range(env.num_envs):
            mujoco.mj_copyData(data, model, rows[i])
            # Only the state is copied in: what the previous step left in MjData (kinematics, and the solver's
            # warm-start unless zeroed) stays the row's own, as in a Gymnasium env stepping on.
            data.qpos[:] = physics[i, lay.qpos]
            data.qvel[:] = physics[i, lay.qvel]
            if zero_warmstart:
                data.qacc_warmstart[:] = 0
            obs, reward, terminated, _, info = gym.step(action[i].double().numpy())
            note_obs(obs, result.final_obs[i])
            errs["reward"] = max(errs["reward"], abs(float(reward) - float(result.reward[i])))
            for k, key in enumerate(info_keys):
                if key in info:
                    errs["terms"] = max(errs["terms"], abs(float(info[key]) - float(ours_terms[i, k])))
            errs["qpos"] = max(errs["qpos"], float(np.abs(data.qpos - ours_next[i, lay.qpos]).max()))
            errs["qvel"] = max(errs["qvel"], float(np.abs(data.qvel - ours_next[i, lay.qvel]).max()))
            mismatches += bool(terminated) != bool(result.terminated[i])
            terminations += bool(terminated)
            transitions += 1
            if done[i]:
                restart(i, restarted[i], result.obs[i])
            else:
                mujoco.mj_copyData(rows[i], model, data)
    gym.close()
    return MujocoParity(**errs, terminated_mismatches=mismatches, transitions=transitions,
                        terminations=terminations)


def physics_after_step(env: MujocoEnv, result) -> np.ndarray:
    """``[N, nstate]`` physics each row reached in the step that produced ``result`` (before any reset): the
    engine's last output, kept by the environment."""
    return env.last_physics.cpu().numpy()
