import hashlib

import numpy as np
import pytest

from cudaopt.worker.inputs import InputError, from_numbers, generate, to_numbers
from cudaopt.wire.protocol import CaseSpec, InitSpec, InputSpec, OutputSpec
from cudaopt.wire.signature import parse_signature

SIG = parse_signature('extern "C" __global__ void f(const float* x, const int* idx, float* y, int n)')


def case(x_init=None, idx_init=None, seed=3, n=4096):
    return CaseSpec(
        name="c", role="performance", scalars={"n": n}, seed=seed,
        inputs={
            "x": InputSpec(shape=["n"], init=x_init or InitSpec(dist="normal", mean=1.0, std=2.0)),
            "idx": InputSpec(shape=["n"], init=idx_init or InitSpec(dist="integers", low=0, high=1000)),
        },
        outputs={"y": OutputSpec(shape=["n"])},
    )


def test_generation_is_deterministic_and_seeded():
    a, b = generate(case(), SIG, 3), generate(case(), SIG, 3)
    for s in range(3):
        assert np.array_equal(a[s]["x"].data, b[s]["x"].data)
    other = generate(case(seed=4), SIG, 1)
    assert not np.array_equal(a[0]["x"].data, other[0]["x"].data)


def test_distributions_and_types():
    sets = generate(case(), SIG, 2)
    x, idx = sets[0]["x"].data, sets[0]["idx"].data
    assert x.dtype == np.float32 and idx.dtype == np.int32
    assert abs(x.mean() - 1.0) < 0.2 and abs(x.std() - 2.0) < 0.2
    assert idx.min() >= 0 and idx.max() < 1000
    assert not (x == 0).all()


def test_set_one_is_independent_and_set_two_is_a_near_duplicate_of_set_zero():
    sets = generate(case(), SIG, 3)
    x0, x1, x2 = (sets[s]["x"].data for s in range(3))
    assert (x0 != x1).mean() > 0.99
    half = x0.size // 2
    assert np.array_equal(x0[:half], x2[:half])  # same leading elements
    assert x2[-1] != x0[-1] and 0 < (x0 != x2).sum() < x0.size // 20


def test_a_draw_within_one_chunk_is_its_seeds_own_stream_and_a_larger_one_is_chunked(monkeypatch):
    """Draws of at most CHUNK elements are what they always were (recorded runs replay the same
    inputs); a larger draw is CHUNK-sized streams of their own, as deterministic."""
    import cudaopt.worker.inputs as inputs

    small = generate(case(n=4096), SIG, 1)[0]
    rng = np.random.default_rng(inputs._seed(case(n=4096), "x", 0))
    assert np.array_equal(small["x"].data, (rng.standard_normal(4096, dtype=np.float32) * np.float32(2.0)
                                            + np.float32(1.0)))
    monkeypatch.setattr(inputs, "CHUNK", 1000)
    big, again = generate(case(n=4096), SIG, 3), generate(case(n=4096), SIG, 3)
    x = big[0]["x"].data
    assert np.array_equal(x, again[0]["x"].data) and np.array_equal(big[2]["x"].data, again[2]["x"].data)
    assert not np.array_equal(x, small["x"].data)  # five streams now, not one
    assert not np.array_equal(x[:1000], x[1000:2000])  # each chunk its own stream
    assert abs(x.mean() - 1.0) < 0.2 and abs(x.std() - 2.0) < 0.2
    idx = big[0]["idx"].data
    assert idx.dtype == np.int32 and idx.min() >= 0 and idx.max() < 1000


def test_the_near_duplicate_changes_the_picks_it_always_did():
    """Set 2's changed elements: a sample of set 0's second half (sorted, unique) and its last."""
    import cudaopt.worker.inputs as inputs

    c = case(n=10001)
    sets = generate(c, SIG, 3)
    x0, x1, x2 = (sets[s]["x"].data for s in range(3))
    rng = np.random.default_rng(inputs._seed(c, "x", 1000))
    picks = np.unique(np.append(rng.integers(5000, 10001, size=(10001 - 5000) // 64), 10000))
    expected = x0.copy()
    expected[picks] = x1[picks]
    assert np.array_equal(x2, expected)


def test_inputs_that_must_not_vary_are_identical_across_sets():
    sets = generate(case(idx_init=InitSpec(dist="integers", low=0, high=10, vary=False)), SIG, 3)
    assert all(np.array_equal(sets[0]["idx"].data, sets[s]["idx"].data) for s in (1, 2))


def test_file_inputs_are_pinned_by_hash(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(4096, dtype=np.float32))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sets = generate(case(x_init=InitSpec(dist="file", file=str(path), sha256=digest)), SIG, 2)
    assert sets[1]["x"].data[10] == 10
    with pytest.raises(InputError, match="changed since"):
        generate(case(x_init=InitSpec(dist="file", file=str(path), sha256="0" * 64)), SIG, 1)
    with pytest.raises(InputError, match="has shape"):
        generate(case(x_init=InitSpec(dist="file", file=str(path)), n=10), SIG, 1)
    with pytest.raises(InputError, match="not found"):
        generate(case(x_init=InitSpec(dist="file", file=str(tmp_path / "none.npy"))), SIG, 1)


def test_bfloat16_round_trip_rounds_to_nearest_even():
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e38], dtype=np.float32)
    bits = from_numbers(values, "bfloat16")
    back = to_numbers(bits, "bfloat16")
    assert back[0] == 1.0 and back[1] == 1.0  # tie goes to even
    assert back[2] == pytest.approx(1.015625) and back[3] == -2.5
