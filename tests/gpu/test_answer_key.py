"""The answer key is locked on the device, and fresh inputs are what the audit expects (in-process)."""

from __future__ import annotations

import numpy as np
import pytest

from cudaopt.wire.protocol import InitSpec, OutputSpec

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    from cudaopt.worker.gpu import Gpu

    return Gpu(0)


def test_a_locked_answer_is_mapped_without_access_except_while_compared(gpu):
    """Outside :meth:`opened` the mapping has no access at all: any kernel that touches it faults
    (seen on the H200: docs/benchmarks.md). Read through the driver, so nothing faults here."""
    from cuda.bindings import driver

    from cudaopt.worker.answers import LockedAnswer
    from cudaopt.worker.gpu import call

    location = driver.CUmemLocation()
    location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    location.id = gpu.device.device_id
    key = LockedAnswer(gpu, np.arange(4096, dtype=np.float64))
    try:
        assert int(call("cuMemGetAccess", location, key.ptr)) == 0  # CU_MEM_ACCESS_FLAGS_PROT_NONE
        with key.opened():
            assert int(call("cuMemGetAccess", location, key.ptr)) == 3  # PROT_READWRITE
        assert int(call("cuMemGetAccess", location, key.ptr)) == 0
        assert key.to_host()[:3].tolist() == [0.0, 1.0, 2.0]
        assert int(call("cuMemGetAccess", location, key.ptr)) == 0
    finally:
        key.close()


def test_a_locked_answer_compares_like_any_other(gpu):
    from cudaopt.worker.answers import LockedAnswer, check_output

    ref = np.linspace(-1, 1, 1000).reshape(10, 100)
    key = LockedAnswer(gpu, ref)
    out = gpu.alloc(ref.size * 4)
    try:
        values = ref.astype(np.float32)
        gpu.upload(int(out.handle), values)
        ok = check_output(gpu, "c", "float32", int(out.handle), values.nbytes, ref.shape, OutputSpec(shape=list(ref.shape)),
                          key, 0, "check")
        assert ok.ok and ok.max_abs_error < 1e-7
        values[3, 7] += 1
        gpu.upload(int(out.handle), values)
        bad = check_output(gpu, "c", "float32", int(out.handle), values.nbytes, ref.shape, OutputSpec(shape=list(ref.shape)),
                           key, 0, "check")
        assert not bad.ok and bad.first_bad_index == [3, 7] and bad.expected == pytest.approx(ref[3, 7])
    finally:
        key.close()
        out.close(gpu.stream)


def test_fresh_inputs_differ_per_stream_and_the_audit_sees_a_changed_one(gpu):
    from cudaopt.worker.buffers import CaseBuffers
    from cudaopt.worker.inputs import HostTensor
    from cudaopt.wire.signature import parse_signature

    sig = parse_signature('extern "C" __global__ void f(const float* x, const int* idx, float* y, int n)')
    n = 1 << 16
    sets = [{"x": HostTensor("x", "float32", np.zeros(n, np.float32)),
             "idx": HostTensor("idx", "int32", np.arange(n, dtype=np.int32))}]
    inits = {"x": InitSpec(dist="uniform", low=2.0, high=3.0), "idx": InitSpec(dist="integers", low=0, high=8,
                                                                                vary=False)}
    buffers = CaseBuffers(gpu, sig, sets, {"y": (n,)}, inits=inits)
    counters = gpu.alloc(16)
    try:
        def read(name, dtype):
            return gpu.download(buffers.inputs[name].ptr, buffers.inputs[name].nbytes).view(dtype)

        def scan(stream):
            gpu.fill_async(int(counters.handle), 16, b"\0")
            buffers.scan_launch(7, stream, int(counters.handle), inputs=True)
            return gpu.download(int(counters.handle), 16).view(np.uint64).tolist()

        buffers.stage_fresh(7, 1)
        first = read("x", np.float32).copy()
        assert 2.0 <= first.min() and first.max() < 3.0 and abs(first.mean() - 2.5) < 0.01
        assert (read("idx", np.int32) == np.arange(n)).all()  # an input that must not vary is copied
        assert scan(1) == [n, 0]  # every output still poisoned, inputs as staged
        buffers.stage_fresh(7, 2)
        assert (read("x", np.float32) != first).mean() > 0.99  # another launch, other values
        buffers.stage_fresh(7, 1)
        assert (read("x", np.float32) == first).all()  # drawn again for the reference: the same
        gpu.upload(buffers.inputs["x"].ptr + 40, np.array([9.0], np.float32))  # a kernel wrote an input
        assert scan(1) == [n, 1]
    finally:
        counters.close(gpu.stream)
        buffers.close()
