"""The compile sandbox's two defences: the include scan reads the source as the preprocessor does
(every hidden form refused before NVRTC runs), and the compiler process cannot open a host file
even when the scan is fooled (Landlock). No GPU needed: NVRTC runs on the CPU."""

from __future__ import annotations

import pytest

from cudaopt.compilekit import compiler
from cudaopt.compilekit.compile_process import COMPILERS
from cudaopt.compilekit.compiler import CompileError, compile_kernel, compile_ptx
from cudaopt.compilekit.sandbox import IncludeError, check_includes
from cudaopt.wire.protocol import KernelSpec

BODY = '\nextern "C" __global__ void k(float* c) { c[0] = 1.0f; }\n'
HOST = '"/etc/hostname"'

HIDDEN = {
    "comment between # and include": f"#/* c */include {HOST}",
    "comment before #": f"/* c */#include {HOST}",
    "comment spanning lines before #": f"/* a\n b */ #include {HOST}",
    "comment spanning lines between # and include": f"#/*\n*/include {HOST}",
    "comment spanning lines before the target": f"#include /*\n*/ {HOST}",
    "several comments": f"# /* a */ /* b\n */ include {HOST}",
    "line splice in the keyword": f"#inc\\\nlude {HOST}",
    "line splice before CRLF": f"#inc\\\r\nlude {HOST}",
    "line splice before the target": f"#  include \\\n{HOST}",
    "whitespace after a splice backslash": f"#inc\\ \nlude {HOST}",
    "a tab after #": f"#\tinclude {HOST}",
    "a form feed and a byte-order mark": f"\ufeff\f#\vinclude {HOST}",
    "digraph %:": f"%:include {HOST}",
    "digraph with a comment": f"%:/**/include {HOST}",
    "a quote in a character literal": f"char q = '\"';\n#include {HOST}\n// \"",
    "a digit separator": f"int n = 1'000;\n#include {HOST}\n// '",
    "comment opener in a string": f'const char* s = "/*";\n#include {HOST}\n// */',
    "comment opener after an escaped quote": f'const char* s = "\\"/*";\n#include {HOST}\n// */',
    "comment opener in a raw string": f'const char* s = R"x(/*)x";\n#include {HOST}\n// */',
    "comment opener in a prefixed string": f'auto s = u8"/*";\n#include {HOST}\n// */',
    "comment opener in a prefixed raw string": f'auto s = LR"(/*)";\n#include {HOST}\n// */',
    "unterminated character literal in #if 0": f"#if 0\ndon't /*\n#endif\n#include {HOST}\n// */",
    "__has_include": f"#if __has_include({HOST})\n#endif",
    "__has_include_next": "#if __has_include_next(<cuda_fp16.h>)\n#endif",
    "__has_include through a macro": f"#define H __has_include\n#if H({HOST})\n#endif",
    "__has_include built by token pasting": f"#define P(a, b) a##b\n#if P(__has_, include)({HOST})\n#endif",
    "__has_embed": f"#if __has_embed({HOST})\n#endif",
    "#include_next": "#include_next <cuda_fp16.h>",
    "#import": f"#import {HOST}",
    "#embed": f"const char x[] = {{\n#embed {HOST}\n}};",
    "computed include": f"#define F {HOST}\n#include F",
    "absolute path": f"#include {HOST}",
    "absolute path in angle brackets": "#include </proc/self/environ>",
    "dot-dot": "#include <cuda/../../../etc/passwd>",
    "a header not on the list": "#include <stdlib.h>",
    "a bare carriage return": f"// x\r#include {HOST}",
    "a NUL": f"\x00\n#include {HOST}",
    "an unterminated comment": "/* never closed",
    "an unterminated raw string": 'const char* s = R"x(never closed',
    "a splice inside a raw string": f'const char* s = R"x(\\\n)x";\n#include {HOST}',
}


@pytest.mark.parametrize("source", HIDDEN.values(), ids=HIDDEN.keys())
def test_every_hidden_include_is_refused_before_nvrtc_runs(source, monkeypatch):
    with pytest.raises(IncludeError):
        check_includes(source + BODY)

    def nvrtc(*args):
        raise AssertionError("NVRTC ran")

    monkeypatch.setattr(compiler, "compile_remote", nvrtc)
    for compile_fn in (compile_kernel, compile_ptx):
        with pytest.raises(CompileError, match="kernel.cu: (line|the define)"):
            compile_fn(KernelSpec(source=source + BODY, entry="k"))


def test_a_define_is_scanned_like_the_source():
    with pytest.raises(IncludeError, match="the define P"):
        check_includes("#if P\n#endif" + BODY, {"P": f"__has_include({HOST})"})
    check_includes("#if P\n#endif" + BODY, {"P": 1, "NAME": "float"})


HONEST = {
    "# in a string": 'const char* s = "#include \\"/etc/hostname\\"";',
    "include in a line comment": f"// #include {HOST}",
    "include in a block comment": f"/*\n#include {HOST}\n*/",
    "include in a spliced line comment": f"// a comment \\\n#include {HOST}",
    "include in a raw string": f'const char* s = R"(\n#include {HOST}\n)";',
    "__has_include in a string": 'const char* s = "__has_include";',
    "digit separators and a quote": "int n = 1'000'000; char q = '\"';\n#include <cuda_fp16.h>",
    "comments around an allowed include": "#include /* a */ <cuda_fp16.h> // b\n/* c */ # /* d */ include <mma.h>",
    "CRLF line ends": "#include <cuda_fp16.h>\r\n#define A 1 \\\r\n  + 2\r\n",
    "a directive-like text after code": f"int a; /* x\n */ # include {HOST}",
}


@pytest.mark.parametrize("source", HONEST.values(), ids=HONEST.keys())
def test_honest_sources_pass_the_scan(source):
    check_includes(source + BODY)


def _confined() -> dict:
    hello = COMPILERS.status()
    if not hello.get("landlock"):
        pytest.skip(f"Landlock is not available here: {hello.get('why')}")
    return hello


@pytest.fixture
def fooled_scan(monkeypatch):
    """A scan that accepts everything: only the compiler process's confinement remains."""
    monkeypatch.setattr(compiler, "check_includes", lambda source, defines=None: None)


def test_a_fooled_scan_still_opens_no_host_file(tmp_path, fooled_scan):
    _confined()
    planted = tmp_path / "planted.h"
    planted.write_text("#define PLANTED 271828182\n")
    source = f'#include "{planted}"\nextern "C" __global__ void k(int* c) {{ c[0] = PLANTED; }}'
    with pytest.raises(CompileError) as err:
        compile_kernel(KernelSpec(source=source, entry="k"))
    assert "cannot open source file" in err.value.log
    assert "271828182" not in err.value.log and "271828182" not in str(err.value)
    # the log says the same of a file that exists and of one that does not
    missing = source.replace(str(planted), str(tmp_path / "missing.h"))
    with pytest.raises(CompileError) as gone:
        compile_kernel(KernelSpec(source=missing, entry="k"))
    assert err.value.log.replace(str(planted), "P") == gone.value.log.replace(str(tmp_path / "missing.h"), "P")


def test_a_fooled_scan_cannot_tell_whether_a_host_file_exists(tmp_path, fooled_scan):
    _confined()
    planted = tmp_path / "planted.h"
    planted.write_text("// here\n")
    for probe in (f'__has_include("{planted}")', f'P(__has_, include)("{planted}")'):
        source = f'#define P(a, b) a##b\n#if {probe}\n#error FOUND\n#endif\n' + BODY
        compile_kernel(KernelSpec(source=source, entry="k"))  # false: the file cannot be opened


def test_the_confined_compiler_reads_the_headers_and_nothing_under_them_is_refused():
    hello = _confined()
    assert hello["roots"], "no CUDA header root was found"
    source = "#include <cuda_fp16.h>\n#include <cuda/std/cstdint>\n#include <cooperative_groups.h>" + BODY
    assert compile_kernel(KernelSpec(source=source, entry="k")).info.ok


def test_a_killed_compiler_process_is_replaced():
    compile_kernel(KernelSpec(source=BODY, entry="k"))
    for proc in list(COMPILERS._idle):
        proc.proc.kill()
        proc.proc.wait()
    assert compile_kernel(KernelSpec(source=BODY, entry="k")).info.ok


def test_an_interrupt_of_the_process_group_leaves_the_compiler_to_its_parent():
    """Ctrl-C reaches every process of the terminal's group: the compiler ignores it (its parent
    decides what the interrupt ends), so a compilation after it still finds it alive."""
    import os
    import signal
    import time

    COMPILERS.run("cubin", KernelSpec(source=BODY, entry="k"), "sm_90")
    procs = list(COMPILERS._idle)
    for proc in procs:
        os.kill(proc.proc.pid, signal.SIGINT)
    time.sleep(0.5)
    assert procs and all(proc.alive() for proc in procs)
    before = {proc.proc.pid for proc in procs}
    COMPILERS.run("cubin", KernelSpec(source=BODY + "\n// again", entry="k"), "sm_90")
    assert {proc.proc.pid for proc in COMPILERS._idle} & before


def test_a_compilation_past_its_time_is_stopped_not_waited_for():
    from cudaopt.compilekit.compile_process import compile_remote

    source = "#include <cub/cub.cuh>" + BODY
    with pytest.raises(CompileError, match="stopped after"):
        COMPILERS.run("cubin", KernelSpec(source=source, entry="k"), "sm_90", timeout=0.01)
    code, info = compile_remote("cubin", KernelSpec(source=BODY, entry="k"), "sm_90")
    assert code and info.ok


def test_doctor_shows_the_sandbox_and_says_scan_only_without_landlock(monkeypatch):
    from cudaopt.doctor import run_checks

    checks = {c.name: c for c in run_checks()}
    assert "NVRTC" in checks and "nvidia-cuda-nvrtc" in checks["NVRTC"].value
    assert checks["CUDA headers"].ok and "site-packages" in checks["CUDA headers"].value
    hello = COMPILERS.status()
    if hello.get("landlock"):
        assert checks["compile sandbox"].ok and f"Landlock ABI {hello['landlock']}" in checks["compile sandbox"].value
    monkeypatch.setattr(COMPILERS, "status", lambda: {"landlock": None, "why": "the kernel predates Landlock (5.13)"})
    sandbox = {c.name: c for c in run_checks()}["compile sandbox"]
    assert not sandbox.ok and "scan only" in sandbox.value and "predates Landlock" in sandbox.value

