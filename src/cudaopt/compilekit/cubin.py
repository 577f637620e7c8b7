"""What a compiled kernel could keep between launches, read from the cubin (an ELF file).

Every variable a module holds — ``__device__``, ``__managed__`` and ``__constant__`` arrays, the
kernel's own and those CUDA headers define — lives in a section of the cubin: writable
``.nv.global*`` / ``.nv.managed*`` sections (zeroed or initialised at load) and ``.nv.constantN``
banks (``__constant__`` data, which a kernel can still write through a generic pointer). The
harness sets every such section back to its load image before each launch of a candidate
(:func:`module_sections`, ``Entries.reset_state``), so nothing a launch writes there reaches the
next: a memo table, a launch counter or a flag finds its initial value every time. The total is
bounded (``Limits.global_bytes``) to keep that restore cheap, and device-side ``malloc``, whose
heap cannot be restored, is refused. The arrays the experiment names as a workspace
(``Limits.workspace``) are filled with NaN instead.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..wire.protocol import Limits
from ..wire.results import CompileInfo

_SHF_WRITE = 0x1
_SHT_SYMTAB = 2
_SHT_NOBITS = 8
_STT_OBJECT = 1
_STT_FUNC = 2
_ALLOCATORS = {"malloc", "__nv_aligned_device_malloc", "realloc", "calloc"}
_VARIABLES = (".nv.global", ".nv.managed")
_KERNEL_PARAMETERS = ".nv.constant0"  # each launch's own arguments, written by the driver per launch


@dataclass(frozen=True)
class Section:
    """One section of module variables: its load image, and each variable in it (name, offset,
    bytes), by which the loaded variables are found (the loader need not keep them together)."""

    name: str
    size: int
    image: bytes | None  # the load image; None: zeros (a NOBITS section)
    variables: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class DeviceState:
    global_bytes: int  # module variables a launch could write: __device__, __managed__, __constant__
    device_malloc: bool  # calls device-side malloc
    symbols: dict[str, int]  # the variables by name, in bytes


class _Elf:
    def __init__(self, data: bytes):
        if data[:4] != b"\x7fELF" or data[4] != 2:
            raise ValueError("not a 64-bit ELF cubin")
        self.data = data
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        self.names = [self.string(self.sections[shstrndx], sec[0]) for sec in self.sections]

    def string(self, table: tuple, offset: int) -> str:
        start = table[4] + offset
        return self.data[start:self.data.index(b"\0", start)].decode(errors="replace")

    def variable_sections(self) -> dict[int, list[tuple[str, int, int]]]:
        """Sections of variables by index, each with its named variables (name, offset, bytes):
        writable globals, and the constant banks that hold a named ``__constant__`` variable (the
        others are the compiler's own tables and the launch's parameters, which no kernel names)."""
        named: dict[int, list[tuple[str, int, int]]] = {}
        for name, kind, shndx, value, size in self.symbols():
            if kind == _STT_OBJECT and size and name:
                named.setdefault(shndx, []).append((name, int(value), int(size)))
        found: dict[int, list[tuple[str, int, int]]] = {}
        for i, (sec, name) in enumerate(zip(self.sections, self.names, strict=True)):
            if sec[2] & _SHF_WRITE and name.startswith(_VARIABLES):
                found[i] = sorted(named.get(i, []), key=lambda v: v[1])
            elif name.startswith(".nv.constant") and not name.startswith(_KERNEL_PARAMETERS) and i in named:
                found[i] = sorted(named[i], key=lambda v: v[1])
        return found

    def symbols(self):
        """(name, type, section index, value, size) of every symbol."""
        for sec in self.sections:
            if sec[1] != _SHT_SYMTAB:
                continue
            strings = self.sections[sec[6]]
            for i in range(sec[5] // 24):
                st_name, st_info, _other, st_shndx, value, size = struct.unpack_from("<IBBHQQ", self.data,
                                                                                     sec[4] + i * 24)
                yield self.string(strings, st_name), st_info & 0xF, st_shndx, value, size


def inspect_cubin(data: bytes) -> DeviceState:
    """Sum the variable sections, size each variable in them, and look for a device allocator
    among the undefined symbols."""
    elf = _Elf(data)
    restorable = elf.variable_sections()
    malloc, symbols = False, {}
    for name, kind, shndx, _value, size in elf.symbols():
        if shndx == 0 and kind == _STT_FUNC and name in _ALLOCATORS:
            malloc = True
        elif shndx in restorable and kind == _STT_OBJECT and size:
            symbols[name] = int(size)
    total = sum(elf.sections[i][5] for i in restorable)
    return DeviceState(global_bytes=int(total), device_malloc=malloc, symbols=symbols)


def module_sections(data: bytes) -> tuple[list[Section], list[str]]:
    """The sections the harness restores before every launch, and the names of those it cannot
    restore, which the worker refuses (nothing may be kept that cannot be restored): writable ones
    with no named variable to find them by once loaded, and any whose load image the loader changes
    (relocated: an initialised variable that holds an address). What a kernel can address is its
    variables: each is restored, in runs of variables the loader placed side by side."""
    elf = _Elf(data)
    relocated = {name.removeprefix(".rela").removeprefix(".rel") for name in elf.names if name.startswith(".rel")}
    found, lost = [], []
    for i, variables in sorted(elf.variable_sections().items()):
        sec = elf.sections[i]
        if not sec[5]:
            continue
        if not variables or elf.names[i] in relocated:
            lost.append(elf.names[i])
            continue
        image = None if sec[1] == _SHT_NOBITS else bytes(elf.data[sec[4]:sec[4] + sec[5]])
        found.append(Section(elf.names[i], int(sec[5]), image, tuple(variables)))
    return found, lost


def workspace_names(info: CompileInfo, limits: Limits) -> list[str]:
    """The variables ``limits.workspace`` names that the compiled module has."""
    return [name for name in limits.workspace if name in info.global_symbols]


def kept_state(info: CompileInfo, limits: Limits) -> tuple[int, str | None]:
    """The bytes of the module's workspace (the variables ``limits.workspace`` names, poisoned
    before every launch), and why the worker refuses the module's variables (``global_state``), or
    None; from the compile report (its cubin read once, by inspect_cubin)."""
    workspace = workspace_names(info, limits)
    poisoned = sum(info.global_symbols[name] for name in workspace)
    if info.device_malloc:
        return poisoned, ("calls device-side malloc: memory that outlives a launch is not allowed (use the "
                          "outputs, shared memory or registers)")
    restored = (info.global_bytes or 0) - poisoned
    if restored > limits.global_bytes:
        besides = f", besides the workspace it poisons ({', '.join(workspace)})" if workspace else ""
        return poisoned, (f"keeps {restored} bytes of module variables (__device__, __constant__, its own and its "
                          f"headers'){besides}, which the harness restores before every launch; the limit is "
                          f"{limits.global_bytes} (limits.global_bytes; scratch that each launch writes before "
                          "reading may be named in limits.workspace)")
    return poisoned, None
