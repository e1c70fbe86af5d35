"""Plain-Python scalar references of the built-in games: one game at a time, no tensors.

They are the ground truth that :func:`rl_gpu.envs.testing.check_reference_parity` compares the batched
tensor environments against, so they favour obvious code over speed.
"""

from rl_gpu.envs.reference.roulette import RouletteGame

__all__ = ["RouletteGame"]
