"""Rough terrain for legged robots: a grid of tiles, one row per difficulty level and one column per kind of ground
(legged_gym's terrain generator is the model), as one height field, and the curriculum rule that moves robots
between levels.

Shape legend: L levels (rows of tiles), K kinds (columns), C cells per tile side, N robots, S height samples.

The field is a ``[L C + 2 B, K C + 2 B]`` float array of heights in metres (``B`` cells of flat border on every
side): row ``i`` of cells runs along the world's x axis (x = i * resolution), column ``j`` along y, so tile
``(level, kind)`` covers ``x`` in ``border + [level, level + 1) * tile_size`` and ``y`` in ``border + [kind, kind + 1)
* tile_size``. Every tile has a flat platform at its centre, where robots start. Difficulty grows with the level:
``d = level / (L - 1)`` in [0, 1]. Generation is numpy from one seed: the same seed gives the same terrain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

KINDS = ("rough", "slope_up", "slope_down", "stairs_up", "stairs_down", "obstacles")
"""The kinds of ground, in column order: random bumps, pyramid slopes (``up``: the centre is the lowest point, so a
robot leaving it climbs; ``down``: the centre is the top), pyramid stairs (the same two ways) and random blocks."""


@dataclass(frozen=True)
class TerrainGrid:
    """The layout and the difficulty scales of the terrain (by default legged_gym's ranges, sized for ANYmal)."""

    levels: int = 10
    """L, rows of tiles, from flat-ish (level 0) to the hardest (level L - 1)."""
    kinds: tuple[str, ...] = KINDS
    """The columns' kinds of ground (names from :data:`KINDS`; repeat one to give it more columns)."""
    tile_size: float = 8.0
    """Side of a tile (m)."""
    resolution: float = 0.1
    """Side of a height-field cell (m)."""
    platform: float = 2.0
    """Side of the flat square at each tile's centre (m)."""
    border: float = 0.0
    """Flat ground at height 0 around the grid (m, whole cells): a robot that walks off an edge tile keeps walking
    instead of leaving the terrain (legged_gym's ``border_size``)."""
    max_bump: float = 0.1
    """Rough ground: bumps of U(-h, h) with h from 0.02 (level 0) to this (m)."""
    max_slope: float = 0.4
    """Slopes: rise over run from 0 to this."""
    max_step: float = 0.23
    """Stairs: step height from 0.05 to this (m), 0.3 m deep."""
    max_block: float = 0.25
    """Obstacles: blocks from 0.05 to this high (m), 1-2 m wide, 20 per tile."""

    def __post_init__(self) -> None:
        if isinstance(self.levels, bool) or not isinstance(self.levels, int) or self.levels < 1:
            raise ValueError(f"levels must be a positive int, got {self.levels!r}")
        unknown = [k for k in self.kinds if k not in KINDS]
        if not self.kinds or unknown:
            raise ValueError(f"kinds must be names from {KINDS}, got {self.kinds!r}")
        for name, least in (("max_bump", 0.02), ("max_slope", 0.0), ("max_step", 0.05), ("max_block", 0.05)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not least <= value <= 1.0:
                raise ValueError(f"{name} must be a number in [{least}, 1] (its level-0 value to 1 m), got {value!r}")
        if isinstance(self.border, bool) or not isinstance(self.border, (int, float)) or not 0 <= self.border <= 50:
            raise ValueError(f"border must be a number of metres in [0, 50], got {self.border!r}")
        if not (self.resolution > 0 and self.tile_size >= 4 * self.resolution and 0 <= self.platform
                < self.tile_size):
            raise ValueError("resolution, tile_size and platform must satisfy 0 < 4 resolution <= tile_size and "
                             "0 <= platform < tile_size")

    @property
    def cells(self) -> int:
        """C, cells along a tile's side."""
        return int(round(self.tile_size / self.resolution))

    @property
    def border_cells(self) -> int:
        """Cells of flat border on each side of the grid."""
        return int(round(self.border / self.resolution))

    def difficulty(self, level: int) -> float:
        """``d`` in [0, 1] of a level."""
        return level / (self.levels - 1) if self.levels > 1 else 0.0


def _distance_from_centre(c: int, resolution: float) -> np.ndarray:
    """``[C, C]`` Chebyshev distance (m) of each field point of a tile from its centre (pyramids are square)."""
    axis = np.arange(c) * resolution - c * resolution / 2  # the field points at multiples of the resolution
    return np.maximum(np.abs(axis)[:, None], np.abs(axis)[None, :])


def tile_heights(grid: TerrainGrid, kind: str, level: int, rng: np.random.Generator) -> np.ndarray:
    """``[C, C]`` heights (m) of one tile; the central platform is at height 0 except on ``slope_down`` and
    ``stairs_down`` tiles, whose platform is the top."""
    c, res, d = grid.cells, grid.resolution, grid.difficulty(level)
    r = _distance_from_centre(c, res)
    outside = np.maximum(r - grid.platform / 2, 0.0)  # run from the platform's edge (m)
    if kind == "rough":
        h = 0.02 + (grid.max_bump - 0.02) * d
        coarse = rng.uniform(-h, h, size=(math.ceil(c / 2), math.ceil(c / 2)))
        heights = np.kron(coarse, np.ones((2, 2)))[:c, :c]  # 20 cm patches at 0.1 m cells
        return np.where(r <= grid.platform / 2, 0.0, heights)
    if kind in ("slope_up", "slope_down"):
        slope = grid.max_slope * d
        return slope * outside * (1.0 if kind == "slope_up" else -1.0)
    if kind in ("stairs_up", "stairs_down"):
        step = 0.05 + (grid.max_step - 0.05) * d
        steps = np.ceil(outside / 0.3)
        return step * steps * (1.0 if kind == "stairs_up" else -1.0)
    if kind == "obstacles":
        height = 0.05 + (grid.max_block - 0.05) * d
        heights = np.zeros((c, c))
        for _ in range(20):
            w, h = (int(rng.integers(int(1.0 / res), int(2.0 / res) + 1)) for _ in range(2))
            i, j = int(rng.integers(0, c - w + 1)), int(rng.integers(0, c - h + 1))
            heights[i:i + w, j:j + h] = rng.uniform(-height, height)
        return np.where(r <= grid.platform / 2, 0.0, heights)
    raise ValueError(f"unknown kind {kind!r}; kinds are {KINDS}")


def generate_terrain(grid: TerrainGrid, seed: int) -> np.ndarray:
    """``[L C + 2 B, K C + 2 B]`` float64 heights (m) of the whole grid, tile by tile, from ``seed`` alone, inside
    ``B`` (:attr:`TerrainGrid.border_cells`) cells of flat border."""
    c = grid.cells
    field = np.zeros((grid.levels * c, len(grid.kinds) * c))
    for level in range(grid.levels):
        for column, kind in enumerate(grid.kinds):
            rng = np.random.default_rng([seed, level, column])
            field[level * c:(level + 1) * c, column * c:(column + 1) * c] = tile_heights(grid, kind, level, rng)
    return np.pad(field, grid.border_cells)


def tile_centres(grid: TerrainGrid, level: Tensor, column: Tensor) -> Tensor:
    """``[N, 2]`` float64 world (x, y) of the centres of the tiles ``(level [N], column [N])``."""
    edge = grid.border_cells * grid.resolution
    return torch.stack(((level.double() + 0.5) * grid.tile_size + edge,
                        (column.double() + 0.5) * grid.tile_size + edge), dim=1)


def sample_heights(field: Tensor, resolution: float, xy: Tensor) -> Tensor:
    """``[N, S]`` heights of the ``[R, Q]`` field at the world points ``xy`` (``[N, S, 2]``), linear between the
    field's points as MuJoCo's height-field surface is: each cell is split into two triangles along the diagonal
    from its (i, j) corner to its (i + 1, j + 1) corner, and the height is that triangle's plane. Points beyond the
    field take its edge."""
    rows, cols = field.shape
    u = (xy[..., 0] / resolution).clamp(0, rows - 1 - 1e-9)
    v = (xy[..., 1] / resolution).clamp(0, cols - 1 - 1e-9)
    i, j = u.long(), v.long()  # (truncation is the floor of these non-negative coordinates)
    fu, fv = u - i, v - j
    flat, at = field.reshape(-1), i * cols + j
    h00, h01, h10, h11 = flat[at], flat[at + 1], flat[at + cols], flat[at + cols + 1]
    lower = fu >= fv  # the triangle (i, j), (i + 1, j), (i + 1, j + 1)
    return torch.where(lower, h00 + fu * (h10 - h00) + fv * (h11 - h10),
                       h00 + fv * (h01 - h00) + fu * (h11 - h01))


def next_levels(level: Tensor, walked: Tensor, commanded: Tensor, grid: TerrainGrid,
                random_level: Tensor) -> Tensor:
    """``[N]`` levels of the robots' next episodes from their finished ones (legged_gym's rule): a robot that walked
    farther than half a tile from where it started moves up a level; one that walked less than half the distance
    its commands asked for moves down; one that moves up from the top level goes to ``random_level`` (``[N]``, drawn
    by the caller), so the top stays populated without piling up. Levels stay in ``[0, L)``."""
    up = walked > grid.tile_size / 2
    down = (walked < 0.5 * commanded) & ~up
    moved = level + up.long() - down.long()
    return torch.where(moved >= grid.levels, random_level, moved.clamp(min=0))
