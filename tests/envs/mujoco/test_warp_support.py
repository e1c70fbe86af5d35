"""What the MuJoCo Warp backend refuses, and what Go1 changes to run on it; checked before Warp loads, so
these run without the ``mujoco-warp`` extra (its own tests, in test_warp_engine.py, are slow and need it)."""

from __future__ import annotations

import pytest

mujoco = pytest.importorskip("mujoco")

from rl_gpu.envs.mujoco import base as mj_base  # noqa: E402
from rl_gpu.envs.mujoco.base import compile_mjcf  # noqa: E402
from rl_gpu.envs.mujoco.quadruped import Go1VelocityEnv  # noqa: E402
from rl_gpu.envs.mujoco.rough import Go1RoughEnv  # noqa: E402
from rl_gpu.envs.mujoco.warp_engine import WarpEngine, check_supported  # noqa: E402


def test_a_pyramidal_cone_with_impratio_above_one_is_refused_in_one_line():
    model = compile_mjcf(Go1VelocityEnv.model_path())
    assert model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL and model.opt.impratio == 100
    with pytest.raises(ValueError, match=r"pyramidal friction cone with impratio=100") as error:
        WarpEngine([model], 2, 5)  # refused before Warp is imported
    assert "\n" not in str(error.value) and "elliptic" in str(error.value) and "backend='mujoco'" in str(error.value)
    model.opt.impratio = 1.0
    check_supported(model)
    model.opt.impratio = 100.0
    model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    check_supported(model)


class _Built(Exception):
    pass


def test_go1_rough_is_refused_on_mujoco_warp_in_one_line_before_anything_is_built(monkeypatch):
    def engine(*args, **kwargs):
        raise AssertionError("no engine is built")

    monkeypatch.setattr(mj_base, "WarpEngine", engine)
    with pytest.raises(ValueError, match="does not run on MuJoCo Warp: its height-field contacts") as error:
        Go1RoughEnv(2, num_threads=1, backend="mujoco-warp")
    assert "\n" not in str(error.value) and "backend='mujoco'" in str(error.value)


def test_go1_hands_mujoco_warp_an_elliptic_cone_and_the_c_engine_its_pyramidal_one(monkeypatch):
    models = []

    def engine(models_, *args, **kwargs):
        models.extend(models_)
        raise _Built

    monkeypatch.setattr(mj_base, "WarpEngine", engine)
    with pytest.raises(_Built):
        Go1VelocityEnv(2, num_threads=1, backend="mujoco-warp")
    assert models and all(m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC for m in models)
    for m in models:
        check_supported(m)
    env = Go1VelocityEnv(2, num_threads=1, randomization=None)
    assert env.model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL


@pytest.mark.parametrize("args, says", [
    (["--robots", "0"], "--robots must be between 1 and 4096"),
    (["--lone", "64,RL"], "--lone takes ROBOT,FOOT with ROBOT in 0..63"),
    (["--lone", "3,hand"], "FOOT one of FR, FL, RR, RL"),
    (["--lone", "x"], "--lone takes ROBOT,FOOT"),
    (["--crop", "0"], "--crop must be between 1 and 1000 cells"),
    (["--nconmax", "-1"], "--nconmax must be between 1 and 65536"),
    (["--margin", "nan"], "--margin must be between 0 and 0.1 m"),
])
def test_the_height_field_check_refuses_bad_arguments_in_one_line_before_it_builds_anything(args, says):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "warp_hfield_check.py"
    out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
