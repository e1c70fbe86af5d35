"""Go1-Rough-v0's height-field contacts on MuJoCo Warp against MuJoCo's C engine, from the same episode starts.

    python benchmarks/warp_hfield_check.py            # needs the mujoco-warp extra; Warp's CPU device is enough
    python benchmarks/warp_hfield_check.py --robots 256 --margin 0 --nconmax 256
    python benchmarks/warp_hfield_check.py --lone 58,RL [--crop 10]   # one sphere like that foot, alone

Builds Go1-Rough-v0 on the C engine (nominal physics), takes its robots' first states, and runs the task's model
(with an elliptic friction cone on both engines, as Go1 runs on MuJoCo Warp) through MuJoCo's forward pass and one
physics step on each engine directly, without the environment (which refuses MuJoCo Warp for this task). Prints the
deepest contact of each engine, the robots whose deepest contacts differ by more than 2 mm, and the robots whose
qpos differs by more than 1e-3 after the step, with how many contacts MuJoCo Warp allocated and used. MuJoCo Warp
4.0.0 gave foot contacts up to 1.26 m deep, half a metre from the foot, on ground flat for 0.8 m around (the C
engine: at most 3.5 cm), with no contact overflow, so :class:`~rl_gpu.envs.mujoco.rough.Go1RoughEnv` refuses
``backend="mujoco-warp"`` on that version. Run this again with a newer MuJoCo Warp before lifting it.

``--lone ROBOT,FOOT`` is the small case for a report upstream: only the terrain's height field and one free sphere
with that foot's size, margin, condim, priority and friction where it stands; ``--crop`` keeps that many cells each
side of it. With seed 1, ``--lone 58,RL`` reproduces a 0.70 m deep contact 0.35 m from the sphere on MuJoCo Warp
4.0.0 (the C engine: two contacts about 2 cm deep); ``--margin 0`` or any ``--crop`` up to 400 cells does not.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def lone_sphere(model, qpos, robot: int, foot: str, crop: int | None):
    """The spec of a model holding only the terrain's height field (all of it, or ``crop`` cells each side of the
    foot) and one free sphere with ``foot``'s size, margin, condim, priority and friction where that foot of ``robot``
    stands."""
    import mujoco

    data = mujoco.MjData(model)
    data.qpos[:] = qpos[robot]
    mujoco.mj_kinematics(model, data)
    terrain, g = model.geom("terrain"), model.geom(foot)
    h = int(terrain.dataid[0])
    nrow, ncol = int(model.hfield_nrow[h]), int(model.hfield_ncol[h])
    elevation = model.hfield_data[model.hfield_adr[h]:model.hfield_adr[h] + nrow * ncol].reshape(nrow, ncol).copy()
    size, pos = model.hfield_size[h].copy(), terrain.pos.copy()
    if crop is not None:
        dx, dy = 2 * size[0] / (ncol - 1), 2 * size[1] / (nrow - 1)
        col = int(round((data.geom_xpos[g.id][0] - pos[0] + size[0]) / dx))
        row = int(round((data.geom_xpos[g.id][1] - pos[1] + size[1]) / dy))
        r0, r1, c0, c1 = max(row - crop, 0), min(row + crop, nrow - 1), max(col - crop, 0), min(col + crop, ncol - 1)
        elevation = elevation[r0:r1 + 1, c0:c1 + 1].copy()
        elevation[0, 0], elevation[-1, -1] = 0.0, 1.0  # MuJoCo rescales elevations to [0, 1]: keep the full range
        pos[:2] = pos[0] - size[0] + (c0 + c1) / 2 * dx, pos[1] - size[1] + (r0 + r1) / 2 * dy
        size[:2] = (c1 - c0) / 2 * dx, (r1 - r0) / 2 * dy
        nrow, ncol = elevation.shape
    spec = mujoco.MjSpec()
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.add_hfield(name="terrain", nrow=nrow, ncol=ncol, size=size.tolist(), userdata=elevation.ravel().tolist())
    spec.worldbody.add_geom(name="terrain", type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname="terrain", pos=pos.tolist())
    body = spec.worldbody.add_body(name="foot", pos=data.geom_xpos[g.id].tolist())
    body.add_freejoint()
    body.add_geom(name=foot, type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[float(g.size[0]), 0, 0], mass=0.1,
                  margin=float(g.margin[0]), condim=int(g.condim[0]), priority=int(g.priority[0]),
                  friction=g.friction.tolist())
    return spec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--robots", type=int, default=64, help="robots (worlds), 1 to 4096")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--margin", type=float, default=None,
                        help="set every geom's contact margin to this on both engines (default: the model's)")
    parser.add_argument("--lone", metavar="ROBOT,FOOT", default=None,
                        help="instead: one sphere like that robot's foot (FR, FL, RR or RL) alone on the terrain")
    parser.add_argument("--crop", type=int, default=None, help="with --lone: keep this many cells each side")
    parser.add_argument("--nconmax", type=int, default=None, help="contacts per world (MuJoCo Warp's default if unset)")
    parser.add_argument("--njmax", type=int, default=None, help="constraint rows per world (default: MuJoCo Warp's)")
    args = parser.parse_args()
    if not 1 <= args.robots <= 4096:
        parser.error("--robots must be between 1 and 4096")
    if args.margin is not None and not 0.0 <= args.margin <= 0.1:   # also refuses nan
        parser.error(f"--margin must be between 0 and 0.1 m, got {args.margin}")
    lone = None
    if args.lone is not None:
        robot, _, foot = args.lone.partition(",")
        if not robot.isdigit() or not 0 <= int(robot) < args.robots or foot not in ("FR", "FL", "RR", "RL"):
            parser.error(f"--lone takes ROBOT,FOOT with ROBOT in 0..{args.robots - 1} and FOOT one of FR, FL, RR, RL; "
                         f"got {args.lone!r}")
        lone = (int(robot), foot)
    if args.crop is not None and not 1 <= args.crop <= 1000:
        parser.error("--crop must be between 1 and 1000 cells")
    for name in ("nconmax", "njmax"):
        if getattr(args, name) is not None and not 1 <= getattr(args, name) <= 65536:
            parser.error(f"--{name} must be between 1 and 65536")
    try:
        import mujoco
        import mujoco_warp as mjw
        import numpy as np
        import torch
        import warp as wp
    except ImportError as e:
        print(f"needs MuJoCo Warp (pip install 'rl-gpu[mujoco-warp]'): {e}")
        return 0
    from rl_gpu.envs.mujoco.rough import Go1RoughEnv

    torch.set_num_threads(1)
    n = args.robots
    env = Go1RoughEnv(n, num_threads=1, seed=args.seed, randomization=None)
    physics = env.state.inner.physics.numpy()
    model = env.model
    model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    if args.margin is not None:
        model.geom_margin[:] = args.margin
    lay = env.layout
    qpos, qvel = physics[:, lay.qpos], physics[:, lay.qvel]
    if lone is not None:
        lone_model = lone_sphere(model, qpos, *lone, args.crop).compile()
        start = lone_model.qpos0
        data = mujoco.MjData(lone_model)
        mujoco.mj_forward(lone_model, data)
        print(f"one sphere like robot {lone[0]}'s {lone[1]} foot on the terrain's height field "
              f"({lone_model.hfield_nrow[0]} x {lone_model.hfield_ncol[0]} cells), elliptic cone")
        print("C engine contacts (depth m, x, y):",
              [(round(float(c.dist), 4), round(float(c.pos[0]), 3), round(float(c.pos[1]), 3))
               for c in data.contact[:data.ncon]])
        wp.init()
        with wp.ScopedDevice("cpu"):
            data_w = mjw.put_data(lone_model, mujoco.MjData(lone_model), nworld=1)
            wp.to_torch(data_w.qpos).copy_(torch.as_tensor(start, dtype=torch.float32)[None])
            mjw.forward(mjw.put_model(lone_model), data_w)
            count = int(wp.to_torch(data_w.nacon)[0])
            dist, pos = wp.to_torch(data_w.contact.dist)[:count], wp.to_torch(data_w.contact.pos)[:count]
        print("MuJoCo Warp contacts (depth m, x, y):",
              [(round(float(d), 4), round(float(p[0]), 3), round(float(p[1]), 3)) for d, p in zip(dist, pos)])
        return 0
    ctrl = qpos[:, 7:]  # the servos' targets: the joints' own positions

    c_deepest, c_qpos = [], []
    for r in range(n):
        data = mujoco.MjData(model)
        data.qpos[:], data.qvel[:], data.ctrl[:] = qpos[r], qvel[r], ctrl[r]
        mujoco.mj_forward(model, data)
        c_deepest.append(min((data.contact[i].dist for i in range(data.ncon)), default=float("inf")))
        mujoco.mj_step(model, data)
        c_qpos.append(data.qpos.copy())
    wp.init()
    with wp.ScopedDevice("cpu"):
        model_w = mjw.put_model(model)
        data_w = mjw.put_data(model, mujoco.MjData(model), nworld=n, nconmax=args.nconmax, njmax=args.njmax)
        for name, value in (("qpos", qpos), ("qvel", qvel), ("ctrl", ctrl)):
            wp.to_torch(getattr(data_w, name)).copy_(torch.as_tensor(value, dtype=torch.float32))
        mjw.forward(model_w, data_w)
        count = int(wp.to_torch(data_w.nacon)[0])
        dist = wp.to_torch(data_w.contact.dist)[:count].clone()
        world = wp.to_torch(data_w.contact.worldid)[:count].clone()
        pos = wp.to_torch(data_w.contact.pos)[:count].clone()
        geoms = wp.to_torch(data_w.contact.geom)[:count].clone()
        capacity = data_w.naconmax
        mjw.step(model_w, data_w)
        w_qpos = wp.to_torch(data_w.qpos).double().numpy()
    w_deepest = [float(dist[world == r].min()) if bool((world == r).any()) else float("inf") for r in range(n)]
    differ = [r for r in range(n) if abs(c_deepest[r] - w_deepest[r]) > 2e-3]
    moved = np.abs(np.array(c_qpos) - w_qpos).max(axis=1)
    print(f"mujoco {mujoco.__version__}, mujoco_warp {getattr(mjw, '__version__', '?')}; Go1-Rough-v0, {n} robots "
          f"(seed {args.seed}), elliptic cone on both engines")
    print(f"MuJoCo Warp's contacts: {count} of the {capacity} allocated for all worlds"
          f"{' (OVERFLOW: contacts were dropped)' if count > capacity else ''}; most in one world: "
          f"{int(torch.bincount(world.long(), minlength=n).max()) if count else 0}")
    print(f"deepest contact: C engine {min(c_deepest):.4f} m, MuJoCo Warp {min(w_deepest):.4f} m")
    print(f"robots whose deepest contacts differ by more than 2 mm: {len(differ)} of {n}")
    print(f"robots whose qpos differs by more than 1e-3 after one physics step: {int((moved > 1e-3).sum())} of {n} "
          f"(largest {moved.max():.3g})")
    if count:
        k = int(torch.argmin(dist))
        r = int(world[k])
        data = mujoco.MjData(model)
        data.qpos[:] = qpos[r]
        mujoco.mj_kinematics(model, data)
        feet = [data.geom_xpos[model.geom(name).id] for name in ("FR", "FL", "RR", "RL")]
        nearest = min(float(np.linalg.norm(f[:2] - pos[k, :2].numpy())) for f in feet)
        pair = " / ".join(model.geom(int(g)).name or f"geom {int(g)}" for g in geoms[k])
        print(f"MuJoCo Warp's deepest contact: robot {r}, {float(dist[k]):.4f} m deep at "
              f"({pos[k, 0]:.2f}, {pos[k, 1]:.2f}), {nearest:.2f} m from the nearest foot, between {pair}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
