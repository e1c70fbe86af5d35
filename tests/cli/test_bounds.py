"""Sizes and thread counts that no machine can serve are refused by every command in one line, before any work:
``--threads`` by the machine's CPU count, the rest by stated upper bounds (shown in each command's --help)."""

import contextlib
import io

import pytest

from rl_gpu.cli.main import main as rl_gpu_main
from rl_gpu.core.device import thread_limit

HUGE = str(10**12)


def _refusal(*argv: str) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
            pytest.raises(SystemExit) as info:
        rl_gpu_main(list(argv))
    lines = err.getvalue().strip().splitlines()
    assert info.value.code == 2 and len(lines) == 1, err.getvalue()
    return lines[0]


@pytest.mark.parametrize("flag, needle", [
    ("--threads", f"between 1 and {thread_limit()}"), ("--episodes", "at most 100,000,000"),
    ("--num-envs", "at most 100,000,000"),
])
def test_evaluate_refuses_huge_values(tmp_path, flag, needle):
    line = _refusal("evaluate", "--checkpoint", str(tmp_path / "best.pt"), flag, HUGE)
    assert line.startswith("rl-gpu evaluate: error:") and needle in line and flag in line


@pytest.mark.parametrize("flag, needle", [
    ("--threads", f"between 1 and {thread_limit()}"), ("--num-envs", "from 1 to 2,097,152"),
    ("--repeats", "at most 1,000"), ("--env-transitions", "at most 10,000,000,000"),
    ("--minibatch-size", "at most"), ("--num-steps", "at most 1,000,000"),
])
def test_bench_refuses_huge_values(tmp_path, flag, needle):
    line = _refusal("bench", "--output", str(tmp_path / "b.json"), "--measure", "env", flag, HUGE)
    assert line.startswith("rl-gpu bench: error:") and needle in line and flag in line
    assert not (tmp_path / "b.json").exists()
