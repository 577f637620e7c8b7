"""The real Device (worker/gpu.py) does what the interface (worker/device.py) and the CPU fake
(tests/fake_device.py) say: events measure milliseconds, launches run a loaded module's kernel
with a configuration, locked memory has no access until opened, memory_info answers."""

from __future__ import annotations

import numpy as np
import pytest

from cudaopt.compilekit.compiler import compile_kernel
from cudaopt.wire.protocol import KernelSpec

pytestmark = pytest.mark.gpu

SOURCE = ('extern "C" __global__ void twice(const float* x, float* y, int n) {\n'
          '    extern __shared__ float scratch[];\n'
          '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
          '    scratch[threadIdx.x] = i < n ? x[i] : 0.0f;\n'
          '    if (i < n) y[i] = 2.0f * scratch[threadIdx.x];\n'
          '}\n')


@pytest.fixture(scope="module")
def gpu():
    from cudaopt.worker.gpu import Gpu

    return Gpu(0)


def test_a_loaded_kernel_launches_with_a_configuration_and_events_time_it(gpu):
    module = gpu.load_module(compile_kernel(KernelSpec(source=SOURCE, entry="twice"), gpu.arch).cubin)
    kernel = module.get_kernel("twice")
    n = 1 << 16
    x, y = gpu.alloc(4 * n), gpu.alloc(4 * n)
    try:
        gpu.upload(int(x.handle), np.arange(n, dtype=np.float32))
        shared = 64 * 1024  # above the default limit: the launch opts in
        start = gpu.record_event()
        gpu.launch(kernel, (n // 256, 1, 1), (256, 1, 1), shared,
                   [np.uint64(int(x.handle)), np.uint64(int(y.handle)), np.int32(n)])
        end = gpu.record_event()
        gpu.stream.sync()
        assert 0 < end - start < 1000.0  # milliseconds
        out = gpu.download(int(y.handle), 4 * n).view(np.float32)
        assert np.array_equal(out, 2 * np.arange(n, dtype=np.float32))
    finally:
        x.close(gpu.stream)
        y.close(gpu.stream)


def test_locked_memory_has_no_access_until_opened(gpu):
    from cuda.bindings import driver

    from cudaopt.worker.driver import call

    location = driver.CUmemLocation()
    location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    location.id = gpu.device.device_id
    memory = gpu.lock_memory(1000)
    try:
        assert memory.size >= 1000
        assert int(call("cuMemGetAccess", location, memory.ptr)) == 0
        memory.set_readable(True)
        assert int(call("cuMemGetAccess", location, memory.ptr)) == 3
        memory.set_readable(False)
        assert int(call("cuMemGetAccess", location, memory.ptr)) == 0
    finally:
        memory.free()


def test_memory_info_and_the_wipes(gpu):
    free, total = gpu.memory_info()
    assert 0 < free <= total
    wipes = gpu.leftovers()
    buffer = gpu.alloc(4096)
    table = wipes.range_table([(int(buffer.handle), 4096)])
    try:
        wipes.poison()
        wipes.demote_l2(table)
        gpu.stream.sync()
    finally:
        table[0].close(gpu.stream)
        buffer.close(gpu.stream)
