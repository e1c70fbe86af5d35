"""Confidence intervals the side-by-side benchmarks print: a mean over seeds with its percentile bootstrap."""

from __future__ import annotations

import numpy as np


def mean_ci(values: list[float], rng: np.random.Generator, draws: int = 2000) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``values`` and the 2.5th and 97.5th percentiles of ``draws`` bootstrap
    means (resampling the values with replacement)."""
    x = np.asarray(values)
    boots = [rng.choice(x, len(x)).mean() for _ in range(draws)]
    return float(x.mean()), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))
