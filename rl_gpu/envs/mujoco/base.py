"""The MuJoCo task template: the engine holds the physics; the task is pure torch over ``[N, ...]`` tensors.

A task subclass of :class:`MujocoEnv` names its MJCF (:meth:`MujocoEnv.model_path`) and ``frame_skip`` and writes:

- ``_reset_physics(n, generator)``: ``[n, nq]`` qpos and ``[n, nv]`` qvel of fresh episode starts,
- ``_observe(inner)``: the observation (from ``qpos``/``qvel``/``observed`` of :class:`MjInner`),
- ``_rewards(before, after, action)``: ``({term: [N] float}, terminated [N] bool)``; the reward is the sum of
  the terms, and each term's per-episode sum is kept (:meth:`MujocoEnv.reward_term_stats`) so a user tuning a
  reward sees what each term does,
- optionally ``_control(inner, action)`` (default: the action is the control), ``_reset_task``/``_next_task``
  (commands, timers in ``inner.task``) and ``_perturb`` (pushes).

The base (:class:`~rl_gpu.envs.base.TensorEnv`) owns auto-reset with ``final_obs``, the time limit, statistics
and state injection; the physics state is a tensor, so resets are ``torch.where`` and resume is exact. The
engine is host code (``spec.functional`` is False): collection runs eagerly around it.
"""

from __future__ import annotations

import abc
import math
import os
import re
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

from rl_gpu.core.types import EnvSpec
from rl_gpu.envs.base import EnvState, TensorEnv
from rl_gpu.envs.dependency_warnings import warnings_once
from rl_gpu.envs.mujoco.engine import MujocoEngine, require_mujoco
from rl_gpu.envs.mujoco.randomization import Randomization, build_variants, draw_scales
from rl_gpu.envs.mujoco.warp_engine import WarpEngine
from rl_gpu.envs.params import check_num_envs

try:
    import mujoco
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    mujoco = None


_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def check_task_params(params: Any) -> None:
    """Refuse, in one line naming the field, a task parameter that is not a number where its default is one, a
    NaN (one NaN weight turns every reward NaN) and a negative noise scale. Infinities are allowed: Gymnasium's
    healthy ranges use them."""
    for f in fields(params):
        value, default = getattr(params, f.name), f.default
        if isinstance(default, bool) or not isinstance(default, (int, float, tuple)):
            continue
        numbers = value if isinstance(value, tuple) and isinstance(default, tuple) else (value,)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) for v in numbers):
            raise ValueError(f"{f.name} must be {'numbers' if isinstance(default, tuple) else 'a number'} (not "
                             f"NaN), got {value!r}")
        if "noise" in f.name and any(v < 0 for v in numbers):
            raise ValueError(f"{f.name} must be >= 0, got {value!r}")


class MjInner(NamedTuple):
    """Inner state of N MuJoCo worlds (every field ``[N, ...]``)."""

    physics: Tensor
    """``[N, nstate]`` float64 ``mjSTATE_FULLPHYSICS``: time, qpos, qvel, act, plugin state."""
    variant: Tensor
    """``[N]`` int64: the row's model in the pool (domain randomisation; 0 without)."""
    observed: Tensor
    """``[N, nsensordata + D]`` float64: sensor values then the engine's derived fields after the last step."""
    task: Tensor
    """``[N, T]`` float64: the task's own state (commands, timers); ``T`` may be 0."""


_TOTAL_MASS = re.compile(r'\s+settotalmass\s*=\s*"([^"]*)"')


def compile_mjcf(path: str):
    """``MjModel`` of the MJCF file at ``path``. A ``<compiler settotalmass="M">`` (Gymnasium's HalfCheetah), which
    MuJoCo deprecated, is applied the way its deprecation says instead: compiled without it, then
    ``mj_setTotalmass`` and ``mj_setConst`` on the compiled model (the same masses, inertias and derived constants
    to the last bit; tests/envs/mujoco check it)."""
    text = Path(path).read_text()
    match = _TOTAL_MASS.search(text)
    if match is None:
        return mujoco.MjModel.from_xml_path(path)
    model = mujoco.MjModel.from_xml_string(_TOTAL_MASS.sub("", text, count=1))
    mujoco.mj_setTotalmass(model, float(match.group(1)))
    mujoco.mj_setConst(model, mujoco.MjData(model))
    return model


def check_worlds_fit(model, num_envs: int, num_variants: int, name: str) -> None:
    """Refuse, before allocating, ``num_envs`` worlds (and ``num_variants`` model copies) whose MuJoCo buffers
    alone (``nbuffer`` bytes each) would exceed this machine's memory."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # no sysconf: nothing to compare against
        return
    need = (num_envs + num_variants) * int(model.nbuffer)
    if need > memory:
        raise ValueError(f"{name}: {num_envs:,} worlds" + (f" and {num_variants:,} model variants" if num_variants
                                                           else "")
                         + f" need at least {need / 2**30:,.1f} GiB of MuJoCo buffers, more than the "
                         f"{memory / 2**30:,.1f} GiB of memory here; lower num_envs"
                         + (" or num_variants" if num_variants else ""))


class MujocoEnv(TensorEnv[MjInner]):
    """N worlds of one MJCF on MuJoCo's C engine (:class:`~rl_gpu.envs.mujoco.engine.MujocoEngine`) or on
    MuJoCo Warp (:class:`~rl_gpu.envs.mujoco.warp_engine.WarpEngine`).

    Args:
        num_envs, device, seed, autoreset, validate_actions: as :class:`~rl_gpu.envs.base.TensorEnv`.
        num_threads: the engine's worker threads (None: every core this process may use).
        randomization: per-row physics ranges (:class:`~rl_gpu.envs.mujoco.randomization.Randomization`);
            None: the MJCF's nominal physics.
        backend: ``"mujoco"``, MuJoCo's C engine on the CPU (a pool of K models for randomisation), or
            ``"mujoco-warp"``, MuJoCo Warp in float32 on ``device`` (a GPU; the CPU for tests), the K variants'
            parameters as per-world model fields (the ``mujoco-warp`` extra).
        **params: fields of the task's :attr:`params_type`.
    """

    frame_skip: int = 1
    derived_fields: tuple[tuple[str, int], ...] = ()
    """``(MjData attribute, first row)`` pairs the observation or reward reads (see the engine)."""
    reset_forward: bool = False
    """True when episode starts need a forward pass (the reset observation reads derived fields or sensors)."""
    task_size: int = 0
    """T, the width of ``inner.task``."""
    reward_terms: tuple[str, ...] = ()
    """Names of the terms :meth:`_rewards` returns, in order."""
    object_geoms: tuple[str, ...] = ()
    """Names of the geoms ``randomization.object_size`` resizes (the task's objects; none: it is refused)."""

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, *,
                 num_threads: int | None = None, randomization: Randomization | dict | None = None,
                 backend: Literal["mujoco", "mujoco-warp"] = "mujoco", **kwargs: Any) -> None:
        require_mujoco()
        if backend not in ("mujoco", "mujoco-warp"):
            raise ValueError(f"backend must be 'mujoco' or 'mujoco-warp', got {backend!r}")
        self.backend = backend
        if isinstance(randomization, dict):
            randomization = Randomization(**randomization)
        if randomization is not None and not isinstance(randomization, Randomization):
            raise TypeError(f"randomization must be a Randomization or a dict of its fields, got "
                            f"{type(randomization).__name__}")
        self.randomization = randomization
        num_envs = check_num_envs(num_envs)
        self.model = self.load_model()
        self._object_geoms = self._resolve_objects(randomization, backend)
        check_worlds_fit(self.model, num_envs, randomization.num_variants if randomization is not None else 0,
                         type(self).__name__)
        self._pool_seed = int(torch.randint(0, 2**62, (1,)).item()) if seed is None else int(seed)
        scales = None
        if randomization is not None and randomization.active:
            scales = draw_scales(self.model, randomization, self._pool_seed)
        self._engine_args = (num_envs, num_threads, device)
        self._build_engine(scales)
        self.layout = self.engine.layout
        self.dt = self.engine.dt
        self.init_qpos = torch.tensor(self.model.qpos0, dtype=torch.float64)
        self.init_qvel = torch.zeros(self.model.nv, dtype=torch.float64)
        if tuple(self.action_shape) != (self.model.nu,):
            raise TypeError(f"{type(self).__name__}.action_shape is {tuple(self.action_shape)}, its model has "
                            f"{self.model.nu} actuators: declare action_shape = ({self.model.nu},)")
        low, high = self.model.actuator_ctrlrange.T.astype(np.float32)
        self.action_low, self.action_high = tuple(map(float, low)), tuple(map(float, high))
        self._term_sums: Tensor | None = None
        super().__init__(num_envs, device, seed, **kwargs)
        self.init_qpos, self.init_qvel = self.init_qpos.to(self.device), self.init_qvel.to(self.device)
        self._term_sums = torch.zeros(num_envs, len(self.reward_terms), dtype=torch.float64, device=self.device)
        self._finished_terms = torch.zeros(len(self.reward_terms), dtype=torch.float64, device=self.device)
        self._finished_episodes = torch.zeros((), dtype=torch.float64, device=self.device)

    def _build_engine(self, scales: dict[str, np.ndarray] | None) -> None:
        """(Re)build the engine for the variant pool ``scales`` (None: the nominal model alone)."""
        num_envs, num_threads, device = self._engine_args
        self.variant_scales = scales
        self._object_scale_table = None
        models = [self.model]
        if scales is not None and self.backend == "mujoco":
            models = build_variants(self.model, scales, self._object_geoms)
        old = getattr(self, "engine", None)
        if self.backend == "mujoco-warp":
            self.engine = WarpEngine(models, num_envs, self.frame_skip, num_threads, self.derived_fields,
                                     scales=scales, device=device)
        else:
            self.engine = MujocoEngine(models, num_envs, self.frame_skip, num_threads, self.derived_fields)
        if old is not None:
            old.close()

    def _resolve_objects(self, randomization: Randomization | None, backend: str) -> tuple[int, ...]:
        """The geom ids of :attr:`object_geoms` when ``randomization`` resizes objects (else none), or a
        ``ValueError`` where it cannot."""
        if randomization is None or randomization.object_size is None:
            return ()
        name = type(self).__name__
        if not self.object_geoms:
            raise ValueError(f"{name} names no objects (object_geoms) whose size randomization.object_size could scale")
        if backend != "mujoco":
            raise ValueError(f"randomization.object_size resizes geoms of the CPU engine's model variants; the "
                             f"{backend} backend does not take it")
        return tuple(int(self.model.geom(g).id) for g in self.object_geoms)

    def object_scale(self, variant: Tensor) -> Tensor | None:
        """``[N]`` float64 size scale of the objects in each row's model variant (None: objects not resized)."""
        scales = self.variant_scales
        if scales is None or "object_size" not in scales:
            return None
        table = self._object_scale_table
        if table is None or table.device != variant.device:
            table = self._object_scale_table = torch.from_numpy(scales["object_size"][:, 0].copy()).to(variant.device)
        return table[variant]

    def _fit_to_variant(self, qpos: Tensor, variant: Tensor) -> Tensor:
        """Episode starts: ``[N, nq]`` positions adjusted to each row's model variant (a resized object set on the
        floor); the base leaves them as drawn."""
        return qpos

    def _check_params(self) -> None:
        """The task's own checks (its ranges may be unbounded: ``healthy_z_range = (0.7, inf)``)."""
        check_task_params(self.params)

    @classmethod
    @abc.abstractmethod
    def model_path(cls) -> str:
        """Path of the task's MJCF file."""

    def load_model(self):
        """The compiled nominal model (override to edit the MJCF first). Any compiler warning is shown once per
        process, not once per build (:func:`compile_mjcf` already avoids the deprecated ``settotalmass``)."""
        with warnings_once(python=False):
            return self._compile_model()

    def _compile_model(self):
        """The task's MJCF compiled (override to build the model another way, as a generated terrain)."""
        return compile_mjcf(self.model_path())

    @property
    def spec(self) -> EnvSpec:
        return replace(super().spec, functional=False, reward_terms=tuple(self.reward_terms))

    # --- what a task writes -------------------------------------------------------------------------------

    @abc.abstractmethod
    def _reset_physics(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``([n, nq] qpos, [n, nv] qvel)`` float64 of fresh episode starts on ``self.device``."""

    @abc.abstractmethod
    def _rewards(self, before: MjInner, after: MjInner, action: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """``({name: [N] float64 term} in :attr:`reward_terms` order, terminated [N] bool)``."""

    def _control(self, inner: MjInner, action: Tensor) -> Tensor:
        """``[N, nu]`` controls from ``[N, D]`` actions (default: the action itself; MuJoCo clamps it to
        ``ctrlrange``)."""
        return action.double()

    def _reset_task(self, n: int, generator: torch.Generator) -> Tensor:
        """``[n, T]`` task state of fresh episode starts (commands)."""
        return torch.zeros(n, self.task_size, dtype=torch.float64, device=self.device)

    def _next_task(self, before: MjInner, after: MjInner) -> Tensor:
        """``[N, T]`` task state after a step (default: unchanged)."""
        return after.task

    def _total_reward(self, terms: Tensor) -> Tensor:
        """``[N]`` float64 reward from the ``[N, K]`` terms (columns in :attr:`reward_terms` order): their sum,
        unless the task says otherwise."""
        return terms.sum(dim=1)

    def _perturb(self, inner: MjInner) -> Tensor:
        """``[N, nstate]`` physics to step from (pushes change velocities here; default: unchanged)."""
        return inner.physics

    # --- views ------------------------------------------------------------------------------------------

    def qpos(self, inner: MjInner) -> Tensor:
        """``[N, nq]`` float64 joint positions."""
        return inner.physics[:, self.layout.qpos]

    def qvel(self, inner: MjInner) -> Tensor:
        """``[N, nv]`` float64 joint velocities."""
        return inner.physics[:, self.layout.qvel]

    # --- the template -----------------------------------------------------------------------------------

    def _sample_initial_state(self, num_envs: int, generator: torch.Generator) -> MjInner:
        qpos, qvel = self._reset_physics(num_envs, generator)
        pool = len(self.engine.models)
        if pool > 1:
            variant = torch.randint(0, pool, (num_envs,), device=self.device, generator=generator)
        else:
            variant = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        physics = self.layout.pack(self._fit_to_variant(qpos, variant), qvel)
        task = self._reset_task(num_envs, generator)
        if self.reset_forward:
            models = self.engine.row_models(variant)
            values = self.engine.forward_fields(models, physics.cpu().numpy(), None, post_constraint=False)
            observed = torch.from_numpy(values).to(self.device)
        else:
            observed = torch.zeros(num_envs, self.engine.observed_size, dtype=torch.float64, device=self.device)
        return MjInner(physics, variant, observed, task)

    def _transition(self, inner: MjInner, action: Tensor) -> tuple[MjInner, Tensor, Tensor]:
        ctrl = self._control(inner, action)
        physics, observed = self.engine.step(self._perturb(inner), ctrl, inner.variant)
        self.last_physics = physics
        after = MjInner(physics, inner.variant, observed, inner.task)
        terms, terminated = self._rewards(inner, after, action)
        after = after._replace(task=self._next_task(inner, after))
        stacked = torch.stack([terms[name] for name in self.reward_terms], dim=1)
        self._step_terms = stacked
        # Costs of absurd actions (Gymnasium's control costs use the unclipped action) saturate at float32's
        # largest value instead of overflowing to -inf: the reward stays finite.
        reward = self._total_reward(stacked).clamp(-_FLOAT32_MAX, _FLOAT32_MAX).float()
        return after, reward, terminated

    def step_state(self, state: EnvState[MjInner], action: Tensor, reset_inner: MjInner):
        return self.step_rows(state, action, reset_inner, slice(None))

    def step_rows(self, state: EnvState[MjInner], action: Tensor, reset_inner: MjInner, rows: slice):
        new_state, result = super().step_state(state, action, reset_inner)
        if self._term_sums is not None:
            step_terms = self._step_terms
            if not self.autoreset:
                step_terms = torch.where(state.done.unsqueeze(1), torch.zeros_like(step_terms), step_terms)
            sums = self._term_sums[rows] + step_terms
            done = (result.terminated | result.truncated).unsqueeze(1)
            self._finished_terms += torch.where(done, sums, torch.zeros_like(sums)).sum(dim=0)
            self._finished_episodes += done.sum()
            kept = torch.where(done, torch.zeros_like(sums), sums)
            if rows == slice(None):
                self._term_sums = kept
            else:
                self._term_sums[rows] = kept
        return new_state, result

    def reward_term_stats(self) -> dict[str, Tensor]:
        """``{term: 0-dim tensor}``: each reward term's sum per episode, averaged over the episodes finished since
        the last call (NaN when none finished); the counts restart."""
        sums, episodes = self.reward_term_totals()
        return {name: value / episodes for name, value in sums.items()}

    def reward_term_totals(self) -> tuple[dict[str, Tensor], Tensor]:
        """``({term: 0-dim tensor}, episodes)``: each reward term summed over the episodes finished since the last
        call, and how many finished; the counts restart."""
        sums, episodes = self._finished_terms.clone(), self._finished_episodes.clone()
        self._finished_terms.zero_()
        self._finished_episodes.zero_()
        return {name: sums[i] for i, name in enumerate(self.reward_terms)}, episodes

    def reset(self, seed: int | None = None):
        if self._term_sums is not None:
            self._term_sums.zero_()
        return super().reset(seed)

    # A row restarted by hand starts its reward-term sums afresh: the abandoned steps belong to no episode.
    def reset_rows(self, rows: Tensor):
        if self._term_sums is not None:
            self._term_sums = torch.where(rows.to(self.device).unsqueeze(1), 0.0, self._term_sums)
        return super().reset_rows(rows)

    def set_rows(self, rows: Tensor, inner: MjInner) -> None:
        super().set_rows(rows, inner)
        if self._term_sums is not None:
            self._term_sums[torch.as_tensor(rows, device=self.device).long().flatten()] = 0.0

    def state_dict(self) -> dict[str, Any]:
        """The base's state, the reward-term sums and the randomisation pool's scales (the physics each
        ``variant`` index stands for), so that a batch built with another seed resumes exactly."""
        state = super().state_dict()
        state["reward_term_sums"] = self._term_sums
        if self.variant_scales is not None:
            state["variant_scales"] = {k: torch.from_numpy(v.copy()) for k, v in self.variant_scales.items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("variant_scales")
        if (saved is None) != (self.variant_scales is None):
            raise ValueError("state of a randomised batch loaded into a nominal one, or the reverse: build the "
                             "environment with the same randomization")
        if saved is not None:
            scales = {k: v.cpu().numpy() for k, v in saved.items()}
            if scales.keys() != self.variant_scales.keys() or any(
                    not np.array_equal(scales[k], self.variant_scales[k]) for k in scales):
                self._build_engine(scales)
        super().load_state_dict(state)
        if "reward_term_sums" in state:
            self._term_sums = state["reward_term_sums"].to(self.device, torch.float64).clone()

    def close(self) -> None:
        """Stop the engine's worker threads."""
        self.engine.close()

    def uniform(self, low: float, high: float, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
        """float64 draws uniform in ``[low, high)`` on ``self.device``."""
        return low + (high - low) * torch.rand(shape, dtype=torch.float64, device=self.device, generator=generator)

    def normal(self, scale: float, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
        """float64 draws from ``N(0, scale**2)`` on ``self.device``."""
        return scale * torch.randn(shape, dtype=torch.float64, device=self.device, generator=generator)
