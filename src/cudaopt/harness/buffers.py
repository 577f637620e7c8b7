"""Device buffers for one case: guarded working buffers, and a device copy of every input set.

Every argument the kernel sees lives inside a larger allocation, between two guard bands
filled with a known byte. Before each launch the chosen input set is copied into the working
input buffers (so the kernel always sees the same pointers, whatever the data) and the outputs
are poisoned; afterwards the guards, the inputs and the outputs are read back and checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .gpu import Gpu
from .inputs import HostTensor
from .signature import DTYPES, Signature

GUARD_BYTE = 0x5C


def guard_size(nbytes: int) -> int:
    """Guard band width: 1/8 of the buffer, at least 4 KiB, at most 1 MiB, 256-byte aligned."""
    size = min(max(nbytes // 8, 4096), 1 << 20)
    return (size + 255) // 256 * 256


@dataclass
class Guarded:
    buffer: object
    nbytes: int
    guard: int

    @property
    def ptr(self) -> int:
        return int(self.buffer.handle) + self.guard

    @property
    def base(self) -> int:
        return int(self.buffer.handle)


@dataclass
class CaseBuffers:
    gpu: Gpu
    signature: Signature
    sets: list[dict[str, HostTensor]]
    output_shapes: dict[str, tuple[int, ...]]
    inputs: dict[str, Guarded] = field(default_factory=dict)
    outputs: dict[str, Guarded] = field(default_factory=dict)
    set_data: list[dict[str, object]] = field(default_factory=list)  # device copy per set
    slots: list[dict[str, object]] = field(default_factory=list)  # timed outputs per set
    refs: list[dict[str, object]] = field(default_factory=list)  # float64 reference values per set
    key: str = ""  # what the buffers hold (case, input sets), for reuse across requests

    def __post_init__(self):
        for arg in self.signature.inputs:
            nbytes = self.sets[0][arg.name].data.nbytes
            self.inputs[arg.name] = self._guarded(nbytes)
        for arg in self.signature.outputs:
            shape = self.output_shapes[arg.name]
            nbytes = int(np.prod(shape, dtype=np.int64)) * DTYPES[arg.dtype].itemsize
            self.outputs[arg.name] = self._guarded(nbytes)
        for host_set in self.sets:
            device_set = {}
            for name, tensor in host_set.items():
                buf = self.gpu.alloc(tensor.data.nbytes)
                self.gpu.upload(int(buf.handle), tensor.data)
                device_set[name] = buf
            self.set_data.append(device_set)
        self.reset_guards()

    def _guarded(self, nbytes: int) -> Guarded:
        guard = guard_size(nbytes)
        return Guarded(self.gpu.alloc(nbytes + 2 * guard), nbytes, guard)

    def reset_guards(self) -> None:
        for g in [*self.inputs.values(), *self.outputs.values()]:
            self.gpu.fill_async(g.base, g.guard, bytes([GUARD_BYTE]))
            self.gpu.fill_async(g.ptr + g.nbytes, g.guard, bytes([GUARD_BYTE]))

    def stage(self, s: int) -> None:
        """Copy input set ``s`` into the working inputs and poison every output (async)."""
        for name, g in self.inputs.items():
            self.gpu.copy_async(g.ptr, int(self.set_data[s][name].handle), g.nbytes)
        for arg in self.signature.outputs:
            g = self.outputs[arg.name]
            self.gpu.fill_async(g.ptr, g.nbytes, DTYPES[arg.dtype].poison)

    def kernel_args(self, scalars: dict) -> list:
        args = []
        for arg in self.signature.args:
            if arg.is_input:
                args.append(np.uint64(self.inputs[arg.name].ptr))
            elif arg.is_output:
                args.append(np.uint64(self.outputs[arg.name].ptr))
            else:
                args.append(scalar_value(arg.dtype, scalars[arg.name]))
        return args

    def load_references(self, refs: list[dict[str, np.ndarray]]) -> None:
        """Put each set's reference outputs on the device as float64, for the on-device compare."""
        for outputs in refs:
            device_refs = {}
            for name, values in outputs.items():
                data = np.ascontiguousarray(values, dtype=np.float64)
                buf = self.gpu.alloc(data.nbytes)
                self.gpu.upload(int(buf.handle), data)
                device_refs[name] = buf
            self.refs.append(device_refs)

    def elements(self, name: str) -> int:
        return int(np.prod(self.output_shapes[name], dtype=np.int64))

    def output_ptr(self, name: str, from_slot: int | None = None) -> int:
        return self.outputs[name].ptr if from_slot is None else int(self.slots[from_slot][name].handle)

    # --- timed outputs -------------------------------------------------------------------

    def ensure_slots(self) -> None:
        if self.slots:
            return
        for _ in self.sets:
            self.slots.append({name: self.gpu.alloc(g.nbytes) for name, g in self.outputs.items()})

    def save_outputs(self, s: int) -> None:
        for name, g in self.outputs.items():
            self.gpu.copy_async(int(self.slots[s][name].handle), g.ptr, g.nbytes)

    # --- reading back ---------------------------------------------------------------------

    def read_output(self, name: str, dtype: str, from_slot: int | None = None) -> np.ndarray:
        raw = self.gpu.download(self.output_ptr(name, from_slot), self.outputs[name].nbytes)
        return raw.view(DTYPES[dtype].numpy).reshape(self.output_shapes[name])

    def guard_violations(self) -> list[str]:
        """Names of arguments whose guard bands were written, with the first offset."""
        found = []
        for name, g in [*self.outputs.items(), *self.inputs.items()]:
            before = self.gpu.download(g.base, g.guard)
            after = self.gpu.download(g.ptr + g.nbytes, g.guard)
            if (after != GUARD_BYTE).any():
                offset = int(np.flatnonzero(after != GUARD_BYTE)[0])
                found.append(f"{name}: wrote {offset} bytes past the end")
            if (before != GUARD_BYTE).any():
                offset = g.guard - int(np.flatnonzero(before != GUARD_BYTE)[0])
                found.append(f"{name}: wrote {offset} bytes before the start")
        return found

    def modified_inputs(self, s: int) -> list[str]:
        """Inputs whose working copy no longer equals input set ``s`` (compared on the device)."""
        changed = []
        for name, g in self.inputs.items():
            count, first = self.gpu.diff_bytes(g.ptr, int(self.set_data[s][name].handle), g.nbytes)
            if count:
                element = first // max(self.sets[s][name].data.itemsize, 1)
                changed.append(f"{name}: {count} bytes changed, first in element {element}")
        return changed

    def device_bytes(self) -> int:
        bufs = [g.buffer for g in [*self.inputs.values(), *self.outputs.values()]]
        bufs += [b for d in self.set_data + self.slots + self.refs for b in d.values()]
        return sum(int(b.size) for b in bufs)

    def close(self) -> None:
        self.gpu.stream.sync()
        bufs = [g.buffer for g in [*self.inputs.values(), *self.outputs.values()]]
        bufs += [b for d in self.set_data for b in d.values()]
        bufs += [b for d in self.slots + self.refs for b in d.values()]
        for b in bufs:
            b.close(self.gpu.stream)
        self.gpu.stream.sync()


def scalar_value(dtype: str, value):
    """A kernel scalar argument of the right C type."""
    if dtype == "bfloat16":
        from .inputs import from_numbers

        return np.uint16(from_numbers(np.asarray([value], dtype=np.float32), "bfloat16")[0])
    return np.dtype(DTYPES[dtype].numpy).type(value)
