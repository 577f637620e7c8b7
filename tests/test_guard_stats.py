"""The guard's statistics: Student's t, the paired and Welch intervals on log ratios, the verdict,
and the error rates they promise (simulated)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cudaopt.guard.stats import Interval, paired, t_cdf, t_quantile, unpaired, verdict

# Published two-sided critical values of Student's t.
TABLE = [(0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 4, 2.7764), (0.975, 9, 2.2622), (0.975, 30, 2.0423),
         (0.95, 2, 2.9200), (0.995, 5, 4.0321), (0.9995, 10, 4.5869)]


@pytest.mark.parametrize("p,df,expected", TABLE)
def test_t_quantiles_match_the_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-4)
    assert t_cdf(expected, df) == pytest.approx(p, abs=1e-5)


def test_t_is_symmetric_and_tends_to_the_normal():
    assert t_cdf(0.0, 3) == pytest.approx(0.5)
    assert t_cdf(-1.3, 7) == pytest.approx(1 - t_cdf(1.3, 7))
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959964, abs=1e-4)
    assert t_quantile(0.975, 2.5) < t_quantile(0.975, 2)  # fractional degrees of freedom (Welch) fall between


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        t_quantile(0.4, 3)
    with pytest.raises(ValueError, match="at least 2 pairs"):
        paired([1.0], [1.0])
    with pytest.raises(ValueError, match="3 candidate medians but 2"):
        paired([1.0, 1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="positive and finite"):
        paired([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="positive and finite"):
        unpaired([1.0, float("nan")], [1.0, 1.0])
    with pytest.raises(ValueError, match="2 repeats on each side"):
        unpaired([1.0, 1.0], [1.0])


def test_the_paired_interval_by_hand():
    candidate, baseline = [10.5, 10.7, 10.4, 10.6], [10.0, 10.1, 10.0, 10.0]
    logs = [math.log(c / b) for c, b in zip(candidate, baseline, strict=True)]
    mean, sd = np.mean(logs), np.std(logs, ddof=1)
    half = 3.182446 * sd / 2  # t(0.975, 3), sqrt(4) pairs
    got = paired(candidate, baseline, 0.95)
    assert got.ratio == pytest.approx(math.exp(mean))
    assert (got.low, got.high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)), rel=1e-6)
    assert got.n == 4 and "paired" in got.method


def test_the_welch_interval_by_hand():
    now, then = [10.6, 10.4, 10.5], [10.0, 10.2, 10.1, 9.9]
    a, b = np.log(now), np.log(then)
    va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    half = t_quantile(0.975, df) * math.sqrt(va + vb)
    got = unpaired(now, then)
    assert got.ratio == pytest.approx(math.exp(a.mean() - b.mean()))
    assert got.low == pytest.approx(math.exp(a.mean() - b.mean() - half))
    assert got.n == 3 and "Welch" in got.method


def test_identical_medians_are_within():
    same = paired([5.0, 5.0, 5.0], [5.0, 5.0, 5.0])
    assert (same.ratio, same.low, same.high) == (1.0, 1.0, 1.0)
    assert verdict(same, 0.03) == "within"
    assert verdict(unpaired([5.0, 5.0], [5.0, 5.0]), 0.03) == "within"


@pytest.mark.parametrize("low,high,expected", [
    (1.04, 1.06, "regressed"),     # slower beyond +3% with confidence
    (1.00, 1.04, "inconclusive"),  # +4% not ruled out
    (1.025, 1.035, "inconclusive"),
    (0.99, 1.01, "within"),
    (0.97, 0.99, "within"),        # faster, but not beyond the limit
    (0.94, 0.96, "improved"),      # faster beyond 1/1.03
])
def test_verdicts(low, high, expected):
    assert verdict(Interval(ratio=math.sqrt(low * high), low=low, high=high, n=5, method=""), 0.03) == expected


def test_one_disturbed_pair_widens_the_interval_instead_of_failing():
    candidate = [10.0, 10.0, 12.0, 10.0, 10.0]  # one repeat hit by a clock drop
    baseline = [10.0, 10.01, 10.0, 9.99, 10.0]
    got = paired(candidate, baseline)
    assert got.ratio > 1.03 and got.low < 1.0
    assert verdict(got, 0.03) != "regressed"


def simulate(true_ratio: float, noise: float, pairs: int, trials: int = 4000, seed: int = 7) -> dict[str, float]:
    """Rates of each verdict for paired medians whose log ratio is normal(log true_ratio, noise)."""
    rng = np.random.default_rng(seed)
    counts: dict[str, int] = {}
    for _ in range(trials):
        baseline = 100.0 * np.exp(rng.normal(0, 0.02, pairs))  # drift shared by both sides of a pair
        candidate = baseline * true_ratio * np.exp(rng.normal(0, noise, pairs))
        v = verdict(paired(list(candidate), list(baseline)), 0.03)
        counts[v] = counts.get(v, 0) + 1
    return {k: v / trials for k, v in counts.items()}


def test_a_slowdown_exactly_at_the_limit_is_declared_at_the_promised_rate():
    rates = simulate(1.03, noise=0.01, pairs=5)
    assert 0.015 < rates.get("regressed", 0) < 0.035  # (1 - 0.95) / 2 = 2.5%


def test_an_unchanged_kernel_is_practically_never_a_regression():
    assert simulate(1.0, noise=0.01, pairs=5).get("regressed", 0) == 0
    assert simulate(1.0, noise=0.01, pairs=3).get("regressed", 0) < 0.001


def test_a_five_percent_slowdown_is_caught_when_the_pairs_agree():
    assert simulate(1.05, noise=0.003, pairs=5).get("regressed", 0) > 0.99
    assert simulate(1.10, noise=0.01, pairs=5).get("regressed", 0) > 0.99
