"""The vendor baseline's calling convention and failures, with a stand-in for cupy (no GPU needed)."""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import pytest

from cudaopt.worker.vendor import Vendor, VendorError
from cudaopt.wire.protocol import VendorSpec
from cudaopt.wire.signature import parse_signature

SIGNATURE = parse_signature('extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, '
                            'int m, int n, int k)')
POINTERS = {"a": (0x1000, (2, 3)), "b": (0x2000, (3, 4)), "c": (0x3000, (2, 4))}
SCALARS = {"m": 2, "n": 4, "k": 3}
RECORDING = """
calls = []

def sgemm(a, b, c, *, m, n, k):
    calls.append((a, b, c, m, n, k))
"""


def spec(source: str, **kwargs) -> VendorSpec:
    return VendorSpec(source=source, entry="sgemm", path="vendor.py", label="cuBLAS", **kwargs)


@pytest.fixture
def cupy_log(monkeypatch):
    """A stand-in cupy that records the arrays it wraps, the stream it enters and the TF32 setting."""
    log: dict = {"streams": [], "compute_type": None}

    class ExternalStream:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            log["streams"].append(self.handle)

        def __exit__(self, *exc):
            return False

    cupy = types.ModuleType("cupy")
    cupy.asarray = lambda obj: dict(obj.__cuda_array_interface__)
    cupy.cuda = types.SimpleNamespace(ExternalStream=ExternalStream)
    core = types.ModuleType("cupy._core")
    linalg = types.ModuleType("cupy._core._routines_linalg")
    linalg.COMPUTE_TYPE_DEFAULT, linalg.COMPUTE_TYPE_TF32 = 1, 7
    linalg.set_compute_type = lambda dtype, kind: log.update(compute_type=(np.dtype(dtype).name, kind))
    core._routines_linalg = linalg
    for name, module in (("cupy", cupy), ("cupy._core", core), ("cupy._core._routines_linalg", linalg)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("CUPY_TF32", "unset")  # restored after the test
    return log


def test_every_argument_arrives_by_name_over_the_harness_buffers_on_its_stream(cupy_log):
    vendor = Vendor(spec(RECORDING), stream_handle=0xABC)
    vendor.bind(SIGNATURE, POINTERS, SCALARS)()
    ((a, b, c, m, n, k),) = vendor.fn.__globals__["calls"]
    assert a["data"] == (0x1000, False) and a["shape"] == (2, 3) and a["typestr"] == "<f4"
    assert b["data"][0] == 0x2000 and c["data"][0] == 0x3000 and c["shape"] == (2, 4)
    assert (m, n, k) == (2, 4, 3)
    assert cupy_log["streams"] == [0xABC]  # its launches queue on the harness's stream


def test_tf32_is_off_unless_the_experiment_allows_it(cupy_log):
    Vendor(spec(RECORDING), stream_handle=1)
    assert cupy_log["compute_type"] == ("float32", 1) and os.environ["CUPY_TF32"] == "0"
    Vendor(spec(RECORDING, allow_tf32=True), stream_handle=1)
    assert cupy_log["compute_type"] == ("float32", 7) and os.environ["CUPY_TF32"] == "1"


def test_a_failing_call_is_kept_and_later_calls_do_nothing(cupy_log):
    source = "count = []\ndef sgemm(**arrays):\n    count.append(1)\n    raise ValueError('shapes\\n not aligned')\n"
    vendor = Vendor(spec(source), stream_handle=1)
    bound = vendor.bind(SIGNATURE, POINTERS, SCALARS)
    bound()
    bound()
    assert bound.error == "cuBLAS: ValueError: shapes not aligned"
    assert vendor.fn.__globals__["count"] == [1]


def test_a_missing_library_or_function_is_a_clear_vendor_error(cupy_log, monkeypatch):
    with pytest.raises(VendorError, match="no function named 'sgemm'"):
        Vendor(spec("def other(): pass\n"), stream_handle=1)
    with pytest.raises(VendorError, match="vendor.py: ZeroDivisionError"):
        Vendor(spec("1 / 0\n"), stream_handle=1)
    monkeypatch.setitem(sys.modules, "cupy", None)  # as if cupy were not installed
    with pytest.raises(VendorError, match=r"needs cupy .*pip install cupy-cuda13x"):
        Vendor(spec(RECORDING), stream_handle=1)
