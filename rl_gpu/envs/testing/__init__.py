"""Test support for tensor environments, shipped with the library so that users can check their own.

A vectorised environment can be wrong in a few rows and still train; these checks find such rows and name
them (:class:`EnvCheckError`: check, env row, step, field, expected and actual values).

- :mod:`~rl_gpu.envs.testing.contract` and :mod:`~rl_gpu.envs.testing.resets`: generic checks that need only
  an :class:`EnvFactory` (:func:`check_env` runs them all),
- :mod:`~rl_gpu.envs.testing.parity`: :func:`check_reference_parity` against N copies of a plain-Python
  :class:`ScalarReference`,
- :mod:`~rl_gpu.envs.testing.drive`: random legal actions and single rows in and out of a batched state,
- :mod:`~rl_gpu.envs.testing.report` and :mod:`~rl_gpu.envs.testing.compare`: what a check returns or
  raises, and the row-wise comparisons behind it,
- :mod:`~rl_gpu.envs.testing.gym_reference`: Gymnasium's classic-control environments as references (imports
  ``gymnasium``, so it is not imported here).
- :mod:`~rl_gpu.envs.testing.openspiel_reference`: OpenSpiel's ``leduc_poker`` as the reference of
  LeducHoldem-v0 (imports ``open_spiel``, so it is not imported here).

Example::

    from functools import partial

    from rl_gpu.envs.testing import check_env, check_reference_parity

    check_env(partial(MyEnv, device="cpu"))
    check_reference_parity(MyEnv(512, seed=0), MyScalarGame, to_reference=MyScalarGame.from_row)
"""

from __future__ import annotations

from rl_gpu.envs.testing.contract import (
    check_action_masks,
    check_batch_vs_single,
    check_determinism,
    check_env,
)
from rl_gpu.envs.testing.drive import EnvFactory, inner_row, sample_actions, stack_rows
from rl_gpu.envs.testing.parity import ScalarReference, check_reference_parity
from rl_gpu.envs.testing.report import CheckReport, EnvCheckError, ParityError
from rl_gpu.envs.testing.resets import check_autoreset, check_frozen_rows

__all__ = [
    "CheckReport",
    "EnvCheckError",
    "EnvFactory",
    "ParityError",
    "ScalarReference",
    "check_action_masks",
    "check_autoreset",
    "check_batch_vs_single",
    "check_determinism",
    "check_env",
    "check_frozen_rows",
    "check_reference_parity",
    "inner_row",
    "sample_actions",
    "stack_rows",
]
