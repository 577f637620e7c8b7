"""Every header a kernel may include compiles from the pip wheels (no system CUDA), and kernels
written for nvcc find the host macros and types NVRTC lacks. No GPU needed."""

from __future__ import annotations

import os

import pytest

from cudaopt.compilekit.compile_process import COMPILERS
from cudaopt.compilekit.compiler import compile_kernel
from cudaopt.compilekit.nvrtc_build import HEADER_LIBS, header_roots
from cudaopt.compilekit.sandbox import check_includes
from cudaopt.wire.protocol import KernelSpec

BODY = '\nextern "C" __global__ void k(float* c) { c[0] = 1.0f; }\n'

# One header of each family the allow-list (sandbox._ALLOWED_HEADER) names.
FAMILIES = [
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_pipeline.h", "cuda_awbarrier.h", "cuda_runtime.h",
    "math_constants.h", "mma.h", "cooperative_groups.h", "cooperative_groups/reduce.h",
    "cooperative_groups/memcpy_async.h", "cuda/std/cstdint", "cuda/std/cmath", "cuda/pipeline", "cuda/barrier",
    "cuda/atomic", "cub/block/block_reduce.cuh", "cub/warp/warp_reduce.cuh", "nv/target", "thrust/functional.h",
    "crt/mma.h", "sm_61_intrinsics.h", "vector_types.h", "vector_functions.h", "device_types.h",
    "device_functions.h", "builtin_types.h", "curand_kernel.h", "curand.h", "cstdint", "stdint.h", "climits",
    "limits.h", "cfloat", "float.h", "cstddef", "stddef.h",
]


def test_the_header_roots_are_the_wheels_not_a_system_toolkit():
    roots = header_roots()
    assert {lib for lib, _, _ in roots} == set(HEADER_LIBS), f"missing header wheels: {roots}"
    system = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    for lib, directory, how in roots:
        assert how == "site-packages", (lib, directory, how)
        real = os.path.realpath(directory)
        assert not any(s and real.startswith(os.path.realpath(s)) for s in system), (lib, directory)
    # the compiler process reads these roots and, where Landlock is, nothing else
    assert COMPILERS.status()["roots"] == [list(r) for r in roots]


def test_the_wheels_win_even_where_a_system_toolkit_is_named(tmp_path):
    """CUDA_HOME / CUDA_PATH pointing at a system toolkit do not change the header roots."""
    import json
    import subprocess
    import sys

    system = tmp_path / "cuda"
    (system / "include" / "cccl" / "cuda" / "std").mkdir(parents=True)
    (system / "include" / "cuda_runtime.h").write_text("#error the system toolkit was used\n")
    (system / "include" / "cccl" / "cuda" / "std" / "version").write_text("#error the system toolkit was used\n")
    env = {**os.environ, "CUDA_HOME": str(system), "CUDA_PATH": str(system)}
    code = "import json; from cudaopt.compilekit.nvrtc_build import header_roots; print(json.dumps(header_roots()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    roots = json.loads(out)
    assert roots and all(how == "site-packages" and str(system) not in directory for _, directory, how in roots)


def test_every_allowed_header_family_compiles_in_one_kernel():
    source = "".join(f"#include <{h}>\n" for h in FAMILIES) + BODY
    check_includes(source)
    info = compile_kernel(KernelSpec(source=source, entry="k")).info
    # crt/mma.h and device_functions.h warn that they are internal: nothing else may
    warnings = [line for line in info.log.splitlines() if "warning #" in line and "#warning directive" not in line]
    assert info.ok and not warnings, info.log


HOST_NAMES = {
    "INFINITY": "static_assert(INFINITY > FLT_MAX, \"\"); constexpr float v = INFINITY;",
    "NAN": "constexpr float v = NAN; static_assert(v != v, \"\");",
    "HUGE_VALF / HUGE_VAL": "static_assert(HUGE_VALF == INFINITY && HUGE_VAL > DBL_MAX, \"\"); constexpr float v = 0;",
    "M_PI and friends": "static_assert(M_PI > 3.14159 && M_PI < 3.1416 && M_SQRT2 * M_SQRT1_2 > 0.99, \"\");"
                        "constexpr float v = M_PI + M_E + M_LN2 + M_PI_2 + M_1_PI + M_2_SQRTPI + M_LOG2E;",
    "float.h": "static_assert(FLT_MAX == 3.4028234663852886e38f && FLT_MIN > 0 && DBL_EPSILON < FLT_EPSILON, \"\");"
               "constexpr float v = FLT_MAX + FLT_MIN + FLT_EPSILON;",
    "limits.h": "static_assert(INT_MAX == 2147483647 && INT_MIN == -INT_MAX - 1 && UINT_MAX == 4294967295u"
                " && LLONG_MAX == 9223372036854775807LL && CHAR_BIT == 8 && LONG_MAX == ~0UL / 2, \"\");"
                "constexpr float v = INT_MAX;",
    "stdint": "static_assert(sizeof(uint8_t) == 1 && sizeof(int16_t) == 2 && sizeof(uint32_t) == 4"
              " && sizeof(int64_t) == 8 && sizeof(uintptr_t) == sizeof(void*) && UINT32_MAX == 0xffffffffu"
              " && SIZE_MAX == ~(size_t)0, \"\"); constexpr uint32_t v = INT32_MAX;",
}


@pytest.mark.parametrize("use", HOST_NAMES.values(), ids=HOST_NAMES.keys())
def test_a_kernel_written_for_nvcc_finds_the_host_names(use):
    source = use + '\nextern "C" __global__ void k(float* c) { c[0] = v; }\n'
    info = compile_kernel(KernelSpec(source=source, entry="k")).info
    assert info.ok and "warning" not in info.log, info.log


@pytest.mark.parametrize("includes", [
    "#include <cuda/std/cmath>\n#include <cuda/std/climits>\n#include <cuda/std/cstdint>\n#include <cuda/std/limits>",
    "#include <cstdint>\n#include <climits>\n#include <cfloat>\n#include <cstddef>\n#include <math_constants.h>\n"
    "static_assert(sizeof(std::uint64_t) == 8 && sizeof(std::size_t) == 8, \"\");",
    "#define M_PI 3.14159265f\n#define INFINITY CUDART_INF_F\n#include <math_constants.h>\n"
    "typedef unsigned int uint32_t;",
])
def test_the_host_names_do_not_clash_with_headers_or_the_kernels_own(includes):
    source = includes + """
extern "C" __global__ void k(float* c, uint32_t n, uint64_t m) {
    c[0] = INFINITY + NAN + M_PI + FLT_MAX + INT_MAX + (float)n + (float)m;
}
"""
    info = compile_kernel(KernelSpec(source=source, entry="k")).info
    assert info.ok and "warning" not in info.log, info.log


def test_a_define_of_a_host_name_wins():
    source = 'static_assert(M_PI == 3 && M_E > 2.7, "");\nextern "C" __global__ void k(float* c) { c[0] = M_PI; }'
    assert compile_kernel(KernelSpec(source=source, entry="k", defines={"M_PI": 3})).info.ok
