"""``python -m rl_gpu``: the ``rl-gpu`` command (:mod:`rl_gpu.cli.main`)."""

import sys

from rl_gpu.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
