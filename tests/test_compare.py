import numpy as np
import pytest

from cudaopt.worker.compare import compare, describe, poison_array
from cudaopt.worker.inputs import from_numbers, to_numbers


def test_exact_and_within_tolerance_pass():
    ref = np.linspace(-1, 1, 100)
    out = (ref * (1 + 1e-6)).astype(np.float32)
    info = compare("c", out, ref, "float32", rtol=1e-5, atol=1e-6, input_set=0)
    assert info.ok and info.mismatches == 0 and info.max_abs_error < 1e-5


def test_first_bad_index_expected_and_actual():
    ref = np.zeros((4, 5))
    out = np.zeros((4, 5), dtype=np.float32)
    out[2, 3] = 1.0
    out[3, 0] = 2.0
    info = compare("c", out, ref, "float32", 0.0, 1e-3, input_set=1)
    assert not info.ok
    assert info.mismatches == 2 and info.first_bad_index == [2, 3]
    assert info.expected == 0.0 and info.actual == 1.0
    assert "first at (2, 3)" in describe(info)


def test_poison_is_counted_as_unwritten():
    ref = np.ones(10)
    out = np.ones(10, dtype=np.float32)
    out[7:] = poison_array((3,), "float32")
    info = compare("c", out, ref, "float32", 1e-5, 1e-5, 0)
    assert info.unwritten == 3 and info.mismatches == 3 and info.nan_count == 0


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_poison_is_nan_in_every_float_type(dtype):
    poison = poison_array((4,), dtype)
    assert np.isnan(to_numbers(poison, dtype).astype(np.float64)).all()


def test_integer_poison_value_that_is_the_right_answer_is_not_unwritten():
    poison = poison_array((1,), "int8")
    ref = poison.astype(np.float64)  # the right answer happens to equal the poison byte
    info = compare("c", poison.copy(), ref, "int8", 0, 0, 0)
    assert info.ok and info.unwritten == 0


def test_nan_passes_only_where_the_reference_is_nan():
    ref = np.array([np.nan, 1.0, np.inf])
    out = np.array([np.nan, np.nan, np.inf], dtype=np.float32)
    info = compare("c", out, ref, "float32", 1e-3, 1e-3, 0)
    assert info.mismatches == 1 and info.first_bad_index == [1] and info.nan_count == 2


def test_bfloat16_outputs_compare_as_numbers():
    ref = np.array([1.0, 2.0, 3.0])
    out = from_numbers(np.array([1.0, 2.0, 3.01], dtype=np.float32), "bfloat16")
    assert compare("c", out, ref, "bfloat16", 1e-2, 0, 0).ok
    assert not compare("c", out, ref, "bfloat16", 1e-4, 0, 0).ok


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="shape"):
        compare("c", np.zeros(3, dtype=np.float32), np.zeros(4), "float32", 0, 0, 0)
