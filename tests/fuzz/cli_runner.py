"""Running ``rl-gpu`` in the test process, as the fuzz suites do: exit code and stderr."""

from __future__ import annotations

import contextlib
import io

from rl_gpu.cli.main import main as rl_gpu_main


def run_cli(*argv: str) -> tuple[int, str]:
    """``rl-gpu ARGV`` in this process: ``(exit code, stderr)``."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = rl_gpu_main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return code, err.getvalue()
