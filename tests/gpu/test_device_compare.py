"""The on-device comparison agrees with the host comparison, element rule for element rule."""

from __future__ import annotations

import numpy as np
import pytest

from cudaopt.worker.compare import compare, poison_array
from cudaopt.worker.inputs import from_numbers

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    from cudaopt.worker.gpu import Gpu

    return Gpu(0)


def crafted(dtype: str, n: int = 5000):
    rng = np.random.default_rng(7)
    ref = rng.standard_normal(n) * 4
    if dtype.startswith(("int", "uint")):
        ref = np.rint(np.abs(ref)) if dtype.startswith("uint") else np.rint(ref)
    out = from_numbers(ref.astype(np.float32), dtype)
    values = out.copy()
    poison = poison_array((n,), dtype)
    values[10:20] = poison[10:20]  # unwritten
    values[100] = from_numbers(np.array([ref[100] + 50], dtype=np.float32), dtype)[0]  # wrong
    if dtype.startswith("float") or dtype == "bfloat16":
        values[200] = from_numbers(np.array([np.nan], dtype=np.float32), dtype)[0]  # NaN, ref finite
        ref[300] = np.nan
        values[300] = from_numbers(np.array([np.nan], dtype=np.float32), dtype)[0]  # NaN where ref is NaN
        ref[400] = np.inf
        values[400] = from_numbers(np.array([np.inf], dtype=np.float32), dtype)[0]  # matching infinity
    return values, ref


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32", "int8", "uint8"])
def test_device_compare_matches_host_compare(gpu, dtype):
    values, ref = crafted(dtype)
    rtol, atol = 1e-2, 1e-2
    host = compare("x", values, ref, dtype, rtol, atol, 0)
    out_buf, ref_buf = gpu.alloc(values.nbytes), gpu.alloc(ref.nbytes)
    gpu.upload(int(out_buf.handle), values)
    gpu.upload(int(ref_buf.handle), ref.astype(np.float64))
    dev = gpu.compare(int(out_buf.handle), int(ref_buf.handle), values.size, dtype, rtol, atol)
    assert dev["bad"] == host.mismatches > 0
    assert dev["unwritten"] == host.unwritten == 10
    assert dev["nan"] == host.nan_count
    assert dev["inf"] == host.inf_count
    assert dev["first_bad"] == host.first_bad_index[0] == 10
    assert dev["max_abs"] == pytest.approx(host.max_abs_error, rel=1e-12)
    rel_l2 = np.sqrt(dev["err_sq"] / dev["ref_sq"])
    assert rel_l2 == pytest.approx(host.rel_l2_error, rel=1e-9)


def test_device_diff_bytes_finds_the_first_change(gpu):
    a = np.arange(10000, dtype=np.uint8)
    b = a.copy()
    b[[1234, 5000, 9999]] += 1
    buf_a, buf_b = gpu.alloc(a.nbytes), gpu.alloc(b.nbytes)
    gpu.upload(int(buf_a.handle), a)
    gpu.upload(int(buf_b.handle), b)
    assert gpu.diff_bytes(int(buf_a.handle), int(buf_b.handle), a.size) == (3, 1234)
    assert gpu.diff_bytes(int(buf_a.handle), int(buf_a.handle), a.size) == (0, None)
