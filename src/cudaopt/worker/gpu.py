"""The worker's GPU (the real :class:`device.Device`): context, stream, raw memory operations,
modules and launches, the gate and the L2 flush.

Memory operations go through the Driver API (``cuda.bindings``, which cuda-core is built on)
with raw device pointers, because the harness works with offsets inside guarded allocations.
"""

from __future__ import annotations

import ctypes
import functools
import io
from dataclasses import dataclass
from importlib import resources

import numpy as np

from ..compilekit.target import target_arch
from ..wire.results import Clocks, DeviceInfo, MeasuredPeaksInfo
from ..wire.signature import DTYPES
from .driver import DEFAULT_SHARED_LIMIT, CudaCallError, allow_dynamic_shared, call

# Element kinds understood by utilities.cu.
KINDS = {
    "float32": 0, "float64": 1, "float16": 2, "bfloat16": 3, "int8": 4, "uint8": 5,
    "int16": 6, "uint16": 7, "int32": 8, "uint32": 9, "int64": 10, "uint64": 11,
}
# Layout of CompareStats in utilities.cu.
COMPARE_STATS = np.dtype([
    ("bad", "<u8"), ("unwritten", "<u8"), ("nan", "<u8"), ("inf", "<u8"),
    ("max_abs", "<f8"), ("max_rel", "<f8"), ("err_sq", "<f8"), ("ref_sq", "<f8"), ("first_bad", "<u8"),
])


def poison_bits(dtype: str) -> int:
    """The poison pattern of one element, as an unsigned integer."""
    info = DTYPES[dtype]
    pattern = info.poison * (info.itemsize // len(info.poison) or 1)
    return int.from_bytes(pattern[: info.itemsize], "little")


@dataclass
class Peaks:
    """Spec peaks from the device's properties (generous on purpose): the speed-of-light floor uses
    the larger of these and the measured peaks (worker/peaks.py)."""

    bytes_per_s: float
    flops_per_s: dict[str, float]


# Floating-point operations per clock per SM on Hopper-class parts (from the published peak
# rates), per element type: the dense matrix-unit rate, an upper bound for any kernel; and the
# CUDA-core rate for float32, the bound for float32 work that may not use tensor cores (TF32
# changes the arithmetic). float64 tensor cores keep full precision, so float64 keeps the matrix rate.
_OPS_PER_CLOCK_PER_SM = {
    "float64": 256,
    "float32": 2048,
    "float16": 4096,
    "bfloat16": 4096,
    "int8": 8192,
    "uint8": 8192,
    "float8": 8192,
}
_FP32_CUDA_CORE_OPS_PER_CLOCK_PER_SM = 256  # 128 FMA lanes


# the peak each math class of a precision policy (wire/precision.py) may reach
_CLASS_RATES = {"tf32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "int8", "fp8": "float8"}


def floor_rate_key(dtype: str, allowed: frozenset[str], rates: dict[str, float]) -> str:
    """Which peak bounds work on ``dtype`` under a precision policy: the fastest of its own (float32
    without tensor cores: the CUDA cores) and those of the math classes the policy allows."""
    own = "float32_cuda_cores" if dtype == "float32" else dtype
    keys = [own, *(_CLASS_RATES[c] for c in sorted(allowed) if c in _CLASS_RATES)]
    return max(keys, key=lambda key: (rates.get(key, 0.0), key == own))


# the kernels of utilities.cu the worker launches, by name
UTILITY_KERNELS = ("cudaopt_gate", "cudaopt_compare", "cudaopt_widen", "cudaopt_diff_bytes", "cudaopt_stage",
                   "cudaopt_scan", "cudaopt_digest", "cudaopt_restore")


class Gpu:
    """One device, one stream, and the harness's own utility kernels."""

    def __init__(self, ordinal: int = 0):
        from cuda.core import Device, LegacyPinnedMemoryResource

        self.device = Device(ordinal)
        self.device.set_current()
        self.stream = self.device.create_stream()
        props = self.device.properties
        self.props = props
        cc = self.device.compute_capability
        self.arch = target_arch(cc.major, cc.minor)
        self.l2_bytes = int(props.l2_cache_size)
        self._flush_bytes = max(2 * self.l2_bytes, 16 << 20)
        self._flush = self.device.allocate(self._flush_bytes, stream=self.stream)
        self._pinned = LegacyPinnedMemoryResource().allocate(64)
        host = (ctypes.c_uint32 * 2).from_address(int(self._pinned.handle))
        self._host = host  # [0]: gate flag, [1]: gate timed out
        self._utils = self._compile_utilities()
        self._stats = self.device.allocate(256, stream=self.stream)
        self._stats_ptr = int(self._stats.handle)
        self.measured = None  # MeasuredPeaks, set by the worker (worker/peaks.py)
        self.stream.sync()

    # --- memory --------------------------------------------------------------------------

    def alloc(self, nbytes: int):
        return self.device.allocate(max(int(nbytes), 1), stream=self.stream)

    def upload(self, ptr: int, array: np.ndarray) -> None:
        """Copy host data to the device, ordered on the harness's stream and finished on return.

        A plain cuMemcpyHtoD from pageable memory may return before its DMA lands, and it is not
        ordered with this (non-blocking) stream: a kernel queued next could read, or an answer's
        mapping be locked, while the copy is still in flight.
        """
        data = np.ascontiguousarray(array)
        if data.nbytes:
            call("cuMemcpyHtoDAsync", ptr, data.ctypes.data, data.nbytes, self.stream.handle)
            self.stream.sync()

    def download(self, ptr: int, nbytes: int) -> np.ndarray:
        self.stream.sync()
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes:
            call("cuMemcpyDtoH", out.ctypes.data, ptr, nbytes)
        return out

    def copy_async(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            call("cuMemcpyDtoDAsync", dst, src, nbytes, self.stream.handle)

    def fill_async(self, ptr: int, nbytes: int, pattern: bytes) -> None:
        """Fill with a repeating 1-, 2- or 4-byte pattern."""
        if not nbytes:
            return
        if len(pattern) == 1 or nbytes % len(pattern):
            call("cuMemsetD8Async", ptr, pattern[0], nbytes, self.stream.handle)
        elif len(pattern) == 2:
            value = int.from_bytes(pattern, "little")
            call("cuMemsetD16Async", ptr, value, nbytes // 2, self.stream.handle)
        else:
            value = int.from_bytes(pattern[:4], "little")
            call("cuMemsetD32Async", ptr, value, nbytes // 4, self.stream.handle)

    def flush_l2(self) -> None:
        """Evict the L2 by writing a buffer twice its size (stream-ordered, outside any timing)."""
        call("cuMemsetD32Async", int(self._flush.handle), 0x5A5A5A5A, self._flush_bytes // 4, self.stream.handle)

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory."""
        free, total = call("cuMemGetInfo")
        return int(free), int(total)

    def lock_memory(self, nbytes: int):
        from .locked import LockedMemory

        return LockedMemory(self.device.device_id, nbytes)

    # --- modules, launches, events -------------------------------------------------------

    def load_module(self, cubin):
        """A compiled module (cuda-core ObjectCode): its kernels are loaded on first use."""
        return cubin

    def global_range(self, module, name: str) -> tuple[int, int]:
        """The device address and size of the module's ``__device__`` variable ``name`` (the module is
        loaded: its entry was fetched first)."""
        from cuda.bindings import driver

        handle = module.handle
        library = isinstance(handle, driver.CUlibrary)
        address, nbytes = call("cuLibraryGetGlobal" if library else "cuModuleGetGlobal", handle, name.encode())
        return int(address), int(nbytes)

    def launch(self, kernel, grid, block, shared_bytes: int, args) -> None:
        from cuda.core import LaunchConfig, launch

        if shared_bytes > DEFAULT_SHARED_LIMIT:
            allow_dynamic_shared(kernel, shared_bytes, self.device.device_id)
        launch(self.stream, LaunchConfig(grid=grid, block=block, shmem_size=shared_bytes), kernel, *args)

    def record_event(self):
        from cuda.core import EventOptions

        return self.stream.record(options=EventOptions(timing_enabled=True))

    def leftovers(self):
        from .leftovers import Leftovers

        return Leftovers(self)

    # --- the gate ------------------------------------------------------------------------

    def _compile_utilities(self) -> dict:
        from cuda.core import Program, ProgramOptions

        source = resources.files(__package__).joinpath("utilities.cu").read_text()
        module = Program(source, "c++", ProgramOptions(arch=self.arch, std="c++17")).compile("cubin", logs=io.StringIO())
        return {name.removeprefix("cudaopt_"): module.get_kernel(name) for name in UTILITY_KERNELS}

    def _grid_for(self, n: int) -> int:
        return max(1, min(-(-n // 256), int(self.props.multiprocessor_count) * 8))

    def _run_utility(self, name: str, n: int, *args) -> None:
        from cuda.core import LaunchConfig, launch

        launch(self.stream, LaunchConfig(grid=self._grid_for(n), block=256), self._utils[name], *args)

    # --- on-device checks ----------------------------------------------------------------

    def compare(self, out_ptr: int, ref_ptr: int, n: int, dtype: str, rtol: float, atol: float) -> dict:
        """Compare ``n`` elements of ``dtype`` with float64 reference values, on the device."""
        info = DTYPES[dtype]
        init = np.zeros(1, dtype=COMPARE_STATS)
        init["first_bad"] = np.iinfo(np.uint64).max
        self.upload(self._stats_ptr, init)
        if n:
            self._run_utility(
                "compare", n, np.uint64(out_ptr), np.uint64(ref_ptr), np.int64(n), np.int32(KINDS[dtype]),
                np.int32(info.itemsize), np.uint64(poison_bits(dtype)), np.int32(info.is_float),
                np.float64(rtol), np.float64(atol), np.uint64(self._stats_ptr),
            )
        raw = self.download(self._stats_ptr, COMPARE_STATS.itemsize).view(COMPARE_STATS)[0]
        return {
            "bad": int(raw["bad"]), "unwritten": int(raw["unwritten"]), "nan": int(raw["nan"]),
            "inf": int(raw["inf"]), "max_abs": float(raw["max_abs"]), "max_rel": float(raw["max_rel"]),
            "err_sq": float(raw["err_sq"]), "ref_sq": float(raw["ref_sq"]),
            "first_bad": None if raw["first_bad"] == np.iinfo(np.uint64).max else int(raw["first_bad"]),
        }

    def widen(self, src_ptr: int, dst_ptr: int, n: int, dtype: str) -> None:
        """Convert ``n`` elements of ``dtype`` to float64 on the device."""
        if n:
            self._run_utility("widen", n, np.uint64(src_ptr), np.uint64(dst_ptr), np.int64(n),
                              np.int32(KINDS[dtype]))

    def diff_bytes(self, a_ptr: int, b_ptr: int, nbytes: int) -> tuple[int, int | None]:
        """How many bytes differ between two device ranges, and the first differing offset."""
        init = np.array([0, np.iinfo(np.uint64).max], dtype=np.uint64)
        self.upload(self._stats_ptr, init)
        if nbytes:
            self._run_utility("diff_bytes", nbytes, np.uint64(a_ptr), np.uint64(b_ptr), np.int64(nbytes),
                              np.uint64(self._stats_ptr), np.uint64(self._stats_ptr + 8))
        count, first = self.download(self._stats_ptr, 16).view(np.uint64)
        return int(count), (None if first == np.iinfo(np.uint64).max else int(first))

    # --- fresh inputs and the launch scan (stream-ordered, never waited on) ----------------------

    def stage(self, slots: int, count: int, total: int, seed: int, stream: int) -> None:
        """Fill a case's buffers for one launch (utilities.cu ``cudaopt_stage``); ``total`` elements."""
        self._run_utility("stage", total, np.uint64(slots), np.int32(count), np.uint64(seed), np.uint64(stream))

    def scan_launch(self, slots: int, count: int, total: int, seed: int, stream: int, inputs: bool,
                    counters: int) -> None:
        """The launch scan (utilities.cu ``cudaopt_scan``): count unwritten outputs (and, with
        ``inputs``, changed inputs) after one launch into two u64 at ``counters``."""
        self._run_utility("scan", total, np.uint64(slots), np.int32(count), np.uint64(seed), np.uint64(stream),
                          np.int32(inputs), np.uint64(counters))

    def digest(self, ptr: int, nbytes: int, key: int, into: int) -> None:
        """Add the keyed digest of ``nbytes`` at ``ptr`` into the u64 at ``into`` (utilities.cu)."""
        if nbytes:
            self._run_utility("digest", nbytes // 4 + 1, np.uint64(ptr), np.int64(nbytes), np.uint64(key),
                              np.uint64(into))

    def restore(self, runs: int, count: int, total: int) -> None:
        """Copy (or zero) each run of a device table of utilities.cu's CudaoptRun (stream-ordered:
        one kernel, never a driver copy that could wait on the stream behind a closed gate)."""
        if count:
            self._run_utility("restore", total, np.uint64(runs), np.int32(count))

    def scrub(self, buffer) -> None:
        """Zero a buffer and free it: an answer key must not outlive its comparison in pool memory."""
        call("cuMemsetD8Async", int(buffer.handle), 0, int(buffer.size), self.stream.handle)
        buffer.close(self.stream)

    def context_alive(self) -> bool:
        """Whether the context still works after an error (a sticky error fails every later call)."""
        try:
            call("cuCtxSynchronize")
            return True
        except CudaCallError:
            return False

    def close_gate(self, timeout_s: float = 5.0) -> None:
        """Hold the stream until :meth:`open_gate`, so queued work runs back to back."""
        from cuda.core import LaunchConfig, launch

        self._host[0] = 0
        self._host[1] = 0
        ptr = int(self._pinned.handle)
        launch(
            self.stream,
            LaunchConfig(grid=1, block=1),
            self._utils["gate"],
            np.uint64(ptr),
            np.uint64(int(timeout_s * 1e9)),
            np.uint64(ptr + 4),
        )

    def open_gate(self) -> None:
        self._host[0] = 1

    def gate_timed_out(self) -> bool:
        return bool(self._host[1])

    # --- facts ---------------------------------------------------------------------------

    @functools.cached_property
    def peaks(self) -> Peaks:
        clock_hz = float(self.props.clock_rate) * 1e3
        sms = int(self.props.multiprocessor_count)
        bandwidth = float(self.props.memory_clock_rate) * 1e3 * 2 * int(self.props.global_memory_bus_width) / 8
        rates = {k: v * sms * clock_hz for k, v in _OPS_PER_CLOCK_PER_SM.items()}
        rates["float32_cuda_cores"] = _FP32_CUDA_CORE_OPS_PER_CLOCK_PER_SM * sms * clock_hz
        return Peaks(bytes_per_s=bandwidth, flops_per_s=rates)

    def info(self) -> DeviceInfo:
        from cuda import core

        cuda_version = call("cuDriverGetVersion")
        measured = None if self.measured is None else MeasuredPeaksInfo(
            bytes_per_s=self.measured.bytes_per_s, flops_per_s=self.measured.flops_per_s,
            measured_at=self.measured.measured_at)
        return DeviceInfo(
            name=self.device.name, arch=self.arch, sm_count=int(self.props.multiprocessor_count),
            l2_bytes=self.l2_bytes, max_shared_per_block_optin=int(self.props.max_shared_memory_per_block_optin),
            driver_cuda_version=f"{cuda_version // 1000}.{cuda_version % 1000 // 10}", driver_version=driver_version(),
            cuda_core=getattr(core, "__version__", "unknown"), nvrtc=nvrtc_version(),
            pci_bus_id=self.device.pci_bus_id, peak_bytes_per_s=self.peaks.bytes_per_s, measured_peaks=measured,
        )

    def facts(self) -> dict[str, int]:
        """What launch expressions may use of this GPU (launch.DEVICE_NAMES)."""
        return {"num_sms": int(self.props.multiprocessor_count)}

    def clocks(self) -> Clocks:
        return read_clocks(self.device.pci_bus_id)


def nvrtc_version() -> str:
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}"
    except Exception as exc:  # reported, not fatal: only used for the environment record
        return f"unknown ({exc.__class__.__name__})"


def driver_version() -> str:
    """The driver's version (NVML's, e.g. 580.159.04), else the CUDA version the driver supports."""
    nvml = _nvml()
    if nvml is not None:
        try:
            version = nvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        except Exception:
            pass  # fall back to the Driver API below
    version = call("cuDriverGetVersion")
    return f"cuda {version // 1000}.{version % 1000 // 10}"


@functools.lru_cache(maxsize=1)
def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def read_clocks(pci_bus_id: str) -> Clocks:
    """SM/memory clock (MHz), temperature (C) and power (W), or an ``error``."""
    nvml = _nvml()
    if nvml is None:
        return Clocks(error="NVML unavailable (install nvidia-ml-py)")
    try:
        handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode() if isinstance(pci_bus_id, str) else pci_bus_id)
        return Clocks(
            sm_mhz=nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            mem_mhz=nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            temperature_c=nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            power_w=round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, 1),
        )
    except Exception as exc:
        return Clocks(error=f"NVML: {exc}")
