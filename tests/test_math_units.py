"""The math units of compiled code (compilekit/math_units.py), read from the SASS of kernels NVRTC
compiles here (no GPU needed): each math class found where it is, none where it is not."""

from __future__ import annotations

import pytest

from cudaopt.compilekit import math_units
from cudaopt.compilekit.compiler import compile_kernel
from cudaopt.compilekit.math_units import Instruction, classify, fast_math_options, function_math, instructions
from cudaopt.wire.protocol import KernelSpec
from tests.conftest import ROOT, SGEMM, kernel_source

SOFTMAX = ROOT / "examples" / "softmax"


def math_of(source: str, entry: str = "k", arch: str = "sm_90", **defines) -> dict:
    """Per function of the compiled module, its math classes (counts)."""
    compiled = compile_kernel(KernelSpec(source=source, entry=entry, defines=defines), arch, math=False)
    per_function = function_math(math_units.disassemble(bytes(compiled.cubin.code)))
    return {function: {name: use.count for name, use in uses.items()} for function, uses in per_function.items()}


def classes(source: str, entry: str = "k", arch: str = "sm_90") -> set[str]:
    return {name for uses in math_of(source, entry, arch).values() for name in uses}


def mma(shape: str, types: str, a: int, b: int, acc: str = "f") -> str:
    """A kernel running one inline-PTX ``mma.sync.aligned.<shape>.row.col.<types>`` on values it loads."""
    regs = ", ".join(f"%{i}" for i in range(4))
    ins = ", ".join(f"%{4 + i}" for i in range(a))
    bs = ", ".join(f"%{4 + a + i}" for i in range(b))
    operands = ", ".join(f'"r"(x[{i}])' for i in range(a + b))
    return (f'extern "C" __global__ void k(const unsigned* x, {"float" if acc == "f" else "int"}* y) {{\n'
            f'  {"float" if acc == "f" else "int"} d[4] = {{0, 0, 0, 0}};\n'
            f'  asm volatile("mma.sync.aligned.{shape}.row.col.{types} {{{regs}}}, {{{ins}}}, {{{bs}}}, {{{regs}}};"\n'
            f'      : "+{acc}"(d[0]), "+{acc}"(d[1]), "+{acc}"(d[2]), "+{acc}"(d[3]) : {operands});\n'
            f"  y[threadIdx.x] = d[0] + d[1] + d[2] + d[3];\n}}\n")


WMMA = """#include <mma.h>
{include}
using namespace nvcuda;
extern "C" __global__ void k(const {t}* a, const {t}* b, float* c) {{
  wmma::fragment<wmma::matrix_a, 16, 16, {kk}, {frag}, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, {kk}, {frag}, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, {kk}, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}}
"""


@pytest.mark.parametrize(("source", "expected"), [
    (WMMA.format(include="#include <cuda_fp16.h>", t="__half", frag="__half", kk=16), "fp16"),
    (WMMA.format(include="#include <cuda_bf16.h>", t="__nv_bfloat16", frag="__nv_bfloat16", kk=16), "bf16"),
    (WMMA.format(include="", t="float", frag="wmma::precision::tf32", kk=8), "tf32"),
    (mma("m16n8k8", "f32.tf32.tf32.f32", 4, 2), "tf32"),
    (mma("m16n8k16", "f32.bf16.bf16.f32", 4, 2), "bf16"),
    (mma("m16n8k16", "f32.f16.f16.f32", 4, 2), "fp16"),
    (mma("m16n8k32", "s32.s8.s8.s32", 4, 2, acc="r"), "int8"),
    (mma("m16n8k64", "s32.s4.s4.s32", 4, 2, acc="r"), "int8"),
    (mma("m16n8k256", "s32.b1.b1.s32.and.popc", 4, 2, acc="r"), "int8"),
], ids=["wmma-half", "wmma-bf16", "wmma-tf32", "mma-tf32", "mma-bf16", "mma-f16", "mma-s8", "mma-s4", "mma-b1"])
def test_each_tensor_core_mma_is_its_class_and_nothing_narrower(source, expected):
    found = classes(source)
    assert expected in found, found
    assert found <= {expected, "fp32"}, found  # no other reduced-precision class is invented


def test_an_fp8_mma_on_sm_90_is_fp8_conversions_feeding_fp16_mmas():
    """sm_90 has no FP8 mma.sync: ptxas unpacks E4M3 to FP16 (F2FP...E4M3) for HMMA.16816.F32, so
    the kernel needs both classes; a bf16 policy refuses it either way."""
    found = classes(mma("m16n8k32", "f32.e4m3.e4m3.f32", 4, 2))
    assert {"fp8", "fp16"} <= found and "bf16" not in found


@pytest.mark.parametrize(("types", "kk", "expected"), [
    ("f32.bf16.bf16", "m64n8k16", "bf16"), ("f32.f16.f16", "m64n8k16", "fp16"), ("f32.tf32.tf32", "m64n8k8", "tf32"),
    ("f32.e4m3.e4m3", "m64n8k32", "fp8"), ("s32.s8.s8", "m64n8k32", "int8"),
])
def test_hopper_warpgroup_mmas_for_sm_90a(types, kk, expected):
    """wgmma (HGMMA, QGMMA, IGMMA) compiles with NVRTC for sm_90a."""
    acc = "r" if types.startswith("s32") else "f"
    scale = ", 1" if acc == "r" else (", 1, 1, 1, 0, 0" if "16" in types.split(".")[1] else ", 1, 1, 1")
    source = (f'extern "C" __global__ void k({"int" if acc == "r" else "float"}* c, unsigned long long da, '
              f"unsigned long long db) {{\n"
              f'  {"int" if acc == "r" else "float"} d[4] = {{0, 0, 0, 0}};\n'
              f'  asm volatile("wgmma.fence.sync.aligned;");\n'
              f'  asm volatile("wgmma.mma_async.sync.aligned.{kk}.{types} {{%0,%1,%2,%3}}, %4, %5{scale};"\n'
              f'      : "+{acc}"(d[0]), "+{acc}"(d[1]), "+{acc}"(d[2]), "+{acc}"(d[3]) : "l"(da), "l"(db));\n'
              f'  asm volatile("wgmma.commit_group.sync.aligned;");\n'
              f'  asm volatile("wgmma.wait_group.sync.aligned 0;");\n'
              f"  c[threadIdx.x] = d[0] + d[1] + d[2] + d[3];\n}}\n")
    found = classes(source, arch="sm_90a")
    assert expected in found and found <= {expected, "fp32"}, found


def test_approximate_transcendentals_are_approx_and_the_precise_functions_are_not():
    approx = 'extern "C" __global__ void k(const float* a, float* c) {\n  float x = a[threadIdx.x], t;\n' \
             '  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));\n  c[threadIdx.x] = __sinf(x) + __cosf(x) + t;\n}\n'
    precise = 'extern "C" __global__ void k(const float* a, float* c) {\n  float x = a[threadIdx.x];\n' \
              '  c[threadIdx.x] = sinf(x) + cosf(x) + tanhf(x) + expf(x) + logf(x) + x / a[1] + sqrtf(x) + rsqrtf(x);\n}\n'
    (uses,) = math_of(approx).values()
    assert uses["approx"] == 3  # MUFU.SIN, MUFU.COS, MUFU.TANH
    assert classes(precise) == {"fp32", "fp64"}  # MUFU.EX2/LG2/RCP/RSQ inside the precise sequences: not flagged


def test_half2_math_and_half_conversions_are_fp16_and_bfloat162_math_is_bf16():
    half = ('#include <cuda_fp16.h>\nextern "C" __global__ void k(const __half2* a, const __half* h, float* c) {\n'
            "  __half2 y = __hfma2(a[0], a[1], a[2]);\n  c[threadIdx.x] = __low2float(y) + __half2float(h[1]);\n}\n")
    bf16 = ('#include <cuda_bf16.h>\nextern "C" __global__ void k(const __nv_bfloat162* a, float* c) {\n'
            "  __nv_bfloat162 y = __hfma2(a[0], a[1], a[2]);\n  c[threadIdx.x] = __low2float(y);\n}\n")
    to_half = ('#include <cuda_fp16.h>\nextern "C" __global__ void k(const float* a, __half* c) {\n'
               "  c[threadIdx.x] = __float2half(a[threadIdx.x]);\n}\n")
    assert classes(half) == {"fp16", "fp32"}
    assert "bf16" in classes(bf16) and "fp16" not in classes(bf16)
    assert classes(to_half) == {"fp16"}  # a conversion to half is half precision


def test_the_half_precision_operands_cheat_is_fp16():
    assert "fp16" in classes(kernel_source("half_operands.cu"), "matmul_f32")


def test_fp64_tensor_cores_are_fp64():
    dmma = ('extern "C" __global__ void k(const double* a, double* c) {\n  double d0 = 0, d1 = 0;\n'
            '  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"\n'
            '      : "+d"(d0), "+d"(d1) : "d"(a[0]), "d"(a[1]));\n  c[threadIdx.x] = d0 + d1;\n}\n')
    assert classes(dmma) == {"fp64"}


def test_every_tier_of_the_sgemm_example_is_plain_fp32():
    """examples/sgemm/tunable.cu: twelve kernels, with ptxas's HFMA2.MMA constant loads, all FP32."""
    space = {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "MINB": 1, "ST": 16, "SK": 32}
    found = math_of((SGEMM / "tunable.cu").read_text(), "matmul_f32", **space)
    assert len(found) >= 12 and {"matmul_f32", "matmul_f32_tiny", "matmul_f32_splitk2r"} <= set(found)
    assert all(set(uses) == {"fp32"} for uses in found.values()), found
    assert set().union(*math_of((SGEMM / "initial.cu").read_text(), "matmul_f32").values()) == {"fp32"}


def test_every_kernel_of_the_softmax_example_is_plain_fp32():
    import json

    config = json.loads((SOFTMAX / "experiment.json").read_text())
    defines = {name: values[0] for name, values in config["tune"]["tunables"].items()}
    found = math_of((SOFTMAX / "tunable.cu").read_text(), config["signature"].split("void ")[1].split("(")[0], **defines)
    assert len(found) >= 5 and all(set(uses) <= {"fp32"} for uses in found.values()), found


def test_a_device_function_the_compiler_kept_is_read_and_named():
    source = ('__device__ __noinline__ float helper(float x) {\n  unsigned u = __float_as_uint(x);\n'
              "  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;\n"
              '  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, '
              '{%4,%4}, {%0,%1,%2,%3};"\n      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(u));\n'
              "  return d0 + d1 + d2 + d3;\n}\n"
              'extern "C" __global__ void k(const float* a, float* c) { c[threadIdx.x] = helper(a[threadIdx.x]); }\n'
              'extern "C" __global__ void other(const float* a, float* c) { c[threadIdx.x] = a[0] * a[1]; }\n')
    found = math_of(source)
    helper = next(name for name in found if "helper" in name)
    assert "tf32" in found[helper] and "tf32" not in found.get("k", {})
    assert found["other"] == {"fp32": 1}


def listing(*lines: str) -> str:
    return "\n".join(f"        /*{16 * i:04x}*/                   {line}" for i, line in enumerate(lines))


def test_ptxas_constant_loads_are_not_math_but_hfma2_on_registers_is():
    sass = listing("HFMA2.MMA R2, -RZ, RZ, 0, 0 ;", "HFMA2 R6, -RZ, RZ, 1.541015625, -0.052001953125 ;",
                   "HFMA2.MMA R16, -RZ, RZ, 1.125, -9232 ;", "HFMA2.MMA R0, R4, R4, R4 ;",
                   "HFMA2 R7, -RZ, RZ, R4 ;")
    found = [(ins.mnemonic, classify(ins)) for ins in instructions(sass)]
    assert [c for _, c in found] == [(), (), (), ("fp16",), ("fp16",)]  # -0 * 0 + a register is not a constant


def test_predicates_reuse_flags_and_directives_are_parsed_away():
    sass = ("//--------------------- .text.tiled --------------------------\n"
            + listing("@!P0 HMMA.1684.F32.TF32 R8, R8.reuse, R24, RZ ;", "@UPT FFMA R1, R2.reuse, R3, R1 ;", "NOP;")
            + "\n        /*0030*/ \t.byte\t0xff, 0xff\n")
    found = instructions(sass)
    assert [(i.function, i.opcode, i.modifiers) for i in found] == [
        ("tiled", "HMMA", ("1684", "F32", "TF32")), ("tiled", "FFMA", ()), ("tiled", "NOP", ())]
    assert found[0].operands == ("R8", "R8", "R24", "RZ") and found[0].text == "HMMA.1684.F32.TF32 R8, R8.reuse, R24, RZ"
    assert [classify(i) for i in found] == [("tf32",), ("fp32",), ()]


@pytest.mark.parametrize(("line", "expected"), [
    ("HADD2.F32 R7, -RZ, R8.H0_H0", ("fp16",)),  # a half input widened to float
    ("HSETP2.BF16_V2.GT.AND P0, PT, R4, R7, PT", ("bf16",)),
    ("F2FP.BF16.F32.PACK_AB R3, R4, R5", ("bf16",)),
    ("F2F.F16.F32 R3, R4", ("fp16",)),
    ("F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R4, R4, R5, RZ", ("fp8",)),
    ("F2F.F64.F32 R2, R4", ("fp64",)),
    ("MUFU.EX2 R5, R9", ("fp32",)),
    ("MUFU.TANH.F16 R5, R9", ("approx", "fp16")),
    ("MUFU.RCP64H R3, R7", ("fp64",)),
    ("HMMA.16832.F32.E4M3.E4M3 R4, R8, R12, R4", ("fp8",)),
    ("QMMA.16832.F32.E5M2.E5M2 R4, R8, R12, R4", ("fp8",)),
    ("IMMA.8816.S8.S8 R4, R8.ROW, R12.COL, R4", ("int8",)),
    ("UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], tmem[UR10], idesc[UR12], UPT", ("tf32", "fp16", "bf16")),
    ("XYZMMA R4, R8, R12, R4", ("tf32", "fp16", "bf16", "int8", "fp8")),
    ("DMMA.8x8x4 R8, R2, R6, RZ", ("fp64",)),
    ("IMAD.WIDE.U32 R4, R9, 0x4, R4", ()),
])
def test_opcodes_and_modifiers_decide_the_class(line, expected):
    """Tensor-core forms whose operand types are not in the instruction (tcgen05's UTCHMMA, an MMA
    this table does not know) take every class they could be: a policy must allow them all."""
    (ins,) = instructions(listing(line + " ;"))
    assert classify(ins) == expected


def test_module_math_sums_the_functions_and_keeps_the_first_example():
    sass = ("//--------------------- .text.one --------------------------\n"
            + listing("HMMA.1688.F32.TF32 R4, R8, R4, RZ ;", "FFMA R1, R2, R3, R1 ;")
            + "\n//--------------------- .text.two --------------------------\n"
            + listing("HMMA.1684.F32.TF32 R4, R8, R4, RZ ;", "HMMA.1684.F32.TF32 R4, R8, R4, R4 ;"))
    total = math_units.module_math(function_math(sass))
    assert total["tf32"].count == 3 and total["tf32"].opcodes == {"HMMA": 3}
    assert (total["tf32"].example, total["tf32"].function) == ("HMMA.1688.F32.TF32 R4, R8, R4, RZ", "one")
    assert total["fp32"].count == 1


@pytest.mark.parametrize("option", ["--use_fast_math", "-use_fast_math", "--ftz=true", "-ftz=true", "-ftz",
                                    "--prec-div=false", "-prec-div=false", "--prec-sqrt=false", "-prec_sqrt=false"])
def test_every_spelling_of_a_fast_math_option_is_approx(option):
    assert fast_math_options(["-arch=sm_90", option, "--std=c++17"]) == [option]


def test_precise_options_are_not_flagged():
    assert fast_math_options(["--ftz=false", "--prec-div=true", "-prec-sqrt=true", "--fmad=false",
                              "--use_fast_math_not", "--maxrregcount=64"]) == []


def test_a_fast_math_kernel_records_its_option():
    compiled = compile_kernel(KernelSpec(source='extern "C" __global__ void k(float* x) { x[0] = 1.0f; }', entry="k",
                                         fast_math=True))
    assert compiled.info.fast_math == ["--use_fast_math"]
    plain = compile_kernel(KernelSpec(source='extern "C" __global__ void k(float* x) { x[0] = 1.0f; }', entry="k"))
    assert plain.info.fast_math == [] and set(plain.info.math) <= {"fp32"}


def test_without_nvdisasm_the_math_is_unread_and_says_why(monkeypatch):
    monkeypatch.setattr(math_units, "find_tool", lambda name: None)
    compiled = compile_kernel(KernelSpec(source=kernel_source("relu.cu"), entry="relu"))
    assert compiled.info.math is None
    assert "nvdisasm was not found" in compiled.info.math_error


def test_a_failing_nvdisasm_is_unread_and_says_why(monkeypatch, tmp_path):
    fake = tmp_path / "nvdisasm"
    fake.write_text("#!/bin/sh\necho 'nvdisasm fatal : unsupported ELF' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(math_units, "find_tool", lambda name: str(fake))
    with pytest.raises(math_units.MathUnreadable, match="nvdisasm failed on the cubin: nvdisasm fatal : unsupported ELF"):
        math_units.disassemble(b"\x7fELF")


def test_an_instruction_knows_its_mnemonic():
    ins = Instruction("k", "HMMA", ("1684", "F32", "TF32"), (), "HMMA.1684.F32.TF32 R8, R8, R24, RZ")
    assert ins.mnemonic == "HMMA.1684.F32.TF32"
