"""N worlds of one MJCF stepped by MuJoCo Warp (``mujoco-warp``): the GPU engine, with
:class:`~rl_gpu.envs.mujoco.engine.MujocoEngine`'s interface.

Same contract as the C engine: no per-row state is kept between calls; the batch's physics is a ``[N, nstate]``
float64 tensor of ``mjSTATE_FULLPHYSICS`` vectors (time, qpos, qvel, act, history) that the environment holds,
and :meth:`WarpEngine.step` returns the physics after ``frame_skip`` MuJoCo steps and the observed values
(sensors of the last substep, then the derived fields). Differences from the C engine:

- **float32.** MuJoCo Warp computes in float32: each step writes the float64 state into the Warp worlds
  (rounding it to float32) and returns float64 tensors converted from float32. Trajectories agree with the C
  engine to float32 round-off, which contact dynamics amplify over many steps (the slow tests measure it).
- **Contact frames of plane-capsule contacts.** Where a capsule's axis is within 60 degrees of the plane's
  normal, MuJoCo Warp takes a fixed tangent (world y) for the contact frame where MuJoCo C takes the axis
  projected on the plane (``collision_primitive_core.plane_capsule``: ``b_norm < 0.5``). With a pyramidal
  friction cone (MuJoCo's default, Gymnasium's MJCF files) that rotates the friction pyramid: a different,
  equally valid approximation of the friction cone, but not the C engine's dynamics. HalfCheetah is planar,
  where the fallback tangent is a right angle from C's and the pyramid the same: ~2e-3 in qvel per control
  step, float32-level. Ant's feet meet this case most steps: ~1 in qvel per control step (median), against ~2e-5
  with an elliptic cone (``opt.cone``), which does not depend on the tangent.
- **Zero copies, one device.** Warp's arrays are viewed by torch (``wp.to_torch``): the state goes in and out
  by tensor copies on the engine's device, never through the host.
- **Graph replay.** The ``frame_skip`` substeps (and ``mj_rnePostConstraint`` when derived fields are read) are
  captured once (``wp.ScopedCapture``) and replayed (``wp.capture_launch``): a CUDA graph on a CUDA device,
  Warp's recorded launches on the CPU (3x faster there than plain launches at N = 256, bit for bit the same).
  The first call compiles MuJoCo Warp's kernels: about 1.5 min on a cold cache (``~/.cache/warp``), then cached.
- **Warm start as the C engine.** A Warp world would warm-start each control step's first solve from the
  previous control step; the engine zeroes ``qacc_warmstart`` before each control step, as ``mujoco.rollout``
  does (it resets each row's ``MjData``), so a row's next state depends on its own state, control and model only.
- **Domain randomisation by batched model fields**, not by a pool of models: the parameters that differ between
  the ``K`` variants (friction, masses and inertias, actuator gains, damping, and what ``mj_setConst`` derives
  from them: ``body_subtreemass``, ``body_invweight0``, ``dof_invweight0``, ``actuator_acc0``) are MuJoCo Warp
  model fields with one row per world; their ``[K, ...]`` stacks are gathered by each row's ``variant`` before
  each step. The variants are compiled on the host one at a time (``mj_setConst``, as the C pool's) and
  dropped, so ``K`` copies of a meshed robot never sit in memory (:class:`VariantModels`).
- **Not supported** (a one-line error): the PGS solver (MuJoCo Warp's refusal; use Newton), a pyramidal
  friction cone with ``impratio`` > 1 (float32's Newton solve returns NaN there), plugin and plasticity state in
  the physics vector; whatever else ``mujoco_warp.put_model`` refuses.
- Contacts and constraint rows have fixed per-world capacities (MuJoCo Warp's defaults, or ``nconmax`` and
  ``njmax``); :meth:`WarpEngine.overflowed` says which worlds ran out.

Needs the ``mujoco-warp`` extra (``pip install 'rl-gpu[mujoco-warp]'``); this module imports Warp only when an
engine is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rl_gpu.envs.mujoco.engine import StateLayout, require_mujoco
from rl_gpu.envs.mujoco.randomization import build_variants

try:
    import mujoco
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    mujoco = None

_POST_CONSTRAINT = ("cacc", "cfrc_int", "cfrc_ext")
"""``MjData`` fields that only ``mj_rnePostConstraint`` fills."""


def import_warp() -> tuple[Any, Any]:
    """``(warp, mujoco_warp)``, or a one-line ``ImportError`` naming the extra."""
    try:
        import mujoco_warp
        import warp
    except ImportError as e:
        raise ImportError("the mujoco-warp backend needs MuJoCo Warp: pip install 'rl-gpu[mujoco-warp]'") from e
    return warp, mujoco_warp


def model_name(model) -> str:
    """The MJCF's ``<mujoco model="...">`` name (``"unnamed"`` when it has none)."""
    name = bytes(model.names).split(b"\0", 1)[0].decode(errors="replace")
    return name or "unnamed"


def check_supported(model) -> None:
    """Raise a one-line ``ValueError`` for a model the Warp engine cannot step (checked before Warp loads)."""
    if model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
        raise ValueError(f"MuJoCo Warp does not support the PGS solver of model {model_name(model)!r}: set "
                         f"model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON (solver=\"Newton\" in the MJCF's "
                         f"<option>), or use backend='mujoco'")
    if model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL and model.opt.impratio > 1:
        # Friction rows regularised impratio times less than normal ones: MuJoCo Warp's float32 Newton solve
        # returns NaN accelerations (Go1's MJCF, impratio 100: 18 of 64 worlds at the first step; none with an
        # elliptic cone, with impratio 1 or 10 on the first step, or on the float64 C engine).
        raise ValueError(f"MuJoCo Warp's float32 solver diverges (NaN) on model {model_name(model)!r}: a pyramidal "
                         f"friction cone with impratio={model.opt.impratio:g} (allowed: an elliptic cone, "
                         f"cone=\"elliptic\" in the MJCF's <option>, or impratio <= 1), or use backend='mujoco'")
    stateful = {"plugin": mujoco.mjtState.mjSTATE_PLUGIN, "plasticity": mujoco.mjtState.mjSTATE_PLASTIC}
    for what, sig in stateful.items():
        if mujoco.mj_stateSize(model, int(sig)):
            raise ValueError(f"the Warp engine does not carry {what} state (model {model_name(model)!r})")


class VariantModels(Sequence):
    """The ``K`` model variants of a scale pool (:func:`~rl_gpu.envs.mujoco.randomization.draw_scales`), each
    compiled when read (``variants[k]``, as ``build_variants`` builds it) and not kept: the Warp engine's
    ``models``, so that a renderer or a user reads a row's model as on the C engine without ``K`` copies."""

    def __init__(self, model, scales: dict[str, np.ndarray]) -> None:
        self.model, self.scales = model, scales

    def __len__(self) -> int:
        return len(self.scales["friction"])

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        k = range(len(self))[k]
        return build_variants(self.model, {name: s[k:k + 1] for name, s in self.scales.items()})[0]

    def __iter__(self) -> Iterator:
        return (self[k] for k in range(len(self)))


def varying_fields(mjw, nominal, variants: Sequence) -> dict[str, np.ndarray]:
    """``{field: [K, ...] values}`` of the MuJoCo Warp model fields that differ between the ``variants``
    (compared with ``nominal``), read one variant at a time. A field MuJoCo Warp keeps one copy of for every
    world raises ``ValueError``; ``MjModel`` fields MuJoCo Warp has no use for (``dof_M0``) are ignored."""
    spec = {f.name: f.type for f in dataclasses.fields(mjw.Model)}
    names = [n for n in spec if isinstance(getattr(nominal, n, None), np.ndarray)]
    differ: list[dict[str, np.ndarray]] = []
    for variant in variants:
        own = {}
        for name in names:
            value = getattr(variant, name)
            if not np.array_equal(value, getattr(nominal, name)):
                if getattr(spec[name], "shape", ("",))[0] != "*":
                    raise ValueError(f"model field {name} differs between variants, but MuJoCo Warp shares it "
                                     f"between worlds")
                own[name] = np.array(value)
        differ.append(own)
    varying = sorted({name for own in differ for name in own})
    return {name: np.stack([own.get(name, getattr(nominal, name)) for own in differ]) for name in varying}


class WarpEngine:
    """Steps ``[N, nstate]`` physics with ``[N, nu]`` controls for ``frame_skip`` MuJoCo Warp steps per call.

    Args:
        models: the nominal model (``[model]``), or a pool of ``K`` models with one size signature, as the C
            engine takes (the fields that differ become per-world fields).
        num_envs: N, the number of Warp worlds.
        frame_skip: MuJoCo steps per control step (the control is held for all of them).
        num_threads: accepted for the C engine's signature and ignored (Warp runs CPU kernels serially).
        derived: ``(MjData attribute, first row)`` pairs read after each step, as the C engine's (``cfrc_ext``
            after ``mj_rnePostConstraint``); read from the last substep's data (warm-started, where the C engine
            replays it cold: equal to solver tolerance).
        scales: ``{parameter: [K, count]}`` variant scales (:func:`~rl_gpu.envs.mujoco.randomization.draw_scales`)
            applied to ``models[0]``: domain randomisation without a pool of ``K`` models in memory.
        device: the torch device of the worlds (None: Warp's default device, a GPU when there is one).
        graph: replay a captured graph (None or True) or launch kernels one by one (False).
        nconmax, njmax: contacts and constraint rows per world (None: MuJoCo Warp's defaults).
    """

    def __init__(self, models: Sequence, num_envs: int, frame_skip: int, num_threads: int | None = None,
                 derived: Sequence[tuple[str, int]] = (), *, scales: dict[str, np.ndarray] | None = None,
                 device: str | torch.device | None = None, graph: bool | None = None,
                 nconmax: int | None = None, njmax: int | None = None) -> None:
        require_mujoco()
        models = list(models)
        if not models:
            raise ValueError("the model pool is empty")
        if scales is not None and len(models) != 1:
            raise ValueError("pass one nominal model with scales, not a pool")
        nominal = models[0]
        check_supported(nominal)
        for i, m in enumerate(models[1:], 1):
            if (m.nq, m.nv, m.na, m.nu, m.nsensordata) != (nominal.nq, nominal.nv, nominal.na, nominal.nu,
                                                            nominal.nsensordata):
                raise ValueError(f"model {i} of the pool has another size signature than model 0")
        for name, value in (("num_envs", num_envs), ("frame_skip", frame_skip)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        wp, mjw = import_warp()
        self._wp, self._mjw = wp, mjw
        self.models = VariantModels(nominal, scales) if scales is not None else models
        self.layout = StateLayout(nominal)
        self.nhistory = mujoco.mj_stateSize(nominal, int(mujoco.mjtState.mjSTATE_HISTORY))
        self.num_envs, self.frame_skip, self.num_threads = num_envs, frame_skip, num_threads
        self.nsensordata = nominal.nsensordata
        self.dt = nominal.opt.timestep * frame_skip
        self.derived = tuple(derived)
        self.graph = graph is not False

        with wp.ScopedLogLevel(wp.LOG_WARNING):
            wp.init()
            if device is None:
                self.device = torch.device(wp.device_to_torch(wp.get_device()))
            else:
                self.device = torch.device(device)
                if self.device.type == "cuda" and self.device.index is None:
                    self.device = torch.device("cuda", torch.cuda.current_device())
            self.wp_device = wp.device_from_torch(self.device)
            stacks = varying_fields(mjw, nominal, self.models) if len(self.models) > 1 else {}
            with wp.ScopedDevice(self.wp_device):
                self.model_w = mjw.put_model(nominal, batch_sizes={name: num_envs for name in stacks})
                data = mujoco.MjData(nominal)
                mujoco.mj_forward(nominal, data)
                self.data_w = mjw.put_data(nominal, data, nworld=num_envs, nconmax=nconmax, njmax=njmax)
        self._stream = wp.get_stream(self.wp_device) if self.wp_device.is_cuda else None
        self._torch_streams: dict[int, Any] = {}

        d = self.data_w
        view = wp.to_torch
        self._time, self._qpos, self._qvel = view(d.time), view(d.qpos), view(d.qvel)
        self._act, self._history, self._ctrl = view(d.act), view(d.history), view(d.ctrl)
        self._warmstart, self._sensordata = view(d.qacc_warmstart), view(d.sensordata)
        if self._history.shape[1] != self.nhistory:
            raise ValueError(f"MuJoCo Warp holds {self._history.shape[1]} history values, the state "
                             f"{self.nhistory}")
        self._params = {name: view(getattr(self.model_w, name)) for name in stacks}
        self._stacks = {}
        for name, stack in stacks.items():
            target = self._params[name]
            values = torch.as_tensor(stack, dtype=target.dtype).to(self.device)
            if values.shape[1:] != target.shape[1:]:
                raise ValueError(f"model field {name}: MuJoCo Warp's world shape {tuple(target.shape[1:])} is "
                                 f"not MjModel's {tuple(values.shape[1:])}")
            self._stacks[name] = values
        self._derived_views = []  # (name, first row, [N, rows, ...] view of the Warp array)
        reference = mujoco.MjData(nominal)
        for name, first in self.derived:
            if not hasattr(d, name):
                raise ValueError(f"derived field {name} is not in MuJoCo Warp's Data")
            values = view(getattr(d, name))
            size, expected = values[0, first:].numel(), getattr(reference, name)[first:].size
            if size != expected:
                raise ValueError(f"derived field {name}: {size} values per world in MuJoCo Warp, {expected} in "
                                 f"MjData")
            self._derived_views.append((name, first, values))
        self.derived_size = sum(values[0, first:].numel() for _, first, values in self._derived_views)
        self._post_constraint = bool(self.derived)
        self._graphs: dict[tuple, Any] = {}
        self._closed = False

    # --- the interface of MujocoEngine --------------------------------------------------------------------

    @property
    def observed_size(self) -> int:
        """Columns of :meth:`step`'s second output: ``nsensordata`` sensor values, then the derived fields."""
        return self.nsensordata + self.derived_size

    def step(self, physics: Tensor, ctrl: Tensor, variant: Tensor) -> tuple[Tensor, Tensor]:
        """``[N, nstate]`` physics, ``[N, nu]`` controls and ``[N]`` variant indices in; ``(physics after
        frame_skip steps [N, nstate], observed [N, nsensordata + D])`` out, float64 on ``physics``'s device
        (converted from Warp's float32). MuJoCo Warp clamps controls to the actuators' ``ctrlrange``."""
        self._check_open()
        n = physics.shape[0]
        if n != self.num_envs:
            raise ValueError(f"the engine steps {self.num_envs} worlds, got physics for {n}")
        self._write(physics, ctrl, variant)
        self._launch(("step", self._post_constraint), self._substeps)
        return self._read_physics(physics.device), self._read_observed(physics.device)

    def row_models(self, variant: Tensor) -> Tensor:
        """What :meth:`forward_fields` takes for its rows: here the ``[N]`` variant indices themselves (the
        variants' parameters are per-world model fields; ``models[k]`` compiles variant ``k`` on the host)."""
        return variant

    def forward_fields(self, models: Tensor, physics: np.ndarray | Tensor, ctrl: np.ndarray | Tensor | None,
                       post_constraint: bool = True, substep: bool = False) -> np.ndarray:
        """``[n, nsensordata + D]`` float64 sensor values and derived fields of a forward pass (``substep``: a
        step) at each row's ``physics`` (``[n, nstate]``) with controls ``ctrl`` (None: zero) and variants
        ``models`` (:meth:`row_models`), as the C engine's :meth:`MujocoEngine.forward_fields`, computed in the
        Warp worlds in chunks of N rows (the worlds' state is overwritten; :meth:`step` writes it all)."""
        self._check_open()
        physics = torch.as_tensor(physics, dtype=torch.float64).to(self.device)
        variant = torch.as_tensor(models).to(self.device)
        n = physics.shape[0]
        if ctrl is None:
            ctrl = torch.zeros(n, self.layout.nu, dtype=torch.float64, device=self.device)
        ctrl = torch.as_tensor(ctrl).to(self.device)
        out = torch.empty(n, self.observed_size, dtype=torch.float64, device=self.device)
        run = self._substep if substep else self._forward
        for start in range(0, n, self.num_envs):
            stop = min(n, start + self.num_envs)
            rows = torch.arange(start, stop, device=self.device)
            # pad the last chunk with copies of its first row
            rows = torch.cat((rows, rows[:1].expand(self.num_envs - rows.numel())))
            self._write(physics[rows], ctrl[rows], variant[rows])
            self._launch(("forward", post_constraint, substep), lambda: run(post_constraint))
            out[start:stop] = self._read_observed(self.device, zero_post_constraint=not post_constraint)[
                :stop - start]
        return out.cpu().numpy()

    def overflowed(self) -> Tensor:
        """``[N]`` bool on the engine's device: worlds whose contacts or constraint rows overflowed MuJoCo Warp's
        fixed capacities (``nconmax``, ``njmax``) at some step (a sticky flag; read it now and then, not per
        step: it is a host read when the caller branches on it)."""
        return self._wp.to_torch(self.data_w.overflow) != 0

    def close(self) -> None:
        """Release the graphs and the Warp worlds (the engine cannot step afterwards)."""
        self._graphs.clear()
        self._closed = True

    # --- internals ----------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the Warp engine is closed")

    def _write(self, physics: Tensor, ctrl: Tensor, variant: Tensor) -> None:
        """Copy the state, controls and per-world parameters into the Warp worlds (float64 to float32)."""
        lay = self.layout
        physics = physics.detach().to(self.device)
        self._time.copy_(physics[:, 0])
        self._qpos.copy_(physics[:, lay.qpos])
        self._qvel.copy_(physics[:, lay.qvel])
        if lay.na:
            self._act.copy_(physics[:, lay.act])
        if self.nhistory:
            self._history.copy_(physics[:, lay.act.stop:lay.act.stop + self.nhistory])
        self._ctrl.copy_(ctrl.detach().to(self.device))
        self._warmstart.zero_()
        if self._stacks:
            index = variant.to(self.device, torch.long)
            for name, stack in self._stacks.items():
                torch.index_select(stack, 0, index, out=self._params[name])

    def _read_physics(self, device: torch.device) -> Tensor:
        parts = [self._time[:, None], self._qpos, self._qvel]
        if self.layout.na:
            parts.append(self._act)
        if self.nhistory:
            parts.append(self._history)
        return torch.cat(parts, dim=1).to(device, torch.float64)

    def _read_observed(self, device: torch.device, zero_post_constraint: bool = False) -> Tensor:
        parts = [self._sensordata]
        for name, first, values in self._derived_views:
            values = values[:, first:].reshape(self.num_envs, -1)
            if zero_post_constraint and name in _POST_CONSTRAINT:
                values = torch.zeros_like(values)
            parts.append(values)
        return torch.cat(parts, dim=1).to(device, torch.float64)

    def _substeps(self) -> None:
        for _ in range(self.frame_skip):
            self._mjw.step(self.model_w, self.data_w)
        if self._post_constraint:
            self._mjw.rne_postconstraint(self.model_w, self.data_w)

    def _forward(self, post_constraint: bool) -> None:
        self._mjw.forward(self.model_w, self.data_w)
        if post_constraint:
            self._mjw.rne_postconstraint(self.model_w, self.data_w)

    def _substep(self, post_constraint: bool) -> None:
        self._mjw.step(self.model_w, self.data_w)
        if post_constraint:
            self._mjw.rne_postconstraint(self.model_w, self.data_w)

    def _torch_stream(self):
        """The Warp handle of torch's current stream on the engine's device (cached per stream)."""
        stream = torch.cuda.current_stream(self.device)
        handle = self._torch_streams.get(stream.cuda_stream)
        if handle is None:
            handle = self._torch_streams[stream.cuda_stream] = self._wp.stream_from_torch(stream)
        return handle

    def _launch(self, key: tuple, run) -> None:
        """Run ``run`` (MuJoCo Warp calls) on the worlds: the first time with plain launches (which compiles
        and loads the kernels, quietly), then captured and replayed. On a CUDA device the Warp stream waits
        for torch's current stream before, and torch's for Warp's after."""
        wp = self._wp
        graph = self._graphs.get(key)
        torch_stream = self._torch_stream() if self._stream is not None else None
        if torch_stream is not None:
            self._stream.wait_stream(torch_stream)
        if graph is not None:
            wp.capture_launch(graph, stream=self._stream)
        else:
            with wp.ScopedLogLevel(wp.LOG_WARNING), wp.ScopedDevice(self.wp_device):
                if self._stream is not None:
                    with wp.ScopedStream(self._stream):
                        run()
                else:
                    run()
                if self.graph:
                    with wp.ScopedCapture(self.wp_device, stream=self._stream,
                                          force_module_load=False) as capture:
                        run()
                    self._graphs[key] = capture.graph
        if torch_stream is not None:
            torch_stream.wait_stream(self._stream)
