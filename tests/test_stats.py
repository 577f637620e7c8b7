import pytest

from cudaopt.wire.stats import geomean, summarize


def test_summary_of_known_samples():
    s = summarize([float(x) for x in range(1, 101)], "events")
    assert s.median_us == 50.5 and s.mean_us == 50.5
    assert s.min_us == 1 and s.max_us == 100 and s.n == 100
    assert s.p10_us == pytest.approx(10.9) and s.p90_us == pytest.approx(90.1)
    assert s.stdev_us == pytest.approx(29.0115, rel=1e-4)
    assert s.method == "events"


def test_one_sample_and_no_samples():
    assert summarize([3.0]).stdev_us == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_geomean():
    assert geomean([1.0, 100.0]) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        geomean([1.0, 0.0])
