"""The guard's decision: is the kernel slower than before by more than the allowed slowdown?

Each repeat of a case gives one median per kernel (the median of the protocol's timed
launches). The quantity compared is the time ratio now / before; its logarithm is averaged,
because ratios compose multiplicatively and a log-symmetric interval treats a slow-down and a
speed-up of the same size alike.

- Paired (A/B in one run): repeat *i* measured the candidate and the old kernel back to back in
  the same worker, so what drifts (clocks, temperature, neighbours) cancels in the pair's log
  ratio. The interval is Student's t on the mean of the R paired log ratios.
- Unpaired (against recorded figures): the log medians of now and of the record are compared
  with Welch's t interval (unequal variances). It only knows the noise *within* each of the two
  measurements; whatever changed between the record and now reads as a change of the kernel.

Why a t interval and not a bootstrap: a guard in CI runs few repeats (3–10). With five values a
bootstrap has at most 126 distinct resamples and its percentile interval is known to be too
narrow (it ignores that the spread itself is estimated from five values); the t interval is
exact for normally distributed log ratios and widens properly when the repeats disagree.

The decision (``verdict``) with limit L = 1 + max_slowdown and a two-sided interval [low, high]:
``regressed`` when low > L (slower beyond the limit, with confidence); ``improved`` when
high < 1/L; ``inconclusive`` when high > L (a regression beyond the limit is not ruled out:
more repeats would tell); ``within`` otherwise. At a true slow-down of exactly L, a regression
is declared with probability (1 − confidence)/2; for an unchanged kernel, practically never.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["regressed", "improved", "within", "inconclusive"]


@dataclass(frozen=True)
class Interval:
    """A time ratio (candidate / baseline: above 1 is slower) with its confidence interval."""

    ratio: float
    low: float
    high: float
    n: int  # repeats behind it (pairs, or the candidate's repeats when unpaired)
    method: str


def paired(candidate: Sequence[float], baseline: Sequence[float], confidence: float = 0.95) -> Interval:
    """Student's t interval on the mean log ratio of paired medians."""
    if len(candidate) != len(baseline):
        raise ValueError(f"{len(candidate)} candidate medians but {len(baseline)} baseline medians")
    logs = [math.log(c / b) for c, b in zip(_positive(candidate), _positive(baseline), strict=True)]
    n = len(logs)
    if n < 2:
        raise ValueError("an interval needs at least 2 pairs")
    mean = statistics.fmean(logs)
    half = t_quantile(0.5 + confidence / 2, n - 1) * statistics.stdev(logs) / math.sqrt(n)
    return _interval(mean, half, n, f"paired t on log ratios, {n} pairs, {confidence:.0%}")


def unpaired(candidate: Sequence[float], recorded: Sequence[float], confidence: float = 0.95) -> Interval:
    """Welch's t interval on the difference of mean log medians (now against a record)."""
    now, then = [math.log(v) for v in _positive(candidate)], [math.log(v) for v in _positive(recorded)]
    if len(now) < 2 or len(then) < 2:
        raise ValueError("an unpaired interval needs at least 2 repeats on each side")
    vn, vt = statistics.variance(now) / len(now), statistics.variance(then) / len(then)
    spread = vn + vt
    if spread > 0:
        df = spread**2 / (vn**2 / (len(now) - 1) + vt**2 / (len(then) - 1))
    else:
        df = len(now) + len(then) - 2
    half = t_quantile(0.5 + confidence / 2, df) * math.sqrt(spread)
    mean = statistics.fmean(now) - statistics.fmean(then)
    return _interval(mean, half, len(now), f"Welch t on log medians, {len(now)} vs {len(then)} repeats, "
                                           f"{confidence:.0%}")


def verdict(interval: Interval, max_slowdown: float) -> Verdict:
    limit = 1.0 + max_slowdown
    if interval.low > limit:
        return "regressed"
    if interval.high < 1.0 / limit:
        return "improved"
    if interval.high > limit:
        return "inconclusive"
    return "within"


def _interval(mean_log: float, half: float, n: int, method: str) -> Interval:
    return Interval(ratio=math.exp(mean_log), low=math.exp(mean_log - half), high=math.exp(mean_log + half),
                    n=n, method=method)


def _positive(values: Sequence[float]) -> Sequence[float]:
    if any(not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0) for v in values):
        raise ValueError(f"medians must be positive and finite: {list(values)}")
    return values


# --- Student's t -----------------------------------------------------------------------------


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (df may be fractional: Welch)."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """The t value below which a fraction ``p`` (0.5 < p < 1) of the distribution lies (bisection)."""
    if not 0.5 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0 (p={p}, df={df})")
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * high:
            break
    return (low + high) / 2.0


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below this point
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return front * h / a
