"""Gymnasium's HalfCheetah MJCF sets its total mass with the compiler attribute MuJoCo deprecated; rl_gpu applies
it the way the deprecation says (``mj_setTotalmass`` and ``mj_setConst`` after compiling): the same model to the
last bit, and no deprecation warning."""

import warnings

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
pytest.importorskip("gymnasium.envs.mujoco")

from rl_gpu.envs.dependency_warnings import warnings_once  # noqa: E402
from rl_gpu.envs.mujoco.base import compile_mjcf  # noqa: E402
from rl_gpu.envs.mujoco.locomotion import gymnasium_asset  # noqa: E402


def test_half_cheetah_compiles_to_the_same_model_without_the_deprecated_attribute():
    path = gymnasium_asset("half_cheetah.xml")
    assert 'settotalmass="14"' in open(path).read()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with warnings_once(python=False):
            ours = compile_mjcf(path)
    assert not [w for w in caught if "settotalmass" in str(w.message)]
    theirs = mujoco.MjModel.from_xml_path(path)  # Gymnasium's way, with the deprecated attribute
    compared = 0
    for name in dir(theirs):
        value = getattr(theirs, name, None)
        if isinstance(value, np.ndarray) and not name.startswith("_"):
            np.testing.assert_array_equal(getattr(ours, name), value, err_msg=name)
            compared += 1
    assert compared > 100 and float(ours.body_mass.sum()) == pytest.approx(14.0)
