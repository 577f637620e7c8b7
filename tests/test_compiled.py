"""Compiled-code summaries (PTX from NVRTC, SASS from nvdisasm): no GPU needed."""

from __future__ import annotations

import pytest

from cudaopt.compilekit.compiler import CompileError, compile_ptx
from cudaopt.compilekit import math_units
from cudaopt.insight import compiled
from cudaopt.wire.protocol import KernelSpec
from tests.conftest import SGEMM, kernel_source


def spec(source: str) -> KernelSpec:
    return KernelSpec(source=source, entry="matmul_f32")


def test_ptx_shows_register_tiling_as_more_fma_per_global_load_and_wider_loads():
    initial = compiled.summarize_ptx(compile_ptx(spec((SGEMM / "initial.cu").read_text())), "sm_90")
    tiled = compiled.summarize_ptx(compile_ptx(spec(kernel_source("register_tiled.cu"))), "sm_90")
    assert initial.kind == "ptx" and initial.tool == "NVRTC"
    assert initial.global_loads == {"32-bit": 2} and initial.global_stores == {"32-bit": 1}
    assert initial.fma == 16 and initial.barriers == 2 and initial.local_loads == 0
    assert tiled.global_loads.get("128-bit", 0) > 0 and tiled.shared_loads.get("128-bit", 0) > 0
    assert tiled.fma_per_global_load > 2 * initial.fma_per_global_load
    assert initial.instructions > 0 and "fma.rn.f32" in initial.top_opcodes


SASS = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0020*/              @!P0 LDG.E R8, desc[UR4][R6.64] ;
        /*0030*/                   STS.128 [R9], R4 ;
        /*0040*/                   LDS R10, [R9+0x4] ;
        /*0050*/                   LDSM.16.M88.4 R12, [R9] ;
        /*0060*/                   FFMA R11, R10, R8, R11 ;
        /*0070*/                   HFMA2.MMA R13, -RZ, RZ, 0, 0 ;
        /*0080*/                   STL [R1], R11 ;
        /*0090*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00a0*/                   HMMA.16816.F32 R16, R12, R14, R16 ;
        /*00b0*/                   STG.E.64 desc[UR4][R2.64], R16 ;
        /*00c0*/                   EXIT ;
        /*0000*/ 	.byte	0xff, 0xff
"""


def test_sass_widths_fma_spills_and_tensor_instructions():
    s = compiled.summarize_sass(SASS, "sm_90")
    assert s.kind == "sass" and s.instructions == 13
    assert s.global_loads == {"128-bit": 1, "32-bit": 1} and s.global_stores == {"64-bit": 1}
    assert s.shared_stores == {"128-bit": 1} and s.shared_loads == {"32-bit": 1, "ldmatrix": 1}
    assert s.fma == 1  # HFMA2.MMA is the compiler's move, not arithmetic
    assert (s.local_stores, s.barriers, s.tensor_mma, s.fma_per_global_load) == (1, 1, 1, 0.5)


def test_the_summary_is_sass_with_a_disassembler_and_ptx_without(monkeypatch):
    source = kernel_source("register_tiled.cu")
    if math_units.find_tool("nvdisasm") is not None:
        sass = compiled.summarize(spec(source), "sm_90")
        assert sass.kind == "sass" and sass.global_loads.get("128-bit", 0) > 0 and sass.fma >= 512
    monkeypatch.setattr(math_units, "find_tool", lambda name: None)
    ptx = compiled.summarize(spec(source), "sm_90")
    assert ptx.kind == "ptx" and ptx.fma == 512
    assert ptx.resources["registers"] > 32 and ptx.resources["spill_stores_bytes"] == 0


def test_a_compile_error_carries_the_compiler_log():
    with pytest.raises(CompileError, match="error"):
        compile_ptx(spec(kernel_source("compile_error.cu")))
