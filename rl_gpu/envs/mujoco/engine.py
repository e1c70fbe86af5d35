"""N worlds of one MJCF stepped by MuJoCo's own C engine on a persistent thread pool (``mujoco.rollout``).

The engine holds no per-row state: the batch's physics is a ``[N, nstate]`` float64 tensor of MuJoCo's
``mjSTATE_FULLPHYSICS`` vectors (time, qpos, qvel, act, plugin state) that the environment keeps in its inner
state, so resets are ``torch.where`` on a tensor, checkpoints are tensors and a row can be injected exactly.
Each row is stepped from its state with a zero solver warm-start (``mujoco.rollout`` resets the thread's
``MjData`` per row), so a row's next state depends on its own state, control and model only: not on the
batch, the thread count or the order rows are run in.

Domain randomisation on the CPU uses a pool of ``K`` models with the same size signature (``models``); row
``i`` is stepped with ``models[variant[i]]``. A model per row does not fit memory at N = 4096 for robots with
meshes; K variants do.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from rl_gpu.core.device import thread_limit

try:
    import mujoco
    import mujoco.rollout
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    mujoco = None

FULLPHYSICS = None if mujoco is None else int(mujoco.mjtState.mjSTATE_FULLPHYSICS)


def require_mujoco() -> None:
    """Raise a one-line ``ImportError`` naming the extra when MuJoCo is missing."""
    if mujoco is None:
        raise ImportError("MuJoCo environments need the mujoco package: pip install 'rl-gpu[mujoco]'")


def default_threads() -> int:
    """The CPU cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS and Windows
        return max(1, os.cpu_count() or 1)


class StateLayout:
    """Where qpos, qvel and act sit in a ``mjSTATE_FULLPHYSICS`` vector: ``[time, qpos, qvel, act, plugin]``."""

    def __init__(self, model) -> None:
        self.nq, self.nv, self.na, self.nu = model.nq, model.nv, model.na, model.nu
        self.nstate = mujoco.mj_stateSize(model, FULLPHYSICS)
        self.qpos = slice(1, 1 + self.nq)
        self.qvel = slice(self.qpos.stop, self.qpos.stop + self.nv)
        self.act = slice(self.qvel.stop, self.qvel.stop + self.na)

    def pack(self, qpos: Tensor, qvel: Tensor, act: Tensor | None = None) -> Tensor:
        """``[N, nstate]`` float64 physics at time 0 from ``[N, nq]`` qpos, ``[N, nv]`` qvel (and ``[N, na]`` act)."""
        n = qpos.shape[0]
        physics = torch.zeros(n, self.nstate, dtype=torch.float64, device=qpos.device)
        physics[:, self.qpos] = qpos
        physics[:, self.qvel] = qvel
        if act is not None:
            physics[:, self.act] = act
        return physics


class MujocoEngine:
    """Steps ``[N, nstate]`` physics with ``[N, nu]`` controls for ``frame_skip`` MuJoCo steps per call.

    Args:
        models: the pool of ``K >= 1`` compiled models (one MJCF, possibly with different physical
            parameters); every one must have the first one's size signature.
        num_envs: N.
        frame_skip: MuJoCo steps per control step (the control is held for all of them).
        num_threads: worker threads of the persistent pool (None: every core this process may use).
        derived: ``MjData`` attributes to read after each step, as ``MjData`` holds them after ``mj_step`` and
            ``mj_rnePostConstraint`` (what Gymnasium's envs read: ``cinert``, ``cvel``, ``qfrc_actuator``,
            ``cfrc_ext``, body positions): the last substep is stepped again on the calling thread from its
            starting state, since with the RK4 integrator (Gymnasium's MJCF files) these fields come from
            RK4's last stage, not from the starting state. That replay starts its solve cold where the
            rollout's was warm-started by the previous substep: equal to solver tolerance (Newton: ~1e-13 in
            ``cfrc_ext``, ~1e-5 in hard contacts), ~1e-3 in small contact forces for PGS (Humanoid). Each is a
            ``(name, first_row)`` pair: rows ``first_row:`` of that ``[rows, cols]`` array, flattened.
    """

    def __init__(self, models: Sequence, num_envs: int, frame_skip: int, num_threads: int | None = None,
                 derived: Sequence[tuple[str, int]] = ()) -> None:
        require_mujoco()
        self.models = list(models)
        if not self.models:
            raise ValueError("the model pool is empty")
        self.layout = StateLayout(self.models[0])
        for i, m in enumerate(self.models[1:], 1):
            if (m.nq, m.nv, m.na, m.nu, m.nsensordata) != (self.models[0].nq, self.models[0].nv,
                                                            self.models[0].na, self.models[0].nu,
                                                            self.models[0].nsensordata):
                raise ValueError(f"model {i} of the pool has another size signature than model 0")
        self.num_envs = num_envs
        self.frame_skip = frame_skip
        self.num_threads = default_threads() if num_threads is None else num_threads
        n = self.num_threads
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= thread_limit():
            raise ValueError(f"num_threads must be an int between 1 and {thread_limit()} (4 x this machine's CPUs), "
                             f"got {num_threads!r}")
        self._rollout = mujoco.rollout.Rollout(nthread=self.num_threads)
        self._data = [mujoco.MjData(self.models[0]) for _ in range(self.num_threads)]
        self._scratch = mujoco.MjData(self.models[0])
        self._buffers: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        """``rows -> (state, sensordata, control)`` outputs and inputs of a rollout call of that many rows (the
        whole batch; its halves under a double-buffered collector)."""
        self._buffers_for(num_envs)
        self.derived = tuple(derived)
        self.nsensordata = self.models[0].nsensordata
        self._derived_views = []
        """``(flat view into the scratch MjData, first column, end column)`` per derived field, made once."""
        col = self.nsensordata
        for name, first in self.derived:
            view = getattr(self._scratch, name)[first:].reshape(-1)
            self._derived_views.append((view, col, col + view.size))
            col += view.size
        self.derived_size = col - self.nsensordata
        self.reuse_scratch = len(self.models) == 1
        """Whether the replay skips ``mj_resetData`` between rows (one model; see :meth:`forward_fields`)."""
        self.dt = self.models[0].opt.timestep * frame_skip

    def _buffers_for(self, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if rows not in self._buffers:
            s, lay = self.frame_skip, self.layout
            self._buffers[rows] = (np.empty((rows, s, lay.nstate)), np.empty((rows, s, self.models[0].nsensordata)),
                                   np.empty((rows, s, lay.nu)))
        return self._buffers[rows]

    @property
    def observed_size(self) -> int:
        """Columns of :meth:`step`'s second output: ``nsensordata`` sensor values, then the derived fields."""
        return self.nsensordata + self.derived_size

    def step(self, physics: Tensor, ctrl: Tensor, variant: Tensor) -> tuple[Tensor, Tensor]:
        """``[N, nstate]`` physics, ``[N, nu]`` controls and ``[N]`` model indices in; ``(physics after
        frame_skip steps [N, nstate], observed [N, nsensordata + D])`` out, float64 on ``physics``'s device:
        the last step's sensor values then the derived fields (:attr:`derived`), as ``MjData`` holds them after
        ``mj_step``. MuJoCo clamps controls to the actuators' ``ctrlrange``."""
        device = physics.device
        start = np.ascontiguousarray(physics.detach().to("cpu", torch.float64).numpy())
        state, sensordata, control = self._buffers_for(start.shape[0])
        control[:] = ctrl.detach().to("cpu", torch.float64).numpy()[:, None, :]
        models = self.row_models(variant)
        self._rollout.rollout(models, self._data, start, control, nstep=self.frame_skip,
                              skip_checks=True, state=state, sensordata=sensordata)
        after = torch.from_numpy(state[:, -1].copy()).to(device)
        if not self.derived:
            return after, torch.from_numpy(sensordata[:, -1].copy()).to(device)
        before_last = start if self.frame_skip == 1 else state[:, -2]
        observed = self.forward_fields(models, before_last, control[:, -1], substep=True)
        observed[:, :self.nsensordata] = sensordata[:, -1]
        return after, torch.from_numpy(observed).to(device)

    def row_models(self, variant: Tensor) -> list:
        """The model of each row: ``models[variant[i]]`` (one host read of the ``[N]`` indices)."""
        if len(self.models) == 1:
            return self.models * int(variant.shape[0])
        return [self.models[k] for k in variant.tolist()]

    def forward_fields(self, models: Sequence, physics: np.ndarray, ctrl: np.ndarray | None,
                       post_constraint: bool = True, substep: bool = False) -> np.ndarray:
        """``[N, nsensordata + D]`` sensor values and derived quantities (:attr:`derived`) of a forward pass at
        each row's ``physics`` (``[N, nstate]``) with controls ``ctrl`` (``[N, nu]``; None: zero), as ``MjData``
        holds them after ``mj_forward`` (``substep``: after ``mj_step`` from ``physics``) and
        ``mj_rnePostConstraint`` when ``post_constraint`` (``cfrc_ext``; without it ``cfrc_ext`` stays zero, as
        after a Gymnasium reset). A loop over rows on the calling thread."""
        d = self._scratch
        out = np.empty((physics.shape[0], self.observed_size))
        # A step's replay with one model need not reset the scratch between rows (the reset cost Ant about a
        # fifth of the replay): mj_step reads only the state set below, the controls, the warm start (zeroed, as a
        # reset leaves it) and inputs nothing here writes (applied forces, mocap, equality flags, user data), and
        # it overwrites every field read out. A pool of models resets each row to its own model's defaults; a
        # reset observation resets too (cfrc_ext stays zero there, as after a Gymnasium reset).
        reuse = self.reuse_scratch and substep and post_constraint
        for i, m in enumerate(models):
            if reuse:
                d.qacc_warmstart[:] = 0.0
            else:
                mujoco.mj_resetData(m, d)
            mujoco.mj_setState(m, d, physics[i], FULLPHYSICS)
            if ctrl is not None:
                d.ctrl[:] = ctrl[i]
            elif reuse:
                d.ctrl[:] = 0.0
            if substep:
                mujoco.mj_step(m, d)
            else:
                mujoco.mj_forward(m, d)
            if post_constraint:
                mujoco.mj_rnePostConstraint(m, d)
            if self.nsensordata:
                out[i, :self.nsensordata] = d.sensordata
            for view, start, end in self._derived_views:
                out[i, start:end] = view
        return out

    def close(self) -> None:
        """Stop the worker threads (the engine cannot step afterwards)."""
        rollout, self._rollout = self._rollout, None
        if rollout is not None:
            rollout.close()
