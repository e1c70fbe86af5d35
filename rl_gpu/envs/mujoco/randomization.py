"""Domain randomisation of MuJoCo physics: per-row friction, masses, motor strength, joint damping and the size of
a task's objects.

On the CPU engine every row runs one of ``num_variants`` models (a pool drawn once from the ranges, from the
environment's seed); each episode start draws a variant for its row, so a row's physics changes at every reset
and the batch always holds many. A model per row would not fit memory at N = 4096 for meshed robots; K models do.
Scales multiply the MJCF's nominal values; ``(1.0, 1.0)`` or None leaves a parameter alone.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, fields

import numpy as np

try:
    import mujoco
except ImportError:  # pragma: no cover - exercised only without the optional dependency
    mujoco = None

Range = tuple[float, float]


MAX_VARIANTS = 2**16
"""Most model variants of one pool (each is a compiled copy of the model)."""


@dataclass(frozen=True)
class Randomization:
    """Ranges of physics scales drawn per model variant (uniform in ``[low, high]``; None: nominal)."""

    friction: Range | None = None
    """Scale of every geom's sliding friction (one draw per variant: the ground and feet together)."""
    mass: Range | None = None
    """Scale of each body's mass and inertia (one draw per body and variant)."""
    motor_strength: Range | None = None
    """Scale of each actuator's force (its gain and bias terms; one draw per actuator and variant)."""
    damping: Range | None = None
    """Scale of each joint's damping (one draw per degree of freedom and variant)."""
    object_size: Range | None = None
    """Scale of the size of the task's objects (the geoms its environment names in ``object_geoms``: the Panda's
    cube), every axis and object together (one draw per variant); the environment places them by it at reset."""
    num_variants: int = 64
    """K, the size of the model pool rows draw from at reset."""

    def __post_init__(self) -> None:
        if isinstance(self.num_variants, bool) or not isinstance(self.num_variants, int) \
                or not 1 <= self.num_variants <= MAX_VARIANTS:
            raise ValueError(f"num_variants must be a positive int, at most {MAX_VARIANTS:,} (each variant is a copy "
                             f"of the model), got {self.num_variants!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "num_variants" or value is None:
                continue
            ok = isinstance(value, (tuple, list)) and len(value) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
            if not ok or not 0 < value[0] <= value[1]:
                raise ValueError(f"randomization {f.name} must be a (low, high) pair of scales with "
                                 f"0 < low <= high, got {value!r}")

    @property
    def active(self) -> bool:
        """True when any range differs from the nominal physics."""
        return any(r is not None and tuple(r) != (1.0, 1.0) for r in
                   (self.friction, self.mass, self.motor_strength, self.damping, self.object_size))


def draw_scales(model, randomization: Randomization, seed: int) -> dict[str, np.ndarray]:
    """``{parameter: [K, count] scales}`` for the pool, drawn from ``seed`` alone (same seed, same pool)."""
    rng = np.random.default_rng(seed)
    k = randomization.num_variants
    counts = {"friction": 1, "mass": model.nbody, "motor_strength": model.nu, "damping": model.nv}
    scales = {}
    if randomization.object_size is not None:  # drawn last and only when asked: earlier pools stay as they were
        counts["object_size"] = 1
    for name, count in counts.items():
        r = getattr(randomization, name)
        low, high = (1.0, 1.0) if r is None else r
        scales[name] = rng.uniform(low, high, size=(k, count)) if high > low else np.full((k, count), low)
    return scales


def build_variants(model, scales: dict[str, np.ndarray], object_geoms: tuple[int, ...] = ()) -> list:
    """One compiled model per row of ``scales`` (:func:`draw_scales`), each a copy of ``model`` with its scales
    applied and MuJoCo's derived constants recomputed (``mj_setConst``). ``object_geoms``: the geom ids an
    ``object_size`` scale resizes (with their bounding sphere and box, which collision detection reads)."""
    variants = []
    for k in range(len(scales["friction"])):
        m = copy.copy(model)
        m.geom_friction[:, 0] *= scales["friction"][k, 0]
        m.body_mass[:] *= scales["mass"][k]
        m.body_inertia[:] *= scales["mass"][k][:, None]
        m.actuator_gainprm[:, 0] *= scales["motor_strength"][k]
        m.actuator_biasprm[:, :3] *= scales["motor_strength"][k][:, None]
        m.dof_damping[:] *= scales["damping"][k]
        if "object_size" in scales:
            for g in object_geoms:
                m.geom_size[g] *= scales["object_size"][k, 0]
                m.geom_rbound[g] *= scales["object_size"][k, 0]
                m.geom_aabb[g] *= scales["object_size"][k, 0]
        mujoco.mj_setConst(m, mujoco.MjData(m))
        variants.append(m)
    return variants
