"""What the compiler made of a kernel: instruction mix, memory access widths, FMAs, spills.

SASS (the machine code, from ``nvdisasm`` on NVRTC's cubin) when a disassembler is found — the
``nvidia-cuda-nvdisasm`` wheel provides one, so it works without a GPU; PTX (NVRTC's virtual
assembly) otherwise. Counts are static: instructions in the code, not instructions executed, so
an unrolled loop counts every copy and a rolled one counts once.
"""

from __future__ import annotations

import re
from collections import Counter

from pydantic import Field

from ..compilekit.compiler import compile_kernel, compile_ptx
from ..compilekit.locate import find_tool
from ..compilekit.math_units import MathUnreadable, classify, disassemble, instructions
from ..wire.protocol import KernelSpec, WireModel

_PTX_LINE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)")
_PTX_BITS = {"b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16, "f16x2": 32,
             "bf16x2": 32, "b32": 32, "u32": 32, "s32": 32, "f32": 32, "b64": 64, "u64": 64, "s64": 64, "f64": 64,
             "b128": 128}


class CodeSummary(WireModel):
    """Static counts over one kernel's compiled code."""

    kind: str  # "sass" or "ptx"
    tool: str  # what produced it: the disassembler's path, or NVRTC
    arch: str
    instructions: int = 0
    top_opcodes: dict[str, int] = Field(default_factory=dict)
    global_loads: dict[str, int] = Field(default_factory=dict)  # by access width, e.g. {"128-bit": 4}
    global_stores: dict[str, int] = Field(default_factory=dict)
    shared_loads: dict[str, int] = Field(default_factory=dict)
    shared_stores: dict[str, int] = Field(default_factory=dict)
    local_loads: int = 0  # spill and stack traffic
    local_stores: int = 0
    async_copies: int = 0  # cp.async / LDGSTS, global to shared without registers
    fma: int = 0
    tensor_mma: int = 0
    barriers: int = 0
    fma_per_global_load: float | None = None
    resources: dict[str, int | None] = Field(default_factory=dict)  # registers, spills, local memory (ptxas)
    note: str = "static counts: instructions in the code, not instructions executed"


def summarize(spec: KernelSpec, arch: str) -> CodeSummary:
    """Compile ``spec`` for ``arch`` and summarise its SASS, or its PTX without a disassembler."""
    compiled = compile_kernel(spec, arch, math=False)  # its SASS is read below
    info = compiled.info
    resources = {"registers": info.registers, "spill_stores_bytes": info.spill_stores,
                 "spill_loads_bytes": info.spill_loads, "stack_bytes": info.stack_bytes,
                 "static_shared_bytes": info.static_shared_bytes}
    try:
        summary = summarize_sass(disassemble(bytes(compiled.cubin.code)), arch, tool=find_tool("nvdisasm") or "")
    except MathUnreadable:  # no disassembler here: the PTX instead
        summary = summarize_ptx(compile_ptx(spec, arch), arch)
    summary.resources = resources
    return summary


def summarize_sass(text: str, arch: str, tool: str = "nvdisasm") -> CodeSummary:
    found = instructions(text)
    ops = Counter(ins.mnemonic for ins in found)
    constants = Counter(ins.mnemonic for ins in found if ins.opcode == "HFMA2" and not classify(ins))
    s = CodeSummary(kind="sass", tool=tool, arch=arch)
    for op, n in ops.items():
        base, parts = op.split(".")[0], op.split(".")[1:]
        if base == "LDG":
            _add(s.global_loads, _sass_width(parts), n)
        elif base == "STG":
            _add(s.global_stores, _sass_width(parts), n)
        elif base in ("LDS", "LDSM"):
            _add(s.shared_loads, "ldmatrix" if base == "LDSM" else _sass_width(parts), n)
        elif base == "STS":
            _add(s.shared_stores, _sass_width(parts), n)
        elif base == "LDL":
            s.local_loads += n
        elif base == "STL":
            s.local_stores += n
        elif base == "LDGSTS":
            s.async_copies += n
        elif base in ("FFMA", "DFMA", "HFMA2"):  # less HFMA2's constant loads (math_units.classify)
            s.fma += n - constants[op]
        elif base in ("HMMA", "HGMMA", "IMMA", "IGMMA", "DMMA", "BMMA", "BGMMA", "QGMMA"):
            s.tensor_mma += n
        elif base == "BAR":
            s.barriers += n
    return _finish(s, ops)


def summarize_ptx(text: str, arch: str) -> CodeSummary:
    ops = Counter(m.group(1) for line in text.splitlines() if (m := _PTX_LINE.match(line)))
    s = CodeSummary(kind="ptx", tool="NVRTC", arch=arch)
    for op, n in ops.items():
        parts = op.split(".")
        head = ".".join(parts[:2])
        if head == "ld.global":
            _add(s.global_loads, _ptx_width(parts), n)
        elif head == "st.global":
            _add(s.global_stores, _ptx_width(parts), n)
        elif op.startswith("ld.shared"):
            _add(s.shared_loads, _ptx_width(parts), n)
        elif op.startswith("st.shared"):
            _add(s.shared_stores, _ptx_width(parts), n)
        elif head == "ld.local":
            s.local_loads += n
        elif head == "st.local":
            s.local_stores += n
        elif op.startswith("cp.async"):
            s.async_copies += n
        elif parts[0] == "fma":
            s.fma += n
        elif parts[0] in ("mma", "wmma", "wgmma"):
            s.tensor_mma += n
        elif parts[0] in ("bar", "barrier"):
            s.barriers += n
    return _finish(s, ops)


def _finish(s: CodeSummary, ops: Counter) -> CodeSummary:
    s.instructions = sum(ops.values())
    s.top_opcodes = dict(ops.most_common(12))
    loads = sum(s.global_loads.values())
    s.fma_per_global_load = round(s.fma / loads, 2) if loads else None
    return s


def _add(counts: dict[str, int], key: str, n: int) -> None:
    counts[key] = counts.get(key, 0) + n


def _sass_width(parts: list[str]) -> str:
    """LDG.E.128 -> 128-bit, LDG.E.64 -> 64-bit, LDG.E.U8 -> 8-bit, LDG.E -> 32-bit."""
    for part in parts:
        if part in ("128", "64"):
            return f"{part}-bit"
        if part in ("U8", "S8", "U16", "S16"):
            return f"{part[1:]}-bit"
    return "32-bit"


def _ptx_width(parts: list[str]) -> str:
    """ld.global.nc.v4.f32 -> 128-bit, ld.global.f32 -> 32-bit."""
    vector = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d+", p)), 1)
    bits = next((_PTX_BITS[p] for p in reversed(parts) if p in _PTX_BITS), 32)
    return f"{vector * bits}-bit"
