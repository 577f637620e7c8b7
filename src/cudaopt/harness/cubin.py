"""What a compiled kernel keeps between launches: its mutable device-global memory, read from the cubin.

A ``__device__`` array survives from one launch to the next, which is what a memo table or a
launch counter needs; so does memory from device-side ``malloc``. Both are visible in the cubin
(an ELF file): writable ``.nv.global*`` sections, and an undefined ``malloc`` symbol. The harness
reports them and refuses more global memory than the experiment allows, not counting the arrays
the experiment names as a workspace, which it poisons before every launch (``Limits.workspace``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..wire.protocol import Limits
from ..wire.results import CompileInfo

_SHF_WRITE = 0x1
_SHT_SYMTAB = 2
_STT_OBJECT = 1
_STT_FUNC = 2
_ALLOCATORS = {"malloc", "__nv_aligned_device_malloc", "realloc", "calloc"}


@dataclass(frozen=True)
class DeviceState:
    global_bytes: int  # writable __device__ / __managed__ memory, initialised or not
    device_malloc: bool  # calls device-side malloc
    symbols: dict[str, int]  # the writable device-global variables by name, in bytes


def inspect_cubin(data: bytes) -> DeviceState:
    """Sum the writable global sections, size each variable in them, and look for a device
    allocator among the undefined symbols."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def name(table: tuple, offset: int) -> str:
        start = table[4] + offset
        return data[start:data.index(b"\0", start)].decode(errors="replace")

    names = sections[shstrndx]
    writable = {i for i, sec in enumerate(sections)
                if sec[2] & _SHF_WRITE and name(names, sec[0]).startswith((".nv.global", ".nv.managed"))}
    global_bytes = sum(sections[i][5] for i in writable)
    malloc, symbols = False, {}
    for sec in sections:
        if sec[1] != _SHT_SYMTAB:
            continue
        strings = sections[sec[6]]
        for i in range(sec[5] // 24):
            st_name, st_info, _other, st_shndx, _value, size = struct.unpack_from("<IBBHQQ", data, sec[4] + i * 24)
            if st_shndx == 0 and st_info & 0xF == _STT_FUNC and name(strings, st_name) in _ALLOCATORS:
                malloc = True
            elif st_shndx in writable and st_info & 0xF == _STT_OBJECT and size:
                symbols[name(strings, st_name)] = int(size)
    return DeviceState(global_bytes=int(global_bytes), device_malloc=malloc, symbols=symbols)


def workspace_names(info: CompileInfo, limits: Limits) -> list[str]:
    """The variables ``limits.workspace`` names that the compiled module has."""
    return [name for name in limits.workspace if name in info.global_symbols]


def kept_state(info: CompileInfo, limits: Limits) -> tuple[int, str | None]:
    """The bytes of the module's workspace (the variables ``limits.workspace`` names, poisoned
    before every launch), and why the worker refuses what else it keeps (``global_state``), or None;
    from the compile report (its cubin read once, by inspect_cubin)."""
    workspace = workspace_names(info, limits)
    poisoned = sum(info.global_symbols[name] for name in workspace)
    if info.device_malloc:
        return poisoned, ("calls device-side malloc: memory that outlives a launch is not allowed (use the "
                          "outputs, shared memory or registers)")
    kept = (info.global_bytes or 0) - poisoned
    if kept > limits.global_bytes:
        besides = f", besides the workspace it poisons ({', '.join(workspace)})" if workspace else ""
        return poisoned, (f"keeps {kept} bytes of mutable __device__ memory between launches{besides}; the limit "
                          f"is {limits.global_bytes} (limits.global_bytes; scratch that each launch writes before "
                          "reading may be named in limits.workspace)")
    return poisoned, None
