"""Device buffers for one case: guarded working buffers, and a device copy of every input set.

Every argument the kernel sees lives inside a larger allocation, between two guard bands. For
floating types the bands read as NaN (a result that used a read past the end is poisoned); for
integers they hold an out-of-range pattern. Before each launch an input set is copied into the
working input buffers, or fresh inputs are drawn there on the device (so the kernel always sees
the same pointers, whatever the data), and the outputs are poisoned; afterwards the guards, the
inputs and the outputs are checked. Reference outputs never live here: see answers.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..wire.protocol import InitSpec
from ..wire.signature import DTYPES, Signature
from .device import Device
from .gpu import KINDS, poison_bits
from .inputs import HostTensor

# Guard patterns: a NaN in every float width that differs from the output poison (0x7FF8...), and
# for integers a byte that makes a huge or negative index.
_GUARD_FLOAT32 = b"\xa5\xa5\xf8\x7f"  # 0x7FF8A5A5: NaN as float32, and twice over as float64
_GUARD_HALF = b"\xa5\x7f"  # 0x7FA5: NaN as float16 and as bfloat16
_GUARD_INT = b"\xa5"


def guard_pattern(dtype: str) -> bytes:
    if not DTYPES[dtype].is_float:
        return _GUARD_INT
    return _GUARD_HALF if DTYPES[dtype].itemsize == 2 else _GUARD_FLOAT32


def guard_size(nbytes: int) -> int:
    """Guard band width: 1/8 of the buffer, at least 4 KiB, at most 1 MiB, 256-byte aligned."""
    size = min(max(nbytes // 8, 4096), 1 << 20)
    return (size + 255) // 256 * 256


# utilities.cu's struct Slot
SLOT = np.dtype([
    ("ptr", "<u8"), ("src", "<u8"), ("n", "<i8"), ("kind", "<i4"), ("itemsize", "<i4"), ("role", "<i4"),
    ("dist", "<i4"), ("low", "<f8"), ("high", "<f8"), ("mean", "<f8"), ("stdev", "<f8"), ("poison", "<u8"),
    ("index", "<u8"),
])


def fresh(init: InitSpec) -> bool:
    """Whether an input can be drawn anew on the device for every launch (files and inputs that
    must not vary, such as indices, are copied from input set 0 instead)."""
    return init.vary and init.dist != "file"


@dataclass
class Guarded:
    buffer: object
    nbytes: int
    guard: int
    dtype: str

    @property
    def ptr(self) -> int:
        return int(self.buffer.handle) + self.guard

    @property
    def base(self) -> int:
        return int(self.buffer.handle)


@dataclass
class CaseBuffers:
    gpu: Device
    signature: Signature
    sets: list[dict[str, HostTensor]]
    output_shapes: dict[str, tuple[int, ...]]
    inits: dict[str, InitSpec] = field(default_factory=dict)  # how each input is drawn
    guards: bool = True  # False under compute-sanitizer, which must see the allocations' true ends
    inputs: dict[str, Guarded] = field(default_factory=dict)
    outputs: dict[str, Guarded] = field(default_factory=dict)
    set_data: list[dict[str, object]] = field(default_factory=list)  # device copy per set
    slots: list[dict[str, object]] = field(default_factory=list)  # outputs of the checked timed launches
    key: str = ""  # what the buffers hold (case, input sets), for reuse across requests
    _slots: tuple | None = None  # the stage/scan table on the device (see slot_table)

    def __post_init__(self):
        for arg in self.signature.inputs:
            nbytes = self.sets[0][arg.name].data.nbytes
            self.inputs[arg.name] = self._guarded(nbytes, arg.dtype)
        for arg in self.signature.outputs:
            shape = self.output_shapes[arg.name]
            nbytes = int(np.prod(shape, dtype=np.int64)) * DTYPES[arg.dtype].itemsize
            self.outputs[arg.name] = self._guarded(nbytes, arg.dtype)
        for host_set in self.sets:
            device_set = {}
            for name, tensor in host_set.items():
                buf = self.gpu.alloc(tensor.data.nbytes)
                self.gpu.upload(int(buf.handle), tensor.data)
                device_set[name] = buf
            self.set_data.append(device_set)
        self.reset_guards()

    def _guarded(self, nbytes: int, dtype: str) -> Guarded:
        guard = guard_size(nbytes) if self.guards else 0
        return Guarded(self.gpu.alloc(nbytes + 2 * guard), nbytes, guard, dtype)

    def reset_guards(self) -> None:
        for g in [*self.inputs.values(), *self.outputs.values()]:
            self.gpu.fill_async(g.base, g.guard, guard_pattern(g.dtype))
            self.gpu.fill_async(g.ptr + g.nbytes, g.guard, guard_pattern(g.dtype))

    def stage(self, s: int) -> None:
        """Copy input set ``s`` into the working inputs and poison every output (async)."""
        for name, g in self.inputs.items():
            self.gpu.copy_async(g.ptr, int(self.set_data[s][name].handle), g.nbytes)
        self.poison_outputs()

    def poison_outputs(self) -> None:
        for arg in self.signature.outputs:
            g = self.outputs[arg.name]
            self.gpu.fill_async(g.ptr, g.nbytes, DTYPES[arg.dtype].poison)

    def stage_fresh(self, key: int, stream: int) -> None:
        """Draw inputs for stream ``stream`` (a launch number: no other launch sees them) from
        ``key`` (LaunchPlan.inputs_key) and poison the outputs, in one stream-ordered kernel."""
        slots, count, most = self.slot_table()
        self.gpu.stage(slots, count, most, key, stream)

    def scan_launch(self, key: int, stream: int, counters: int, inputs: bool) -> None:
        """The launch scan, after a launch on stream ``stream``'s inputs: add its unwritten output
        elements to the u64 at ``counters`` and, with ``inputs``, its changed input elements to the
        next one (async)."""
        slots, count, most = self.slot_table()
        self.gpu.scan_launch(slots, count, most, key, stream, inputs, counters)

    def slot_table(self) -> tuple[int, int, int]:
        """The device table utilities.cu's stage and scan kernels read: one slot per buffer
        (built on first use; its upload waits on the stream, so never behind a closed gate)."""
        if self._slots is None:
            table = np.zeros(len(self.inputs) + len(self.outputs), dtype=SLOT)
            for i, arg in enumerate(self.signature.inputs):
                init, g = self.inits[arg.name], self.inputs[arg.name]
                row = table[i]
                row["ptr"], row["n"] = g.ptr, self.input_elements(arg.name)
                row["kind"], row["itemsize"] = KINDS[arg.dtype], DTYPES[arg.dtype].itemsize
                row["index"] = i
                if fresh(init):
                    row["role"], row["dist"] = 0, {"uniform": 0, "normal": 1, "integers": 2}[init.dist]
                    row["low"], row["high"], row["mean"], row["stdev"] = init.low, init.high, init.mean, init.std
                else:
                    row["role"], row["src"] = 1, int(self.set_data[0][arg.name].handle)
            for j, arg in enumerate(self.signature.outputs, len(self.inputs)):
                row = table[j]
                row["ptr"], row["n"], row["role"] = self.outputs[arg.name].ptr, self.elements(arg.name), 2
                row["kind"], row["itemsize"] = KINDS[arg.dtype], DTYPES[arg.dtype].itemsize
                row["dist"], row["poison"] = int(scanned_for_poison(arg.dtype)), poison_bits(arg.dtype)
            buffer = self.gpu.alloc(table.nbytes)
            self.gpu.upload(int(buffer.handle), table)
            self._slots = (buffer, len(table), int(table["n"].max(initial=1)))
        buffer, count, most = self._slots
        return int(buffer.handle), count, most

    def ranges(self, input_set: int | None = None) -> dict[str, tuple[int, tuple[int, ...]]]:
        """Every pointer argument's (device address, shape): the working buffers, or with
        ``input_set`` that set's pristine device copy of each input (and no outputs)."""
        out = {}
        for arg in self.signature.inputs:
            data = self.inputs[arg.name].ptr if input_set is None else int(self.set_data[input_set][arg.name].handle)
            out[arg.name] = (data, self.sets[0][arg.name].data.shape)
        if input_set is None:
            out |= {a.name: (self.outputs[a.name].ptr, self.output_shapes[a.name]) for a in self.signature.outputs}
        return out

    def allocations(self) -> list[tuple[int, int]]:
        """(address, bytes) of every working allocation, guard bands included: all the candidate's
        pointers reach."""
        return [(g.base, g.nbytes + 2 * g.guard) for g in [*self.inputs.values(), *self.outputs.values()]]

    def input_elements(self, name: str) -> int:
        return int(self.sets[0][name].data.size)

    def download_inputs(self) -> dict[str, HostTensor]:
        """The working inputs as host tensors (for a NumPy reference on fresh inputs)."""
        out = {}
        for arg in self.signature.inputs:
            g = self.inputs[arg.name]
            raw = self.gpu.download(g.ptr, g.nbytes)
            shape = self.sets[0][arg.name].data.shape
            out[arg.name] = HostTensor(arg.name, arg.dtype, raw.view(DTYPES[arg.dtype].numpy).reshape(shape))
        return out

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

    def elements(self, name: str) -> int:
        return int(np.prod(self.output_shapes[name], dtype=np.int64))

    def output_ptr(self, name: str, from_slot: int | None = None) -> int:
        return self.outputs[name].ptr if from_slot is None else int(self.slots[from_slot][name].handle)

    # --- outputs of checked timed launches ------------------------------------------------

    def ensure_slots(self, count: int) -> None:
        while len(self.slots) < count:
            self.slots.append({name: self.gpu.alloc(g.nbytes) for name, g in self.outputs.items()})

    def save_outputs(self, s: int, key: int, digest: int) -> None:
        """Copy the outputs to slot ``s`` and add their digest under ``key`` into the word at
        ``digest`` (stream-ordered): the digest tells later whether the slot was written since."""
        for i, (name, g) in enumerate(self.outputs.items()):
            self.gpu.copy_async(int(self.slots[s][name].handle), g.ptr, g.nbytes)
            self.gpu.digest(g.ptr, g.nbytes, key ^ i, digest)

    def digest_slot(self, s: int, key: int) -> int:
        """The digest under ``key`` of what slot ``s`` holds now."""
        word = self.gpu.alloc(8)
        try:
            self.gpu.fill_async(int(word.handle), 8, b"\0")
            for i, (name, g) in enumerate(self.outputs.items()):
                self.gpu.digest(int(self.slots[s][name].handle), g.nbytes, key ^ i, int(word.handle))
            return int(self.gpu.download(int(word.handle), 8).view(np.uint64)[0])
        finally:
            word.close(self.gpu.stream)

    # --- after the launches ---------------------------------------------------------------

    def guard_violations(self) -> list[str]:
        """Names of arguments whose guard bands were written, with where."""
        found = []
        for name, g in [*self.outputs.items(), *self.inputs.items()]:
            if not g.guard:
                continue
            pattern = guard_pattern(g.dtype)
            expected = np.frombuffer(pattern * (g.guard // len(pattern)), dtype=np.uint8)
            before = self.gpu.download(g.base, g.guard) != expected
            after = self.gpu.download(g.ptr + g.nbytes, g.guard) != expected
            if after.any():
                first = int(np.flatnonzero(after)[0])
                found.append(f"{name}: wrote past the end (from byte {first + 1} after the last element)")
            if before.any():
                first = g.guard - int(np.flatnonzero(before)[0])
                found.append(f"{name}: wrote before the start (from byte {first} before the first element)")
        return found

    def altered_fixed_inputs(self) -> list[str]:
        """Inputs copied from input set 0 for every launch (``fresh`` is false) whose device copy of
        set 0 no longer equals the host's: a kernel that rewrote it would have every later launch,
        and the reference of the hidden checks, computed on what it wrote."""
        altered = []
        for arg in self.signature.inputs:
            if fresh(self.inits[arg.name]):
                continue
            host = np.ascontiguousarray(self.sets[0][arg.name].data).reshape(-1).view(np.uint8)
            device = self.gpu.download(int(self.set_data[0][arg.name].handle), host.nbytes)
            if not np.array_equal(device, host):
                first = int(np.flatnonzero(device != host)[0]) // max(self.sets[0][arg.name].data.itemsize, 1)
                altered.append(f"{arg.name}: the copy every launch is staged from was changed, first in element {first}")
        return altered

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
        bufs += [b for d in self.set_data + self.slots for b in d.values()]
        bufs += [self._slots[0]] if self._slots else []
        return sum(int(b.size) for b in bufs)

    def close(self) -> None:
        self.gpu.stream.sync()
        bufs = [g.buffer for g in [*self.inputs.values(), *self.outputs.values()]]
        bufs += [b for d in self.set_data for b in d.values()]
        bufs += [b for d in self.slots for b in d.values()]
        bufs += [self._slots[0]] if self._slots else []
        for b in bufs:
            b.close(self.gpu.stream)
        self.gpu.stream.sync()


def scanned_for_poison(dtype: str) -> bool:
    """Outputs whose poison cannot be a plausible result (floats: a NaN payload no arithmetic
    makes; 32/64-bit integers: an unusual pattern) are scanned after every launch. Narrow
    integers are left to the checked launches, where a matching value is told apart."""
    return DTYPES[dtype].is_float or DTYPES[dtype].itemsize >= 4


def scalar_value(dtype: str, value):
    """A kernel scalar argument of the right C type."""
    if dtype == "bfloat16":
        from .inputs import from_numbers

        return np.uint16(from_numbers(np.asarray([value], dtype=np.float32), "bfloat16")[0])
    return np.dtype(DTYPES[dtype].numpy).type(value)
