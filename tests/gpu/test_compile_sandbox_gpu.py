"""The compile sandbox through a GPU worker: a hidden include (a comment spanning lines between
'#' and 'include') and a __has_include probe are refused, and nothing of the
planted file reaches the result."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

SECRET = "271828182"


@pytest.mark.parametrize("directive", [
    '#/* a comment\n   spanning lines */include "{path}"',
    '#define P(a, b) a##b\n#if P(__has_, include)("{path}")\n#define PLANTED 1\n#endif',
])
def test_a_hidden_include_of_a_host_file_is_refused_and_leaks_nothing(tmp_path, supervisor, small_request,
                                                                     directive):
    planted = tmp_path / "planted.h"
    planted.write_text(f"#define PLANTED {SECRET}\n")
    source = directive.format(path=planted) + """
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m * n) c[i] = PLANTED;
}
"""
    result = supervisor.evaluate(small_request(source))
    assert result.status == "compile_error" and "not allowed" in result.reason, result.reason
    assert SECRET not in result.to_json()


def test_the_worker_compiles_kernels_written_for_nvcc_in_a_confined_process(supervisor, small_request):
    """INFINITY and uint32_t, which NVRTC lacks, come from the in-memory host header; the worker's
    compiler process runs with no_new_privs, which Landlock confinement sets, where the kernel has it."""
    from pathlib import Path

    from cudaopt.compilekit import landlock

    source = """
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
    uint32_t row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    if (row < (uint32_t)m && col < (uint32_t)n) {
        float acc = 0.0f;
        for (int i = 0; i < k; ++i) acc = fmaf(a[row * k + i], b[i * n + col], acc);
        c[row * n + col] = fmaxf(acc, -INFINITY);
    }
}
"""
    result = supervisor.evaluate(small_request(source))
    assert result.status == "ok", result.reason
    worker = supervisor.workers[0].proc.pid
    compilers = []
    for proc in Path("/proc").iterdir():
        try:
            status = (proc / "status").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if f"PPid:\t{worker}\n" in status and b"cudaopt.compilekit.compile_process" in cmdline:
            compilers.append(status)
    assert compilers, "the worker compiled without a compiler process"
    try:
        landlock.abi_version()
    except landlock.LandlockUnavailable:
        return
    assert all("NoNewPrivs:\t1" in status for status in compilers)
