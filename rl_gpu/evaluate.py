"""``python -m rl_gpu.evaluate``: the ``rl-gpu evaluate`` command (:mod:`rl_gpu.cli.evaluate`)."""

import sys

from rl_gpu.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
