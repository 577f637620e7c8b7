"""A CPU implementation of the harness's Device (src/cudaopt/worker/device.py), for CI.

Memory is NumPy byte arrays at integer addresses, with unmapped gaps between allocations: a
read or write outside every allocation, or into locked memory, is an illegal address, which loses
the context as on a GPU. Kernels are Python functions registered by name
(:meth:`FakeDevice.kernel`); they get the device, the launch (grid, block, shared bytes) and the
arguments the runner passes, and read and write through :meth:`FakeDevice.view`. Each launch of
a registered kernel advances the device clock by its scripted duration, so events around it
measure exactly that. The utility kernels (stage, the launch scan, compare, widen, diff_bytes) do in NumPy
what utilities.cu does on the GPU, reading the same slot table.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from cudaopt.worker.buffers import SLOT
from cudaopt.compilekit.cubin import module_sections
from cudaopt.worker.driver import CudaCallError
from cudaopt.worker.gpu import KINDS, Peaks, poison_bits
from cudaopt.worker.inputs import from_numbers, to_numbers
from cudaopt.wire.results import Clocks, DeviceInfo
from cudaopt.wire.signature import DTYPES

DTYPE_OF_KIND = {kind: name for name, kind in KINDS.items()}
ILLEGAL_ADDRESS = "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"
OUT_OF_MEMORY = "CUDA_ERROR_OUT_OF_MEMORY: out of memory"


@dataclass
class FakeBuffer:
    device: FakeDevice
    handle: int
    size: int

    def close(self, stream=None) -> None:
        self.device.free(self.handle)


@dataclass
class FakeView:
    """A variable inside a section the fake allocated (``section_base``): not freed on its own."""

    handle: int
    size: int

    def close(self, stream=None) -> None:
        pass


def splitmix(x: np.ndarray) -> np.ndarray:
    """utilities.cu's splitmix, element-wise on uint64 (wrapping)."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


@dataclass
class FakeEvent:
    ms: float

    def __sub__(self, other: FakeEvent) -> float:
        return self.ms - other.ms


class FakeStream:
    handle = 0

    def __init__(self, device: FakeDevice):
        self.device = device

    def sync(self) -> None:
        self.device.check_alive()


@dataclass
class FakeKernel:
    """A registered kernel: what cuda-core's Kernel tells the runner, and the Python body."""

    name: str
    body: Callable
    sizes: list[int]  # argument sizes in bytes, as the cubin would say
    duration_ms: Callable[[int], float]  # of the n-th launch of this kernel
    registers: int = 32
    local_bytes: int = 0  # the per-thread local-memory frame
    launches: int = 0

    @property
    def num_arguments(self) -> int:
        return len(self.sizes)

    @property
    def arguments_info(self) -> list:
        return [SimpleNamespace(size=s) for s in self.sizes]

    @property
    def attributes(self):
        return SimpleNamespace(num_regs=self.registers, shared_size_bytes=0, local_size_bytes=self.local_bytes,
                               max_threads_per_block=1024)

    @property
    def occupancy(self):
        return SimpleNamespace(max_active_blocks_per_multiprocessor=lambda threads, shared: 2048 // max(threads, 1))


class FakeModule:
    def __init__(self, kernels: dict[str, FakeKernel]):
        self.kernels = kernels

    def get_kernel(self, name: str) -> FakeKernel:
        if name not in self.kernels:
            raise CudaCallError(f"cuModuleGetFunction: CUDA_ERROR_NOT_FOUND: no kernel {name}")
        return self.kernels[name]


class FakeLocked:
    def __init__(self, device: FakeDevice, nbytes: int):
        self.device = device
        self.size = max(1, -(-nbytes // 4096)) * 4096
        self.ptr = int(device.alloc(self.size).handle)
        device.locked.add(self.ptr)

    def set_readable(self, readable: bool) -> None:
        (self.device.locked.discard if readable else self.device.locked.add)(self.ptr)

    def free(self) -> None:
        self.device.locked.discard(self.ptr)
        self.device.free(self.ptr)


@dataclass
class FakeWipes:
    device: FakeDevice
    poisons: int = 0
    demotes: int = 0

    local_bytes: int = 0

    def poison(self, seen: int = 0) -> None:
        self.poisons += 1

    def cover_local(self, frame_bytes: int) -> None:
        self.local_bytes = max(self.local_bytes, frame_bytes)

    def range_table(self, ranges):
        return self.device.alloc(16 * max(len(ranges), 1)), len(ranges)

    def demote_l2(self, table) -> None:
        self.demotes += 1


@dataclass
class FakeDevice:
    arch: str = "sm_90"
    sm_count: int = 132
    peaks: Peaks = field(default_factory=lambda: Peaks(bytes_per_s=4.8e12, flops_per_s={"float32": 6.7e13}))
    gate_times_out: bool = False  # what gate_timed_out() answers after a closed gate
    measured: object = None
    memory_total: int = 80 << 30

    def __post_init__(self):
        self.props = SimpleNamespace(multiprocessor_count=self.sm_count, max_threads_per_multiprocessor=2048,
                                     max_shared_memory_per_block_optin=227 * 1024)
        self.stream = FakeStream(self)
        self.memory: dict[int, np.ndarray] = {}
        self._bases: list[int] = []
        self._next = 1 << 32
        self.locked: set[int] = set()
        self.kernels: dict[str, FakeKernel] = {}
        self.globals_: dict[str, int] = {}  # the __device__ arrays a test's kernels keep, in bytes
        self.global_buffers: dict[str, FakeBuffer] = {}
        self.clock_ms = 0.0
        self.lost = False
        self.flushes = 0
        self.gates_closed = 0
        self.gate_open = True
        self.wipes = FakeWipes(self)
        self.downloads: list[int] = []  # bytes of each copy back to the host, in order

    # --- the test's side -----------------------------------------------------------------

    def kernel(self, name: str, body: Callable, sizes: Sequence[int],
               duration_ms: float | Callable[[int], float] = 0.01) -> FakeKernel:
        """Register ``body(device, launch, *args)`` as the kernel ``name`` of every module."""
        timing = duration_ms if callable(duration_ms) else (lambda n, ms=duration_ms: ms)
        self.kernels[name] = FakeKernel(name, body, list(sizes), timing)
        return self.kernels[name]

    def view(self, ptr: int, dtype, count: int) -> np.ndarray:
        """``count`` elements of ``dtype`` at ``ptr``, writable; outside an allocation (or into
        locked memory) an illegal address, which loses the context."""
        dtype = np.dtype(dtype)
        base, data = self._find(int(ptr), count * dtype.itemsize)
        offset = int(ptr) - base
        return data[offset: offset + count * dtype.itemsize].view(dtype)

    def _find(self, ptr: int, nbytes: int) -> tuple[int, np.ndarray]:
        i = bisect.bisect_right(self._bases, ptr) - 1
        if i >= 0:
            base = self._bases[i]
            data = self.memory[base]
            if ptr + nbytes <= base + data.size and base not in self.locked:
                return base, data
        self.lost = True
        raise CudaCallError(ILLEGAL_ADDRESS)

    def check_alive(self) -> None:
        if self.lost:
            raise CudaCallError(ILLEGAL_ADDRESS)

    # --- memory --------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> FakeBuffer:
        self.check_alive()
        size = max(int(nbytes), 1)
        if size > self.memory_info()[0]:
            raise CudaCallError(OUT_OF_MEMORY)
        base = self._next
        self._next += (size + 255) // 256 * 256 + (1 << 20)  # an unmapped gap after every allocation
        self.memory[base] = np.full(size, 0xCD, dtype=np.uint8)  # what fresh memory holds is not zero
        bisect.insort(self._bases, base)
        return FakeBuffer(self, base, size)

    def free(self, base: int) -> None:
        self.memory.pop(base, None)
        if base in self._bases:
            self._bases.remove(base)

    def upload(self, ptr: int, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if data.size:
            self.view(ptr, np.uint8, data.size)[:] = data

    def download(self, ptr: int, nbytes: int) -> np.ndarray:
        self.check_alive()
        self.downloads.append(nbytes)
        return self.view(ptr, np.uint8, nbytes).copy() if nbytes else np.empty(0, dtype=np.uint8)

    def copy_async(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            self.view(dst, np.uint8, nbytes)[:] = self.view(src, np.uint8, nbytes)

    def fill_async(self, ptr: int, nbytes: int, pattern: bytes) -> None:
        if nbytes:
            repeated = (pattern * (nbytes // len(pattern) + 1))[:nbytes]
            self.view(ptr, np.uint8, nbytes)[:] = np.frombuffer(repeated, dtype=np.uint8)

    def scrub(self, buffer: FakeBuffer) -> None:
        self.view(buffer.handle, np.uint8, buffer.size)[:] = 0
        buffer.close()

    def memory_info(self) -> tuple[int, int]:
        """(free, total): ``memory_total`` less what is allocated now."""
        return self.memory_total - sum(data.size for data in self.memory.values()), self.memory_total

    def lock_memory(self, nbytes: int) -> FakeLocked:
        return FakeLocked(self, nbytes)

    # --- modules, launches, events, the L2 flush, the gate -------------------------------

    def load_module(self, cubin) -> FakeModule:
        """The test's kernels; the cubin's variables laid out as the driver's loader would, each
        section in one allocation holding its load image, once per device."""
        code = getattr(cubin, "code", None)
        sections, _ = module_sections(bytes(code)) if code else ([], [])
        for section in sections:
            key = ("section", section.name, section.variables[0][0])
            if key in self.global_buffers:
                continue
            buffer = self.alloc(section.size)
            image = section.image if section.image is not None else bytes(section.size)
            self.upload(int(buffer.handle), np.frombuffer(image, dtype=np.uint8))
            self.global_buffers[key] = buffer
            for name, offset, nbytes in section.variables:
                self.global_buffers[name] = FakeView(int(buffer.handle) + offset, nbytes)
        return FakeModule(self.kernels)

    def global_range(self, module: FakeModule, name: str) -> tuple[int, int]:
        """A variable of a loaded module, or a ``__device__`` array the test sized in ``globals_``."""
        if name not in self.global_buffers:
            self.global_buffers[name] = self.alloc(self.globals_[name])
        buffer = self.global_buffers[name]
        return int(buffer.handle), buffer.size

    def launch(self, kernel: FakeKernel, grid, block, shared_bytes: int, args) -> None:
        self.check_alive()
        launch = SimpleNamespace(grid=tuple(grid), block=tuple(block), shared_bytes=shared_bytes)
        kernel.body(self, launch, *args)
        self.clock_ms += kernel.duration_ms(kernel.launches)
        kernel.launches += 1

    def record_event(self) -> FakeEvent:
        return FakeEvent(self.clock_ms)

    def flush_l2(self) -> None:
        self.flushes += 1

    def close_gate(self, timeout_s: float = 5.0) -> None:
        self.gate_open = False
        self.gates_closed += 1

    def open_gate(self) -> None:
        self.gate_open = True

    def gate_timed_out(self) -> bool:
        return self.gate_times_out

    def leftovers(self) -> FakeWipes:
        return self.wipes

    # --- the utility kernels, as utilities.cu computes them ------------------------------

    def compare(self, out_ptr: int, ref_ptr: int, n: int, dtype: str, rtol: float, atol: float) -> dict:
        info = DTYPES[dtype]
        raw = self.view(out_ptr, info.numpy, n)
        actual = to_numbers(raw, dtype).astype(np.float64)
        expected = self.view(ref_ptr, np.float64, n)
        bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[info.itemsize]
        poisoned = (raw.view(bits) == poison_bits(dtype)) & (info.is_float or (actual != expected))
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            diff = np.abs(actual - expected)
            close = diff <= atol + rtol * np.abs(expected)
            good = (close | (np.isnan(actual) & np.isnan(expected)) | (np.isinf(actual) & (actual == expected)))
            good &= ~poisoned
            finite = np.isfinite(diff)
            rel = diff / np.maximum(np.abs(expected), 2.2250738585072014e-308)
        bad = np.flatnonzero(~good)
        return {
            "bad": int(bad.size), "unwritten": int(poisoned.sum()), "nan": int((np.isnan(actual) & ~poisoned).sum()),
            "inf": int(np.isinf(actual).sum()), "max_abs": float(diff[finite].max(initial=0.0)),
            "max_rel": float(rel[finite].max(initial=0.0)), "err_sq": float((diff[finite] ** 2).sum()),
            "ref_sq": float((expected[np.isfinite(expected)] ** 2).sum()),
            "first_bad": int(bad[0]) if bad.size else None,
        }

    def digest(self, ptr: int, nbytes: int, key: int, into: int) -> None:
        """utilities.cu's cudaopt_digest, in NumPy (64-bit wrap-around arithmetic)."""
        if not nbytes:
            return
        data = self.view(ptr, np.uint8, nbytes)
        words = nbytes // 4
        values = data[:4 * words].view(np.uint32).astype(np.uint64)
        with np.errstate(over="ignore"):
            total = int(((values + np.uint64(1)) * splitmix(np.uint64(key) + np.arange(words, dtype=np.uint64))).sum(
                dtype=np.uint64))
            if nbytes % 4:
                tail = int.from_bytes(bytes(data[4 * words:]), "big")
                total += (tail + 1) * int(splitmix(np.uint64(key) + np.uint64(words)))
        word = self.view(into, np.uint64, 1)
        word[0] = np.uint64((int(word[0]) + total) % (1 << 64))

    def restore(self, runs: int, count: int, total: int) -> None:
        from cudaopt.worker.entries import RUN

        for run in self.view(runs, RUN, count):
            target = self.view(int(run["dst"]), np.uint8, int(run["bytes"]))
            target[:] = self.view(int(run["src"]), np.uint8, int(run["bytes"])) if run["src"] else 0

    def widen(self, src_ptr: int, dst_ptr: int, n: int, dtype: str) -> None:
        if n:
            values = to_numbers(self.view(src_ptr, DTYPES[dtype].numpy, n), dtype)
            self.view(dst_ptr, np.float64, n)[:] = values

    def diff_bytes(self, a_ptr: int, b_ptr: int, nbytes: int) -> tuple[int, int | None]:
        differ = np.flatnonzero(self.view(a_ptr, np.uint8, nbytes) != self.view(b_ptr, np.uint8, nbytes))
        return int(differ.size), (int(differ[0]) if differ.size else None)

    def stage(self, slots: int, count: int, total: int, seed: int, stream: int) -> None:
        for slot in self.view(slots, SLOT, count):
            target = self._slot_view(slot)
            target[:] = self._slot_values(slot, seed, stream)

    def scan_launch(self, slots: int, count: int, total: int, seed: int, stream: int, inputs: bool,
                    counters: int) -> None:
        unwritten = changed = 0
        for slot in self.view(slots, SLOT, count):
            if (slot["role"] == 2 and not slot["dist"]) or (slot["role"] != 2 and not inputs):
                continue
            differ = int((self._slot_view(slot) != self._slot_values(slot, seed, stream)).sum())
            if slot["role"] == 2:
                unwritten += int(slot["n"]) - differ  # still equal to the poison
            else:
                changed += differ
        words = self.view(counters, np.uint64, 2)
        words += np.array([unwritten, changed], dtype=np.uint64)

    def _slot_view(self, slot) -> np.ndarray:
        bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[int(slot["itemsize"])]
        return self.view(int(slot["ptr"]), bits, int(slot["n"]))

    def _slot_values(self, slot, seed: int, stream: int) -> np.ndarray:
        """What stage writes into a slot, as raw bits: fresh draws (role 0), a copy of input set 0
        (role 1) or the output poison (role 2)."""
        n, itemsize = int(slot["n"]), int(slot["itemsize"])
        bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]
        if slot["role"] == 2:
            return np.full(n, int(slot["poison"]), dtype=bits)
        if slot["role"] == 1:
            return self.view(int(slot["src"]), bits, n).copy()
        dtype = DTYPE_OF_KIND[int(slot["kind"])]
        rng = np.random.default_rng([int(seed), int(stream), int(slot["index"])])
        dist = int(slot["dist"])
        if dist == 0:
            values = rng.uniform(slot["low"], slot["high"], n)
        elif dist == 1:
            values = rng.normal(slot["mean"], slot["stdev"], n)
        else:
            values = rng.integers(int(slot["low"]), int(slot["high"]), n)
        return np.ascontiguousarray(from_numbers(values.astype(DTYPES[dtype].numpy if dtype != "bfloat16"
                                                               else np.float32), dtype)).view(bits)

    # --- state and facts -----------------------------------------------------------------

    def context_alive(self) -> bool:
        return not self.lost

    def info(self) -> DeviceInfo:
        return DeviceInfo(name="CPU fake", arch=self.arch, sm_count=self.sm_count)

    def facts(self) -> dict[str, int]:
        return {"num_sms": self.sm_count}

    def clocks(self) -> Clocks:
        return Clocks(error="a CPU fake has no clocks")
