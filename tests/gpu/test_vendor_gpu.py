"""The vendor baseline (cuBLAS SGEMM through cupy, and through torch) timed in the same worker."""

from __future__ import annotations

import pytest

from tests.conftest import kernel_source, optional
from tests.gpu.conftest import FAST

pytestmark = pytest.mark.gpu

SMALL = {"odd-31x37x29", "square-256", "rect-384x256x320"}


def request_with(sgemm, vendor):
    request = sgemm.request(kernel_source("tiled.cu"), protocol=FAST, vendor=True)
    request.cases = [c for c in request.cases if c.name in SMALL]
    request.vendors = [vendor]
    return request


def test_cublas_through_cupy_is_checked_and_timed_interleaved_with_the_candidate(supervisor, sgemm):
    optional("cupy")
    result = supervisor.evaluate(request_with(sgemm, sgemm.vendors[0]))
    assert result.status == "ok", result.reason
    for case in result.cases:
        if case.role == "correctness":
            assert case.vendors == []  # correctness cases are not timed
            continue
        (vendor,) = case.vendors
        assert vendor.status == "ok", vendor.reason
        assert vendor.label == "cuBLAS SGEMM (cupy)"
        assert vendor.checks and all(c.ok and c.unwritten == 0 for c in vendor.checks)
        assert vendor.timing.n == FAST.iterations and vendor.timing.median_us > 0
        assert case.timing.median_us / 10 < vendor.timing.median_us < case.timing.median_us * 10
        assert "interleaved with the candidate" in vendor.timing.method
        assert "interleaved with the vendor baseline" in case.timing.method
        for method in (vendor.timing.method, case.timing.method):
            assert "gate timed out" not in method  # cupy queued behind the gate, no host sync
        # the candidate's own timed outputs were checked, not the vendor's
        timed = [c for c in case.checks if c.phase == "timed"]
        assert [c.launch for c in timed] == case.scan.checked_launches and {c.input_set for c in timed} == {-1}


def test_cublas_through_torch(supervisor, sgemm):
    optional("torch")
    source = "import torch\n\ndef sgemm(a, b, c, *, m, n, k):\n    torch.matmul(a, b, out=c)\n"
    vendor = sgemm.vendors[0].model_copy(update={"source": source, "arrays": "torch", "label": "cuBLAS (torch)"})
    result = supervisor.evaluate(request_with(sgemm, vendor))
    assert result.status == "ok", result.reason
    timed = [c for c in result.cases if c.role == "performance"]
    assert all(c.vendors[0].status == "ok" and c.vendors[0].timing.median_us > 0 for c in timed), \
        timed[0].vendors[0].reason


@pytest.mark.parametrize(
    "body,status,reason",
    [
        ("c[...] = 0", "mismatch", "wrong"),
        ("return a @ b", "mismatch", "unwritten"),  # a new array instead of writing c in place
        ("raise RuntimeError('no cuBLAS today')", "error", "RuntimeError: no cuBLAS today"),
    ],
)
def test_a_failing_vendor_is_reported_and_never_fails_the_candidate(supervisor, sgemm, body, status, reason):
    optional("cupy")
    source = f"import cupy\n\ndef sgemm(a, b, c, *, m, n, k):\n    {body}\n"
    result = supervisor.evaluate(request_with(sgemm, sgemm.vendors[0].model_copy(update={"source": source})))
    assert result.status == "ok", result.reason
    (vendor,) = result.case("square-256").vendors
    assert vendor.status == status and reason in vendor.reason and vendor.timing is None
    if status == "mismatch":
        assert not vendor.checks[-1].ok and vendor.checks[-1].mismatches > 0  # with its error figures
