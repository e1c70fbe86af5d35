"""``python -m rl_gpu.train``: the ``rl-gpu train`` command (:mod:`rl_gpu.cli.train`)."""

import sys

from rl_gpu.cli.safe_path import drop_cwd_from_path

if __name__ == "__main__":  # first, before any other import
    drop_cwd_from_path()

from rl_gpu.cli.train import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
