"""benchmarks/purejaxrl_compare.py says what is missing, and exits 2, before it measures anything."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "purejaxrl_compare.py"


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), "train", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_folder_without_purejaxrl_is_refused(tmp_path):
    out = _run(str(tmp_path), "--jax-python", sys.executable)
    assert out.returncode == 2
    assert "has no ppo.py and no wrappers.py" in out.stderr and "PureJaxRL checkout" in out.stderr


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None, reason="this environment has JAX")
def test_an_interpreter_without_jax_is_refused_with_the_install_line(tmp_path):
    for name in ("ppo.py", "wrappers.py"):
        (tmp_path / name).write_text("")
    out = _run(str(tmp_path), "--jax-python", sys.executable)
    assert out.returncode == 2
    assert "cannot import jax" in out.stderr
    assert "pip install jax flax optax distrax chex gymnax==0.0.9" in out.stderr


def test_a_missing_interpreter_is_refused(tmp_path):
    for name in ("ppo.py", "wrappers.py"):
        (tmp_path / name).write_text("")
    out = _run(str(tmp_path), "--jax-python", str(tmp_path / "no-python"))
    assert out.returncode == 2 and "no Python interpreter" in out.stderr and "--jax-python" in out.stderr
