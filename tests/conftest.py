import gc
import importlib
import os
import sys
from pathlib import Path

import pytest
import torch

# MuJoCo picks its OpenGL platform when first imported: let rl_gpu choose a headless one (EGL, OSMesa) before any
# test imports mujoco or Gymnasium's MuJoCo tasks, so that the video tests render wherever they run.
import rl_gpu.envs.mujoco  # noqa: F401,E402

# One intra-op thread, as the Makefile sets: the suite is small tensors, and extra threads only contend.
torch.set_num_threads(1)

# Inductor's compile workers forked from the test process instead of started as interpreters of their own: each
# of those imports torch and Inductor, seconds of a core per worker in every test process that compiles
# (benchmarks/HISTORY.md section 51). Not where CUDA is: a forked worker cannot use it, and Triton's compiles may.
if not torch.cuda.is_available():
    os.environ.setdefault("TORCHINDUCTOR_WORKER_START", "fork")


def pytest_collection_finish(session):
    """The objects of the imports and the collected tests, hundreds of thousands, are moved out of the cyclic
    collector's reach (``gc.freeze``): its full collections would walk them all, every few seconds, for the
    whole run. What each test module leaves alive (TorchDynamo and Inductor, loaded by the first test that
    compiles, their caches) follows after the module, once its garbage is collected."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="module")
def _freeze_what_the_module_left():
    yield
    gc.collect()  # walks only what is younger than the last freeze
    gc.freeze()


@pytest.fixture
def nothing_frozen():
    """For a test of what is frozen: everything frozen so far handed back to the collector, and frozen again after
    the test."""
    gc.collect()
    gc.unfreeze()
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _one_step_a_compiled_call(monkeypatch):
    """Compiled CPU rollouts run one step a call here: the two-step unit (the default) takes about twice as long to
    compile, and tests/runtime/test_compile.py checks that it gives the rollout of one step a call, bit for bit."""
    from rl_gpu.collect import engine

    monkeypatch.setattr(engine, "STEPS_PER_CALL", 1)


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="session")
def benchmark_script():
    """``benchmark_script(name)`` imports benchmarks/NAME.py (a folder of scripts, not a package)."""
    def load(name: str):
        sys.path.insert(0, str(BENCHMARKS))
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(str(BENCHMARKS))
    return load


@pytest.fixture(scope="session")
def call_main():
    """``call_main(command, *args)`` -> ``(exit code, stdout, stderr)`` of a command's ``main`` run in this process
    (tests/cli/cli_call.py, for the tests of any folder)."""
    folder = str(Path(__file__).resolve().parent / "cli")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module("cli_call").call_main
    finally:
        sys.path.remove(folder)
