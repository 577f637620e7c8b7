"""The kernels of one compiled candidate that its cases may launch.

The signature names the entry; a case's launch may name another kernel of the same module
(``LaunchSpec.entry``), for a kernel whose paths want different register budgets: registers
are allocated per kernel, so a path that needs few registers runs at the occupancy of the
hungriest path it shares a kernel with. Every kernel a case launches is held to the signature:
declared ``extern "C" __global__`` with its parameters in the source (the signature's own entry
may also come from a macro, as before), and taking arguments of its sizes in the cubin. The
cases' outputs are checked whichever kernel wrote them.
"""

from __future__ import annotations

import re

import numpy as np

from ..wire.protocol import Limits
from ..wire.results import CompileInfo, EntryInfo
from ..wire.signature import DTYPES, Signature, SignatureError, entry_names, find_entry, other_entry_problem
from ..compilekit.compiler import parse_ptxas
from ..compilekit.cubin import Section, kept_state, module_sections, workspace_names
from .launcher import CaseFailure
from .leftovers import SHARED_POISON
from ..compilekit.math_units import precision_refusal

WORKSPACE_POISON = SHARED_POISON.to_bytes(4, "little")  # a float32 NaN
_STACK_SIZES = re.compile(r"(\d+) bytes (?:stack frame|cumulative stack size)")


class Entries:
    def __init__(self, module, source: str, entry: str, signature: Signature, info: CompileInfo, cubin: bytes):
        self.module, self.source, self.entry, self.signature, self.info = module, source, entry, signature, info
        self.cubin = cubin
        self._kernels: dict[str, object] = {}
        self.workspace: list[tuple[int, int]] = []  # (address, bytes) of the variables poisoned before each launch
        self.state = ModuleState(None, None, [])  # the module's variables, restored before each launch
        self.get(None)  # the request's own entry must be there, whatever the cases launch

    def check_precision(self, limits: Limits, trusted: bool = False) -> None:
        """Refuse a module whose math (read from its SASS, math_units.py) is outside the
        experiment's precision policy, before any launch; ``trusted``: the user's own reference,
        only timed, is not held to it."""
        problem = None if trusted else precision_refusal(self.info, limits, self.signature)
        if problem:
            raise CaseFailure("precision", f"the kernel {problem}")

    def check_kept_state(self, limits: Limits, gpu) -> None:
        """Refuse what the module holds beyond the limit or cannot be restored (cubin.kept_state,
        cubin.module_sections); find each section of variables, and the workspace, once loaded."""
        self.info.workspace_bytes, problem = kept_state(self.info, limits)
        if problem:
            raise CaseFailure("global_state", f"the kernel {problem}")
        sections, lost = module_sections(self.cubin)
        if lost:
            raise CaseFailure("global_state", f"the kernel holds variables the harness cannot restore between "
                                              f"launches (sections {', '.join(lost)}): initialised "
                                              "variables that hold addresses are not allowed")
        self.state = ModuleState(gpu, self.module, sections)
        self.workspace = [gpu.global_range(self.module, name) for name in workspace_names(self.info, limits)]

    def reset_state(self, gpu) -> None:
        """Before each launch (stream-ordered): every module variable back to its load image, then
        the workspace filled with the shared-memory poison, so nothing one launch leaves in the
        module reaches the next, and a read of a workspace slot this launch did not write is NaN."""
        self.state.restore()
        for address, nbytes in self.workspace:
            gpu.fill_async(address, nbytes, WORKSPACE_POISON)

    def refuse_altered_state(self, when: str) -> None:
        """Raise if a copy the module's variables are restored from was changed (ModuleState.altered)."""
        altered = self.state.altered()
        if altered:
            raise CaseFailure("global_state", when + "; ".join(altered))

    def close(self) -> None:
        self.state.close()

    def local_bytes(self) -> int:
        """The largest per-thread local-memory frame in the module (leftovers.py wipes at least that
        much of every thread's local memory before each launch): the stack frames ptxas reports for
        every function, and the local memory the driver reports for the kernels fetched so far."""
        reported = [self.info.local_bytes or 0, *(e.local_bytes for e in self.info.entries.values())]
        stacks = [int(n) for n in _STACK_SIZES.findall(self.info.log)]
        return max(reported + stacks)

    def get(self, name: str | None):
        """The kernel called ``name`` (the request's entry when None), checked once."""
        own = name is None or name == self.entry
        name = self.entry if own else name
        if name in self._kernels:
            return self._kernels[name]
        try:
            declared = find_entry(self.source, name)
        except SignatureError as exc:
            raise CaseFailure("bad_signature", f"the declaration of {name} cannot be parsed: {exc}") from None
        if declared is None and not own:  # the signature's entry may come from a macro; no other may
            raise CaseFailure("missing_entry", other_entry_problem(self.source, name, self.signature))
        if declared is not None and not declared.same_types(self.signature):
            raise CaseFailure("bad_signature", f"{name} is declared as '{declared}', the experiment needs "
                                               f"'{self.signature}' (every kernel a case launches takes its parameters)")
        try:
            kernel = self.module.get_kernel(name)
        except Exception:
            found = entry_names(self.source)
            hint = f"; the source defines {', '.join(found)}" if found else ""
            raise CaseFailure("missing_entry", f"no kernel named {name!r} in the module{hint}") from None
        args = self.signature.args
        if kernel.num_arguments != len(args):
            raise CaseFailure("bad_signature", f"{name} takes {kernel.num_arguments} arguments, the experiment's "
                                               f"signature has {len(args)}")
        sizes = [8 if a.pointer else DTYPES[a.dtype].itemsize for a in args]
        actual = [int(p.size) for p in kernel.arguments_info]
        if actual != sizes:
            raise CaseFailure("bad_signature", f"{name} argument sizes {actual} != expected {sizes}")
        attrs = kernel.attributes
        if own:
            if self.info.registers is None:  # no ptxas report in the log: read the loaded kernel instead
                self.info.registers = int(attrs.num_regs)
            if self.info.static_shared_bytes is None:
                self.info.static_shared_bytes = int(attrs.shared_size_bytes)
            self.info.local_bytes = int(attrs.local_size_bytes)
            self.info.max_threads_per_block = int(attrs.max_threads_per_block)
        else:
            ptxas = parse_ptxas(self.info.log).get(name, {})
            self.info.entries[name] = EntryInfo(
                registers=int(attrs.num_regs), spill_stores=ptxas.get("spill_stores"),
                spill_loads=ptxas.get("spill_loads"), local_bytes=int(attrs.local_size_bytes),
                static_shared_bytes=int(attrs.shared_size_bytes), max_threads_per_block=int(attrs.max_threads_per_block))
        self._kernels[name] = kernel
        return kernel


RUN = np.dtype([("dst", "<u8"), ("src", "<u8"), ("bytes", "<u8")])  # utilities.cu's CudaoptRun


class ModuleState:
    """The module's variables at their device addresses, in runs the loader placed side by side,
    with a device copy of each run's load image to restore it from (one kernel before each launch,
    over a table of the runs). A kernel that found a copy and wrote to it (to have its state
    restored into the next launch) is caught by :meth:`altered`, checked after the launches."""

    def __init__(self, gpu, module, sections: list[Section]):
        self.gpu = gpu
        self.runs: list[tuple[int, int, bytes | None, str]] = []  # (address, bytes, image or None: zeros, section)
        for section in sections:
            for address, offset, nbytes in _runs(gpu, module, section):
                image = None if section.image is None else section.image[offset:offset + nbytes]
                self.runs.append((address, nbytes, image, section.name))
        self.copies = []
        table = np.zeros(len(self.runs), dtype=RUN)
        for row, (address, nbytes, image, _) in zip(table, self.runs, strict=True):
            copy = None
            if image is not None:
                copy = gpu.alloc(nbytes)
                gpu.upload(int(copy.handle), np.frombuffer(image, dtype=np.uint8))
            self.copies.append(copy)
            row["dst"], row["src"], row["bytes"] = address, int(copy.handle) if copy else 0, nbytes
        self.table = None
        if self.runs:
            self.table = gpu.alloc(table.nbytes)
            gpu.upload(int(self.table.handle), table)

    def restore(self) -> None:
        if self.table is not None:
            self.gpu.restore(int(self.table.handle), len(self.runs), max(n for _, n, _, _ in self.runs))

    def altered(self) -> list[str]:
        """The sections whose device copy of the load image no longer equals the cubin's."""
        changed = []
        for (_, nbytes, image, name), copy in zip(self.runs, self.copies, strict=True):
            if copy is not None and self.gpu.download(int(copy.handle), nbytes).tobytes() != image:
                changed.append(f"the copy of {name} that the harness restores the module's variables from was changed")
        return sorted(set(changed))

    def close(self) -> None:
        for copy in [*self.copies, self.table]:
            if copy is not None:
                copy.close(self.gpu.stream)
        self.copies, self.runs, self.table = [], [], None


def _runs(gpu, module, section: Section) -> list[tuple[int, int, int]]:
    """(address, offset in the section, bytes) of each run of the section's variables that lie at
    the same distance from one another once loaded as in the section."""
    runs: list[list[int]] = []  # [address, offset, end offset]
    for name, offset, nbytes in section.variables:
        address, _ = gpu.global_range(module, name)
        last = runs[-1] if runs else None
        if last and address - last[0] == offset - last[1] and offset <= last[2] + 64:
            last[2] = max(last[2], offset + nbytes)
        else:
            runs.append([address, offset, offset + nbytes])
    return [(address, start, end - start) for address, start, end in runs]
