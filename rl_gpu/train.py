"""``python -m rl_gpu.train``: the ``rl-gpu train`` command (:mod:`rl_gpu.cli.train`)."""

import sys

from rl_gpu.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
