"""``python -m rl_gpu``: the ``rl-gpu`` command (:mod:`rl_gpu.cli.main`)."""

import sys

from rl_gpu.cli.safe_path import drop_cwd_from_path

if __name__ == "__main__":  # first, before any other import
    drop_cwd_from_path()

from rl_gpu.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
