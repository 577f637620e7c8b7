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

from ..wire.protocol import Limits
from ..wire.results import CompileInfo, EntryInfo
from ..wire.signature import DTYPES, Signature, SignatureError, entry_names, find_entry, other_entry_problem
from .compiler import parse_ptxas
from .cubin import kept_state, workspace_names
from .launcher import CaseFailure
from .leftovers import SHARED_POISON
from .math_units import precision_refusal

WORKSPACE_POISON = SHARED_POISON.to_bytes(4, "little")  # a float32 NaN


class Entries:
    def __init__(self, module, source: str, entry: str, signature: Signature, info: CompileInfo):
        self.module, self.source, self.entry, self.signature, self.info = module, source, entry, signature, info
        self._kernels: dict[str, object] = {}
        self.workspace: list[tuple[int, int]] = []  # (address, bytes) of the variables poisoned before each launch
        self.get(None)  # the request's own entry must be there, whatever the cases launch

    def check_precision(self, limits: Limits, trusted: bool = False) -> None:
        """Refuse a module whose math (read from its SASS, math_units.py) is outside the
        experiment's precision policy, before any launch; ``trusted``: the user's own reference,
        only timed, is not held to it."""
        problem = None if trusted else precision_refusal(self.info, limits, self.signature)
        if problem:
            raise CaseFailure("precision", f"the kernel {problem}")

    def check_kept_state(self, limits: Limits, gpu) -> None:
        """Refuse what the module keeps beyond the limit (cubin.kept_state); take the variables
        ``limits.workspace`` names as its workspace."""
        self.info.workspace_bytes, problem = kept_state(self.info, limits)
        if problem:
            raise CaseFailure("global_state", f"the kernel {problem}")
        self.workspace = [gpu.global_range(self.module, name) for name in workspace_names(self.info, limits)]

    def poison_workspace(self, gpu) -> None:
        """Fill the workspace with the shared-memory poison (stream-ordered), before a launch:
        nothing in it survives one, and a read of a slot this launch did not write is NaN."""
        for address, nbytes in self.workspace:
            gpu.fill_async(address, nbytes, WORKSPACE_POISON)

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
