"""Go1-Rough-v0's height-field contacts on MuJoCo Warp against MuJoCo's C engine, from the same episode starts.

    python benchmarks/warp_hfield_check.py            # needs the mujoco-warp extra; Warp's CPU device is enough
    python benchmarks/warp_hfield_check.py --robots 256

Builds Go1-Rough-v0 on the C engine (nominal physics), takes its robots' first states, and runs the task's model
(with an elliptic friction cone on both engines, as Go1 runs on MuJoCo Warp) through MuJoCo's forward pass and one
physics step on each engine directly, without the environment (which refuses MuJoCo Warp for this task). Prints the
deepest contact of each engine, the robots whose deepest contacts differ by more than 2 mm, and the robots whose
qpos differs by more than 1e-3 after the step. MuJoCo Warp 4.0.0 gave foot contacts up to 1.26 m deep, half a
metre from the foot, on ground flat for 0.8 m around (the C engine: at most 3.5 cm), so
:class:`~rl_gpu.envs.mujoco.rough.Go1RoughEnv` refuses ``backend="mujoco-warp"`` on that version; a lone sphere
on the same terrain got the C engine's contacts. Run this again with a newer MuJoCo Warp before lifting it.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--robots", type=int, default=64, help="robots (worlds), 1 to 4096")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not 1 <= args.robots <= 4096:
        parser.error("--robots must be between 1 and 4096")
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
    lay = env.layout
    qpos, qvel = physics[:, lay.qpos], physics[:, lay.qvel]
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
        data_w = mjw.put_data(model, mujoco.MjData(model), nworld=n)
        for name, value in (("qpos", qpos), ("qvel", qvel), ("ctrl", ctrl)):
            wp.to_torch(getattr(data_w, name)).copy_(torch.as_tensor(value, dtype=torch.float32))
        mjw.forward(model_w, data_w)
        count = int(wp.to_torch(data_w.nacon)[0])
        dist = wp.to_torch(data_w.contact.dist)[:count].clone()
        world = wp.to_torch(data_w.contact.worldid)[:count].clone()
        pos = wp.to_torch(data_w.contact.pos)[:count].clone()
        mjw.step(model_w, data_w)
        w_qpos = wp.to_torch(data_w.qpos).double().numpy()
    w_deepest = [float(dist[world == r].min()) if bool((world == r).any()) else float("inf") for r in range(n)]
    differ = [r for r in range(n) if abs(c_deepest[r] - w_deepest[r]) > 2e-3]
    moved = np.abs(np.array(c_qpos) - w_qpos).max(axis=1)
    print(f"mujoco {mujoco.__version__}, mujoco_warp {getattr(mjw, '__version__', '?')}; Go1-Rough-v0, {n} robots "
          f"(seed {args.seed}), elliptic cone on both engines")
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
        print(f"MuJoCo Warp's deepest contact: robot {r}, {float(dist[k]):.4f} m deep at "
              f"({pos[k, 0]:.2f}, {pos[k, 1]:.2f}), {nearest:.2f} m from the nearest foot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
