"""Summary statistics of latency samples."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .results import TimingStats


def summarize(samples_us: Sequence[float], method: str = "") -> TimingStats:
    """Median (the score), mean, sample stdev, min, max, p10 and p90 of ``samples_us``."""
    if not samples_us:
        raise ValueError("no timing samples")
    x = np.asarray(samples_us, dtype=np.float64)
    return TimingStats(
        median_us=float(np.median(x)),
        mean_us=float(x.mean()),
        stdev_us=float(x.std(ddof=1)) if x.size > 1 else 0.0,
        min_us=float(x.min()),
        max_us=float(x.max()),
        p10_us=float(np.percentile(x, 10)),
        p90_us=float(np.percentile(x, 90)),
        n=int(x.size),
        method=method,
    )


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values (the ranking score over performance cases)."""
    if not values or any(v <= 0 for v in values):
        raise ValueError("geometric mean needs positive values")
    return math.exp(sum(math.log(v) for v in values) / len(values))
