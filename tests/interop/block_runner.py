"""Runs Python blocks, each in a fresh interpreter state, without paying an interpreter's start for each.

Started as a process of its own (``python block_runner.py``), it imports what the README's blocks import (torch
and rl_gpu: seconds a process) once, then reads one JSON request a line from stdin: ``{"code", "cwd", "stdout",
"stderr", "timeout"}``. For each it forks a child that runs the block as ``python -c`` would (``__main__``, the
working folder, its output into the two files) and ends as that interpreter would (its atexit handlers, its
threads), killed by SIGALRM past ``timeout`` seconds. It answers ``{"returncode"}`` (a signal's as ``-signum``,
as ``subprocess`` gives it). This process itself runs no tensor code before it forks: no threads to lose.
"""

import json
import os
import signal
import sys
import traceback

import torch  # noqa: F401

import rl_gpu.algos.ppo  # noqa: F401
import rl_gpu.nn.actor_critic  # noqa: F401


def _child(request: dict) -> None:
    """Becomes the block's interpreter: never returns (``SystemExit`` unwinds to the interpreter's exit)."""
    os.chdir(request["cwd"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin.close()
    sys.argv = ["-c"]
    signal.alarm(int(request["timeout"]))
    code = 0
    try:
        exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.exit(code)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        print(json.dumps({"returncode": code}), flush=True)


if __name__ == "__main__":
    main()
