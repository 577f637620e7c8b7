"""The compile sandbox and the worker's environment (no GPU needed: NVRTC runs on the CPU)."""

from __future__ import annotations

import pytest

from cudaopt.compilekit.compiler import CompileError, compile_kernel, compile_ptx
from cudaopt.wire.protocol import KernelSpec
from cudaopt.compilekit.sandbox import IncludeError, check_includes, filter_log, worker_environment
from tests.conftest import kernel_source

BODY = '\nextern "C" __global__ void k(float* c) { c[0] = 1.0f; }\n'


@pytest.mark.parametrize("line", [
    '#include "/proc/self/environ"',
    "#include </proc/self/environ>",
    '#include "../experiment.json"',
    "#include <cuda/../../../etc/passwd>",
    '#include "input_cases.json"',
    "#include <stdlib.h>",
    "#define F \"/proc/self/environ\"\n#include F",
    "#  include \\\n\"/proc/self/environ\"",
    "#/* hidden */include \"/etc/hostname\"",
    "%:include \"/etc/hostname\"",
    "#include_next <cuda_fp16.h>",
    "#import \"/etc/hostname\"",
    'const char* s = "/*";\n#include "/etc/hostname"\n// */',
])
def test_includes_other_than_cuda_headers_are_refused(line):
    with pytest.raises(IncludeError):
        check_includes(line + BODY)


@pytest.mark.parametrize("line", [
    "#include <cuda_fp16.h>", '#include "cuda_bf16.h"', "#include <math_constants.h>", "#include <mma.h>",
    "#include <cooperative_groups.h>", "#include <cooperative_groups/reduce.h>", "#include <cuda/std/cstdint>",
    "#include <cuda/pipeline>", "#include <cuda_pipeline.h>", "// #include \"/etc/hostname\" (a comment)",
])
def test_cuda_headers_are_allowed(line):
    check_includes(line + BODY)


def test_a_refused_include_never_reaches_nvrtc_and_names_the_line():
    for compile_fn in (compile_kernel, compile_ptx):
        with pytest.raises(CompileError) as err:
            compile_fn(KernelSpec(source=kernel_source("include_environ.cu"), entry="matmul_f32"))
        assert "line 3" in err.value.log and "not allowed" in err.value.log
        assert "PATH=" not in err.value.log and "HOME=" not in err.value.log


@pytest.mark.parametrize("header", ["cuda_fp16.h", "cuda_bf16.h", "math_constants.h", "mma.h", "cuda_pipeline.h"])
def test_allowed_headers_compile_with_their_own_includes(header):
    # mma.h includes "mma.hpp" beside itself: the headers' own relative includes must still resolve
    compile_kernel(KernelSpec(source=f"#include <{header}>" + BODY, entry="k"))


def test_the_compile_log_keeps_only_the_kernel_and_cuda_headers():
    log = ("kernel.cu(3): error: identifier \"x\" is undefined\n  x = 1;\n  ^\n"
           "/home/user/secret.txt(1): error: expected a declaration\n  OPENAI_API_KEY=sk-123\n  ^\n"
           "/usr/local/cuda/include/cuda_fp16.hpp(10): warning: something\n  line\n"
           "2 errors detected in the compilation of \"kernel.cu\".")
    kept = filter_log(log, ["/usr/local/cuda/include"])
    assert "sk-123" not in kept and "secret.txt" not in kept
    assert "kernel.cu(3)" in kept and "x = 1;" in kept and "cuda_fp16.hpp(10)" in kept
    assert "2 errors detected" in kept and "removed" in kept


def test_the_worker_environment_carries_no_secret():
    parent = {"PATH": "/bin", "HOME": "/root", "OPENAI_API_KEY": "sk-1", "AWS_SECRET_ACCESS_KEY": "s",
              "GITHUB_TOKEN": "t", "CUDA_HOME": "/usr/local/cuda", "CUDAOPT_API_KEY": "k", "LC_ALL": "C",
              "NCCL_NVLS_ENABLE": "0", "MY_PASSWORD": "p", "ANTHROPIC_API_KEY": "a"}
    env = worker_environment(parent, CUDA_VISIBLE_DEVICES="0")
    assert env == {"PATH": "/bin", "HOME": "/root", "CUDA_HOME": "/usr/local/cuda", "LC_ALL": "C",
                   "NCCL_NVLS_ENABLE": "0", "CUDA_VISIBLE_DEVICES": "0"}


def test_a_worker_process_is_started_without_secrets_in_an_empty_directory(tmp_path, monkeypatch):
    """The real supervisor start path, with a stand-in worker that reports its environment."""
    import json
    import sys

    from cudaopt.pool.supervisor import Worker

    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-secret")
    script = tmp_path / "env_worker.py"
    seen = tmp_path / "seen.json"
    script.write_text("import json, os, sys\n"
                      f"open({str(seen)!r}, 'w').write(json.dumps({{'env': dict(os.environ), 'cwd': os.getcwd(), "
                      "'files': os.listdir('.')}))\n"
                      "print(json.dumps({'type': 'ready', 'device': {'name': 'probe'}}), flush=True)\n"
                      "sys.stdin.read()\n")
    worker = Worker(0, tmp_path / "worker.log", [sys.executable, str(script)])
    worker.start()
    try:
        info = json.loads(seen.read_text())
        assert "sk-planted-secret" not in json.dumps(info)
        assert "OPENAI_API_KEY" not in info["env"]
        assert info["files"] == [] and info["cwd"] != str(tmp_path)
    finally:
        worker.stop()


def test_the_standard_library_gets_a_hint_naming_libcuxx():
    source = 'extern "C" __global__ void k(float* c) { c[0] = std::fmax(1.0f, c[0]); }'
    with pytest.raises(CompileError) as err:
        compile_kernel(KernelSpec(source=source, entry="k"))
    assert 'namespace "std" has no member' in err.value.log and "hint: std is a host-only name" in err.value.log
    assert "cuda::std" in err.value.log
