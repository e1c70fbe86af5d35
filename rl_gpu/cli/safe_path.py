"""The import path of ``python -m rl_gpu``: this module imports nothing but ``os`` and ``sys`` (already loaded),
so it can run before anything else is imported."""

import os
import sys


def drop_cwd_from_path() -> None:
    """Under ``python -m rl_gpu``, take the current directory (Python's ``sys.path[0]`` for ``-m``) off the
    import path, as the ``rl-gpu`` console script has it: a file lying in the directory (``torch.py``,
    ``gymnasium.py`` beside a downloaded checkpoint) then shadows no module. A module named with ``--env
    mymodule:MyEnv`` is still found there (:mod:`rl_gpu.envs.registry` looks in the current directory for the
    ids the user names)."""
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.getcwd():
        del sys.path[0]
