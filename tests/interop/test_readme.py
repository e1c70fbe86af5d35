"""Every ```python block of README.md runs as written, each in a fresh interpreter (a fork of a process that has
imported torch and rl_gpu and run nothing: tests/interop/block_runner.py).

Long runs are shrunk through :data:`SHRINK` (each replacement must still match the README, so the map cannot
silently go stale). A block that is deliberately partial starts with ``# not runnable: <reason>`` and is
skipped. The ONNX block reads the ``policy.onnx`` its preceding ``rl-gpu export`` line writes: the test writes
one first, with the same exporter, from an untrained CartPole policy.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
NOT_RUNNABLE = "# not runnable:"

SHRINK = {
    # What is replaced -> with what: the same code, fewer iterations.
    "for _ in range(50):\n    metrics = algo.iterate()": "for _ in range(2):\n    metrics = algo.iterate()",
    ".learn(100_000)": ".learn(256)",
    "RussianRouletteVectorized(4096,": "RussianRouletteVectorized(256,",
    "for _ in range(1000):\n    obs, reward,": "for _ in range(100):\n    obs, reward,",
    "num_envs=256, max_updates=40,": "num_envs=64, max_updates=1,",
    "resume=run.run_dir, max_updates=41": "resume=run.run_dir, max_updates=2",
}
NEEDS = {"stable_baselines3": "stable-baselines3", "onnxruntime": "onnxruntime", "gymnasium": "gymnasium",
         "mpe2": "mpe2 (and pettingzoo, vmas)"}


def _blocks() -> list[tuple[str, str]]:
    """``(where, code)`` of each python block: ``where`` is the heading above it and its line in README."""
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", README, re.S | re.M):
        line = README.count("\n", 0, match.start()) + 1
        heading = re.findall(r"^#+ (.+)$", README[: match.start()], re.M)[-1]
        blocks.append((f"{heading} (README.md:{line})", match.group(1)))
    return blocks


BLOCKS = _blocks()


def test_the_readme_has_runnable_blocks_and_every_shrink_applies():
    runnable = [code for _, code in BLOCKS if not code.startswith(NOT_RUNNABLE)]
    assert len(runnable) >= 4
    for old in SHRINK:
        assert sum(old in code for code in runnable) == 1, f"SHRINK key no longer in one README block: {old!r}"
    for where, code in BLOCKS:
        if code.startswith(NOT_RUNNABLE):
            reason = code.splitlines()[0].removeprefix(NOT_RUNNABLE).strip()
            assert reason, f"{where}: say why the block is not runnable"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working directory holding the ``policy.onnx`` the export section's command writes."""
    path = tmp_path_factory.mktemp("readme")
    if importlib.util.find_spec("onnx") is not None:
        from rl_gpu.envs.registry import make
        from rl_gpu.interop.export import to_onnx_bytes
        from rl_gpu.nn.actor_critic import policy_for_env

        # The legacy exporter: the same model, without the seconds torch.export takes to trace.
        policy = policy_for_env(make("CartPole-v1").spec)
        (path / "policy.onnx").write_bytes(to_onnx_bytes(policy, {"env_id": "CartPole-v1"}, dynamo=False))
    return path


@pytest.fixture(scope="module")
def run_block():
    """``run_block(code, cwd)`` -> ``(exit code, stderr)`` of ``python -c code`` run in ``cwd``, through one
    block runner per worker."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    runner = subprocess.Popen([sys.executable, str(Path(__file__).with_name("block_runner.py"))], cwd=ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(code: str, cwd: Path) -> tuple[int, str]:
        out, err = cwd / "block.out", cwd / "block.err"
        request = {"code": code, "cwd": str(cwd), "stdout": str(out), "stderr": str(err), "timeout": 120}
        runner.stdin.write(json.dumps(request) + "\n")
        runner.stdin.flush()
        answer = runner.stdout.readline()
        assert answer, "the block runner ended"
        return json.loads(answer)["returncode"], err.read_text()

    yield run
    runner.stdin.close()
    runner.wait(timeout=60)


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_readme_block_runs(where, code, workdir, run_block):
    if code.startswith(NOT_RUNNABLE):
        pytest.skip(code.splitlines()[0])
    for module, package in NEEDS.items():
        if re.search(rf"^(import|from) {module}\b", code, re.M) and importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {package}")
    if "policy.onnx" in code and not (workdir / "policy.onnx").exists():
        pytest.skip("needs onnx to write policy.onnx")
    for old, new in SHRINK.items():
        code = code.replace(old, new)
    returncode, stderr = run_block(code, workdir)
    assert returncode == 0, f"{where} failed:\n{code}\n{stderr[-3000:]}"
