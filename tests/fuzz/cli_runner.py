"""What the fuzz suites share: their hypothesis settings, and running ``rl-gpu`` in the test process."""

from __future__ import annotations

import contextlib
import io
import os

from hypothesis import HealthCheck, settings

from rl_gpu.cli.main import main as rl_gpu_main

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                derandomize=bool(os.environ.get("CI")))
"""No deadline (a case may build environments); under CI (``CI`` set) the same cases every run, so a red CI
always means a change broke something, while local runs keep drawing new cases (a failure found there becomes an
``@example``)."""


def run_cli(*argv: str) -> tuple[int, str]:
    """``rl-gpu ARGV`` in this process: ``(exit code, stderr)``."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = rl_gpu_main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return code, err.getvalue()
