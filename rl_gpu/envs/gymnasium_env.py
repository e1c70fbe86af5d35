"""Any Gymnasium environment as a batch that rl_gpu's collector and trainer use: ``make("gym:<id>", ...)``.

The environments themselves run on the host through Gymnasium's vector API; what crosses to the device is one
packed float32 array per step (observation, pre-reset observation, reward, flags and episode statistics), so
the policy, the rollout and the update stay on the device. Actions come back with one device-to-host copy.

Gymnasium's ``TimeLimit`` sets ``truncated`` even when the last step also terminates; the rl_gpu contract
never sets both, and a terminal state must not be bootstrapped, so ``truncated`` here is ``truncated and not
terminated``.

Warnings from Gymnasium and the environments' libraries while sub-environments are built, reset and first
stepped (and MuJoCo's, which it prints from C, at any step) are shown once per process, not once per
sub-environment and evaluation: a training run builds its environments again for every evaluation.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rl_gpu.core.errors import UsageError
from rl_gpu.envs.params import split_id_parameters
from rl_gpu.runtime.host_workers import SlicedVectorEnv
from rl_gpu.core.types import EnvSpec, StepResult
from rl_gpu.envs.base import check_action_format
from rl_gpu.envs.dependency_warnings import warnings_once

try:
    import gymnasium
    from gymnasium import spaces
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    gymnasium = None

VECTORIZATION_MODES = ("sync", "async")
OBSERVATION_SPACES = "Box (cast to float32) or Discrete (one-hot)"
ACTION_SPACES = "Discrete or 1-D Box"


def _import_mujoco_first(env_id: str) -> None:
    """Load MuJoCo before a MuJoCo environment is built, so that its compiler's warnings reach
    :func:`~rl_gpu.envs.dependency_warnings.warnings_once` instead of each sub-environment printing them."""
    try:
        entry = gymnasium.spec(env_id).entry_point
    except Exception:  # an unknown id: make_vec reports it
        return
    if isinstance(entry, str) and "mujoco" in entry:
        with contextlib.suppress(ImportError):
            import mujoco  # noqa: F401


def _require_gymnasium() -> None:
    if gymnasium is None or not hasattr(gymnasium.vector, "AutoresetMode"):
        raise ImportError(
            "gym: environments need gymnasium >= 1.1 (pip install 'rl-gpu[gym]'); "
            f"found {getattr(gymnasium, '__version__', 'none')}"
        )


class GymnasiumEnv:
    """A Gymnasium environment id (or an existing Gymnasium ``VectorEnv``) behind the surface of
    :class:`~rl_gpu.envs.base.TensorEnv` that :func:`rl_gpu.rollout.collect` and the trainer use.

    Every :class:`~rl_gpu.envs.base.StepResult` field is a tensor on ``device`` with the contract's dtypes;
    finished rows are reset in the same step and ``final_obs`` keeps the observation they finished in. With an
    id the vector environment is built with ``autoreset_mode=SAME_STEP``; a given vector environment in
    ``NEXT_STEP`` or ``DISABLED`` mode is reset row-wise right after the step that finished a row (Gymnasium's
    ``reset_mask``), which gives the same transitions as ``SAME_STEP``.

    Observation spaces: ``Box`` (cast to float32) and ``Discrete`` (one-hot). Action spaces: ``Discrete`` and
    1-D ``Box``. Other spaces, and ids Gymnasium cannot make (unknown, a dependency missing), raise
    :class:`~rl_gpu.core.errors.UsageError` (a ``ValueError``) in one line saying what is allowed.

    Legal actions: an environment that reports ``info["action_mask"]`` (Gymnasium's convention, e.g.
    ``Taxi-v4``; 1 = legal) gets that mask as ``action_mask``, rows without one are all legal, and with
    ``validate_actions`` an illegal action is refused; otherwise every action is legal.

    Args:
        env: a Gymnasium id such as ``"CartPole-v1"``, or a ``gymnasium.vector.VectorEnv``.
        num_envs: N (an id only; a vector environment brings its own).
        device: where the tensors go.
        seed: seeds the first reset (sub-environment ``i`` gets ``seed + i``, as Gymnasium does).
        max_episode_steps: replaces the id's time limit (an id only).
        vectorization_mode: ``"sync"`` (default: on a few cores the sub-process round trips of ``"async"``
            cost more than they save for cheap environments) or ``"async"`` (Gymnasium's worker processes, one per
            sub-environment, observations in shared memory). An id may carry it and the constructor's keyword
            arguments after ``?``: ``"HalfCheetah-v5?vectorization_mode=async&ctrl_cost_weight=0.2"``.
        workers: step the rows in this many worker processes, each a slice of them, through shared memory, a
            crashed worker restarted (:class:`~rl_gpu.runtime.host_workers.SlicedVectorEnv`; ``?workers=K`` in
            the id); None: in this process (or as ``vectorization_mode`` says).
        clip_actions: clip continuous actions to the action space's bounds before stepping, as Gymnasium's
            ``ClipAction`` does (the rl_gpu contract: environments accept out-of-bounds actions).
        validate_actions: check action ranges (and NaN) on the host copy of the actions.
        **env_kwargs: passed to the environment's constructor (``gymnasium.make_vec``).
    """

    num_players = 1

    def __init__(
        self,
        env: str | VectorEnv,
        num_envs: int | None = None,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        *,
        max_episode_steps: int | None = None,
        vectorization_mode: str = "sync",
        workers: int | None = None,
        clip_actions: bool = True,
        validate_actions: bool = True,
        **env_kwargs: Any,
    ) -> None:
        _require_gymnasium()
        if isinstance(env, str):
            label = env
            if "?" in env:
                # Settings written in the id (gym:HalfCheetah-v5?vectorization_mode=async&ctrl_cost_weight=0.2), so a
                # checkpoint's id rebuilds the same batch; keyword arguments given as well take precedence.
                env, written = split_id_parameters("gym:", env)
                vectorization_mode = written.pop("vectorization_mode", vectorization_mode)
                workers = written.pop("workers", workers)
                env_kwargs = {**written, **env_kwargs}
            if num_envs is None:
                num_envs = 1
            if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs <= 0:
                raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
            if vectorization_mode not in VECTORIZATION_MODES:
                raise UsageError(
                    f"gym:{label}: vectorization_mode must be one of {VECTORIZATION_MODES}, got {vectorization_mode!r}"
                )
            if max_episode_steps is not None:
                env_kwargs["max_episode_steps"] = max_episode_steps
            _import_mujoco_first(env)
            try:
                with warnings_once(python=True):
                    if workers is not None:
                        if vectorization_mode != "sync":
                            raise UsageError(f"gym:{label}: workers and vectorization_mode={vectorization_mode} "
                                             "are two ways of stepping in other processes: give one")
                        vec = SlicedVectorEnv(env, num_envs, workers, env_kwargs)
                    else:
                        vec = gymnasium.make_vec(
                            env, num_envs, vectorization_mode=vectorization_mode,
                            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}, **env_kwargs,
                        )
            except gymnasium.error.Error as e:
                # NameNotFound, VersionNotFound, DependencyNotInstalled (Box2D, MuJoCo...): one line each.
                raise UsageError(f"gym:{env}: Gymnasium cannot make it: {' '.join(str(e).split())} (gym:<id> "
                                 "takes any id registered with Gymnasium whose dependencies are installed; "
                                 "gymnasium.pprint_registry() lists them)") from None
            self.env_id = label
            self._owns_vec, self._label = True, f"gym:{label}"
        elif isinstance(env, VectorEnv):
            if env_kwargs or max_episode_steps is not None:
                raise ValueError(
                    "max_episode_steps and environment arguments apply to an id, not to a built VectorEnv"
                )
            if num_envs is not None and num_envs != env.num_envs:
                raise ValueError(f"num_envs={num_envs} but the VectorEnv has {env.num_envs}")
            vec = env
            self.env_id = getattr(env.spec, "id", None) or type(env.unwrapped).__name__
            self._owns_vec, self._label = False, self.env_id
        else:
            raise TypeError(
                f"env must be a Gymnasium id or a gymnasium.vector.VectorEnv, got {type(env).__name__}"
            )
        self.vec = vec
        try:
            self._set_up(vec, device, max_episode_steps, clip_actions, validate_actions, seed)
        except BaseException:
            if self._owns_vec:
                vec.close()
            raise

    def _set_up(self, vec: VectorEnv, device: str | torch.device, max_episode_steps: int | None,
                clip_actions: bool, validate_actions: bool, seed: int | None) -> None:
        """Everything after the vector environment exists (``__init__`` closes one it built if this fails)."""
        self.num_envs = vec.num_envs
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.clip_actions = clip_actions
        self.validate_actions = validate_actions
        self.autoreset_mode = vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if self.autoreset_mode != AutoresetMode.SAME_STEP and not isinstance(
            vec.unwrapped, (SyncVectorEnv, AsyncVectorEnv)
        ):
            raise ValueError(
                f"{type(vec.unwrapped).__name__} uses autoreset mode {self.autoreset_mode}: rows can only be "
                "reset in the step that finishes them with AutoresetMode.SAME_STEP or a Sync/AsyncVectorEnv"
            )
        spec = getattr(vec, "spec", None)
        self.max_episode_steps: int | None = (
            max_episode_steps if max_episode_steps is not None else getattr(spec, "max_episode_steps", None)
        )
        self._init_spaces(vec.single_observation_space, vec.single_action_space)
        n = self.num_envs
        self._mask = torch.ones(n, self.num_actions, dtype=torch.bool, device=self.device)
        self._host_mask: np.ndarray | None = None
        self._player = torch.zeros(n, dtype=torch.long, device=self.device)
        self._return = np.zeros(n, dtype=np.float64)
        self._length = np.zeros(n, dtype=np.int64)
        self._last: StepResult | None = None
        self._checked_step = False
        self.reset(seed)

    def _init_spaces(self, obs_space: Any, action_space: Any) -> None:
        if isinstance(obs_space, spaces.Box):
            self.obs_shape: tuple[int, ...] = tuple(int(d) for d in obs_space.shape)
            self.obs_low = tuple(float(v) for v in np.asarray(obs_space.low, dtype=np.float64).ravel())
            self.obs_high = tuple(float(v) for v in np.asarray(obs_space.high, dtype=np.float64).ravel())
            self._one_hot = 0
        elif isinstance(obs_space, spaces.Discrete):
            self.obs_shape = (int(obs_space.n),)
            self.obs_low, self.obs_high = (0.0,) * obs_space.n, (1.0,) * obs_space.n
            self._one_hot = int(obs_space.n)
            self._obs_start = int(obs_space.start)
        else:
            raise UsageError(
                f"{self._label}: observation space {obs_space} is not supported: allowed are "
                f"{OBSERVATION_SPACES} (gymnasium.wrappers.FlattenObservation makes a Box of Tuple and Dict)"
            )
        self._obs_size = math.prod(self.obs_shape)
        if isinstance(action_space, spaces.Discrete):
            self.num_actions = int(action_space.n)
            self.action_shape: tuple[int, ...] = ()
            self.action_low: tuple[float, ...] = ()
            self.action_high: tuple[float, ...] = ()
            self._action_start = int(action_space.start)
        elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
            self.num_actions = 0
            self.action_shape = tuple(int(d) for d in action_space.shape)
            self.action_low = tuple(float(v) for v in action_space.low)
            self.action_high = tuple(float(v) for v in action_space.high)
            self._action_dtype = action_space.dtype
        else:
            raise UsageError(
                f"{self._label}: action space {action_space} is not supported: allowed are "
                f"{ACTION_SPACES}"
            )

    @property
    def is_continuous(self) -> bool:
        """True when actions are ``[N, D]`` float vectors rather than ``[N]`` integer indices."""
        return len(self.action_shape) > 0

    @property
    def reward_shape(self) -> tuple[int, ...]:
        """``(N,)``: one player."""
        return (self.num_envs,)

    @property
    def spec(self) -> EnvSpec:
        """The batch as the layers above see it: host-stepped (not functional), not exactly resumable (the
        sub-environments' state lives in Python objects)."""
        return EnvSpec(
            obs_shape=self.obs_shape, num_actions=self.num_actions, action_shape=self.action_shape,
            action_low=self.action_low, action_high=self.action_high, obs_low=self.obs_low,
            obs_high=self.obs_high, max_episode_steps=self.max_episode_steps,
            episode_horizon=self.max_episode_steps, has_action_mask=self._host_mask is not None,
            functional=False, exact_resume=False,
        )

    def state_dict(self) -> dict[str, Any]:
        """Nothing: Gymnasium keeps its state in Python objects, which a weights-only checkpoint cannot hold
        (``spec.exact_resume`` is False)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restart every row with a fresh reset (the saved state cannot be restored; see :meth:`state_dict`)."""
        self.reset()

    def _flat_obs(self, obs: np.ndarray) -> np.ndarray:
        """``[N, prod(O)]`` float32 observations (one-hot for ``Discrete`` spaces)."""
        if self._one_hot:
            return np.eye(self._one_hot, dtype=np.float32)[np.asarray(obs).astype(np.int64) - self._obs_start]
        return np.asarray(obs, dtype=np.float32).reshape(self.num_envs, self._obs_size)

    def _read_mask(self, infos: dict, rows: np.ndarray | None = None) -> None:
        """Take ``infos["action_mask"]`` (``[N, A]``, 1 = legal) for ``rows`` (default: every row that has
        one); keep nothing when the environment reports no masks."""
        if self.is_continuous or "action_mask" not in infos:
            return
        if self._host_mask is None:
            self._host_mask = np.ones((self.num_envs, self.num_actions), dtype=bool)
        present = np.asarray(infos.get("_action_mask", np.ones(self.num_envs, dtype=bool)), dtype=bool)
        if rows is not None:
            present = present & rows
        reported = np.asarray(infos["action_mask"])
        if reported.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"{self.env_id}: info['action_mask'] has shape {reported.shape}, expected "
                             f"{(self.num_envs, self.num_actions)}")
        self._host_mask[present] = reported[present].astype(bool)
        empty = ~self._host_mask.any(axis=1)
        if empty.any():
            raise ValueError(f"{self.env_id}: env {int(empty.argmax())} reported no legal action in "
                             "info['action_mask']")

    def _read_info(self, infos: dict, done: np.ndarray) -> None:
        """A subclass's look at each step's ``infos`` (``done``: ``[N]`` rows that finished; in SAME_STEP mode
        their infos are their resets', their last step's are ``infos["final_info"]``). Default: nothing."""

    def _transfer(
        self, obs: np.ndarray, final_obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
        truncated: np.ndarray, episode_return: np.ndarray, episode_length: np.ndarray,
    ) -> StepResult:
        """Pack every field into one flat float32 array, copy it to the device once and slice it there.

        Each field is a contiguous segment, so the slices are contiguous views. Episode lengths travel as
        float32, exact below 2**24 steps; a reported action mask travels as 0/1.
        """
        n, o = self.num_envs, self._obs_size
        scalars = np.stack([reward, terminated, truncated, episode_return, episode_length]).astype(np.float32)
        parts = [self._flat_obs(obs).ravel(), self._flat_obs(final_obs).ravel(), scalars.ravel()]
        if self._host_mask is not None:
            parts.append(self._host_mask.astype(np.float32).ravel())
        packed = torch.from_numpy(np.concatenate(parts)).to(self.device)
        scalars = packed[2 * n * o: 2 * n * o + 5 * n].view(5, n)
        mask = self._mask if self._host_mask is None else packed[2 * n * o + 5 * n:].view(n, -1).bool()
        return StepResult(
            obs=packed[: n * o].view(n, *self.obs_shape),
            reward=scalars[0],
            terminated=scalars[1].bool(),
            truncated=scalars[2].bool(),
            final_obs=packed[n * o: 2 * n * o].view(n, *self.obs_shape),
            action_mask=mask,
            current_player=self._player,
            episode_return=scalars[3],
            episode_length=scalars[4].long(),
        )

    def reset(self, seed: int | None = None) -> StepResult:
        """Start a new episode in every row (sub-environment ``i`` seeded with ``seed + i`` when given)."""
        with warnings_once(python=True):
            obs, infos = self.vec.reset(seed=seed)
        self._checked_step = False
        self._raw_obs = np.array(obs, copy=True)
        self._host_mask = None
        self._read_mask(infos)
        self._return[:] = 0.0
        self._length[:] = 0
        no = np.zeros(self.num_envs, dtype=bool)
        self._last = self._transfer(obs, obs, np.zeros(self.num_envs), no, no, self._return, self._length)
        return self._last

    def reset_rows(self, rows: Tensor) -> StepResult:
        """Start a new episode in the rows where ``rows`` (``[N]`` bool) is True (Gymnasium's ``reset_mask``)."""
        mask = rows.detach().to("cpu", torch.bool).numpy().reshape(self.num_envs).copy()
        if not mask.any():
            return self.observe()
        with warnings_once(python=True):
            reset_obs, infos = self.vec.reset(options={"reset_mask": mask})
        self._read_mask(infos, mask)
        host = np.array(self._raw_obs, copy=True)
        host[mask] = np.asarray(reset_obs)[mask]
        self._raw_obs = host
        self._return[mask] = 0.0
        self._length[mask] = 0
        no = np.zeros(self.num_envs, dtype=bool)
        self._last = self._transfer(host, host, np.zeros(self.num_envs), no, no, self._return, self._length)
        return self._last

    def observe(self) -> StepResult:
        """The current observations as a zero-reward :class:`StepResult` (no transition, no copy).

        As in every result, ``episode_return`` and ``episode_length`` mean something only where a row is done,
        and here none is.
        """
        last = self._last
        no = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return last._replace(
            reward=torch.zeros_like(last.reward), terminated=no, truncated=no, final_obs=last.obs
        )

    def _host_action(self, action: Tensor) -> np.ndarray:
        check_action_format(action, self.num_envs, self.action_shape, self.device)
        if self.is_continuous:
            host = action.detach().cpu().numpy()
            if self.validate_actions and not np.isfinite(host).all():
                raise ValueError("action contains NaN or inf")
            if self.clip_actions:
                host = np.clip(host, self.action_low, self.action_high)
            return host.astype(self._action_dtype, copy=False)
        host = action.detach().cpu().numpy().astype(np.int64)
        if self.validate_actions:
            bad = (host < 0) | (host >= self.num_actions)
            if bad.any():
                row = int(bad.argmax())
                raise ValueError(f"action out of range in env {row}: {int(host[row])} "
                                 f"(allowed 0..{self.num_actions - 1})")
            if self._host_mask is not None:
                illegal = ~self._host_mask[np.arange(self.num_envs), host]
                if illegal.any():
                    row = int(illegal.argmax())
                    raise ValueError(f"illegal action in env {row}: {int(host[row])} (legal: "
                                     f"{np.flatnonzero(self._host_mask[row]).tolist()})")
        return host + self._action_start

    def step(self, action: Tensor) -> StepResult:
        """Advance every row by one action; finished rows restart in the same call."""
        host_action = self._host_action(action)
        with warnings_once(python=not self._checked_step):
            obs, reward, terminated, truncated, infos = self.vec.step(host_action)
        self._checked_step = True
        # SAME_STEP: a finished row's info is its reset's, matching the observation returned.
        self._read_mask(infos)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool) & ~terminated
        done = terminated | truncated
        self._read_info(infos, done)
        reward = np.asarray(reward, dtype=np.float64)
        self._return += reward
        self._length += 1
        episode_return, episode_length = self._return.copy(), self._length.copy()
        final_obs = obs
        if done.any():
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                final_obs = np.array(obs, copy=True)
                finished = infos.get("_final_obs", done)
                for i in np.flatnonzero(finished):
                    final_obs[i] = infos["final_obs"][i]
            else:
                # NEXT_STEP / DISABLED: ``obs`` is where the rows finished; reset just those rows now.
                final_obs = np.array(obs, copy=True)
                with warnings_once(python=True):
                    reset_obs, reset_infos = self.vec.reset(options={"reset_mask": done.copy()})
                self._read_mask(reset_infos, done)
                obs = np.array(obs, copy=True)
                obs[done] = np.asarray(reset_obs)[done]
            self._return[done] = 0.0
            self._length[done] = 0
        self._raw_obs = np.array(obs, copy=True)
        self._last = self._transfer(
            obs, final_obs, reward, terminated, truncated, episode_return, episode_length
        )
        return self._last

    def close(self) -> None:
        """Close the Gymnasium vector environment (and its worker processes in ``async`` mode)."""
        self.vec.close()

    def __enter__(self) -> GymnasiumEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GymnasiumEnv({self.env_id!r}, num_envs={self.num_envs}, device={str(self.device)!r})"
