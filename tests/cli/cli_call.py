"""Run a CLI command's ``main`` in this process, as its entry point runs it (imported by the tests of this folder)."""

import contextlib
import io


def call_main(command, *args):
    """``(exit code, stdout, stderr)`` of ``command([str(a) for a in args])``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = command([str(a) for a in args])
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()
