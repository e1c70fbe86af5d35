"""What MinAtar's games share: 10x10 boolean frames, the minimal action sets, sticky actions, difficulty ramps.

Shape legend: N rows, C channels; a frame is ``[N, 10, 10, C]`` bool (``obs_dtype`` bool: rollouts store bytes,
the policy's CNN reads them as 0/1).

- **Actions** are each game's minimal action set, as ``minatar``'s Gymnasium ids ``MinAtar/<Game>-v1`` have them,
  mapped onto MinAtar's six (``n``, ``l``, ``u``, ``r``, ``d``, ``f``).
- **Sticky actions** (MinAtar's default, probability 0.1): with that probability the row's previous action is
  taken again instead of the one given. The draw is a counter-based hash of the row's key and step
  (:mod:`rl_gpu.envs.random_draws`), so a transition stays a pure function of the state.
- **A new episode** starts with the previous action ``n`` (as gymnax's ports; ``minatar.Environment`` carries the
  last action of the previous episode over).
- **Time limit**: none in MinAtar; 1,000 steps here (``truncated``, bootstrapped), as gymnax's ports have, so that
  a policy that never loses still ends its episodes and the two can be compared.
- **Difficulty ramps** (``difficulty_ramping``, on by default as in MinAtar) are the games' own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from rl_gpu.envs.base import TensorEnv
from rl_gpu.envs.random_draws import hash_uniform

ACTIONS = "nlurdf"
"""MinAtar's six actions: no-op, left, up, right, down, fire."""
STICKY_STREAM = 0
"""The :func:`~rl_gpu.envs.random_draws.hash_uniform` stream of the sticky-action draw (games draw on others)."""

S = TypeVar("S")


@dataclass(frozen=True)
class MinAtarParams:
    sticky_action_prob: float = 0.1
    """probability of repeating the previous action instead of the one given"""
    difficulty_ramping: bool = True
    """the game speeds up as it goes (each game's own rule)"""


class MinAtarEnv(TensorEnv[S]):
    """A MinAtar game: subclasses give ``minimal_actions`` (letters of :data:`ACTIONS`), ``obs_shape`` and the game."""

    obs_dtype = torch.bool
    max_episode_steps = 1000
    params_type = MinAtarParams
    minimal_actions: str = ACTIONS
    compile_simd = False  # boolean grids and integer counters (TensorEnv.compile_simd)

    def __init__(self, *args, **kwargs) -> None:
        self.num_actions = len(self.minimal_actions)
        super().__init__(*args, **kwargs)
        self._full_action = torch.tensor([ACTIONS.index(c) for c in self.minimal_actions], device=self.device)

    def _check_params(self) -> None:
        super()._check_params()
        if not 0.0 <= self.params.sticky_action_prob <= 1.0:
            raise ValueError(f"{type(self).__name__}: sticky_action_prob must be in [0, 1], got "
                             f"{self.params.sticky_action_prob!r}")

    # --- frames for videos (rl-gpu evaluate --video: an environment that draws itself) ----------------------

    film_row: int | None = None
    """The row whose frames :meth:`step` keeps in ``last_frame`` (drawn before an auto-reset)."""
    frame_rate = 15.0
    last_frame: np.ndarray | None = None

    def render_frame(self, row: int = 0) -> np.ndarray:
        """Row ``row``'s frame as an RGB image (160 x 160 uint8): each cell coloured by its highest channel set."""
        return _draw(self._newest(self.observe().obs[row]))

    def step(self, action: Tensor):
        result = super().step(action)
        if self.film_row is not None:
            self.last_frame = _draw(self._newest(result.final_obs[self.film_row]))
        return result

    def _newest(self, obs: Tensor) -> Tensor:
        """The last frame of ``obs`` (a frame-stacked observation, :mod:`rl_gpu.envs.wrappers`, draws its newest)."""
        newest = getattr(self, "newest_frame", None)
        return obs if newest is None else newest(obs)

    def full_action(self, action: Tensor) -> Tensor:
        """``[N]`` indices into :data:`ACTIONS` of the minimal-set actions ``action``."""
        return self._full_action[action.long()]

    def sticky(self, action: Tensor, last_action: Tensor, key: Tensor, t: Tensor) -> Tensor:
        """The action taken (indices into :data:`ACTIONS`): the previous one with probability
        ``sticky_action_prob``, else ``action`` (minimal-set indices)."""
        u = hash_uniform(key, t, STICKY_STREAM, 1)[:, 0]
        return torch.where(u < self.params.sticky_action_prob, last_action, self.full_action(action))


_PALETTE = np.array([[0, 0, 0], [230, 230, 230], [250, 200, 60], [90, 170, 250], [240, 90, 90], [120, 220, 120],
                     [200, 120, 240], [250, 150, 40], [60, 200, 200], [160, 160, 160], [255, 255, 255]], dtype=np.uint8)


def _draw(frame: Tensor, scale: int = 16) -> np.ndarray:
    """``[10, 10, C]`` bool -> ``[10 scale, 10 scale, 3]`` uint8: the highest channel set in each cell, coloured."""
    c = frame.shape[-1]
    level = (frame.cpu().long() * torch.arange(1, c + 1)).amax(-1).numpy() % len(_PALETTE)
    return np.ascontiguousarray(_PALETTE[level].repeat(scale, 0).repeat(scale, 1))


def cells(y: Tensor, x: Tensor) -> Tensor:
    """``[N, 10, 10]`` bool with one cell set per row, at ``(y, x)`` (``[N]`` int64 each, inside the grid)."""
    return torch.nn.functional.one_hot(y * 10 + x, 100).view(-1, 10, 10).bool()
