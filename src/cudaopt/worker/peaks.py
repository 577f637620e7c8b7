"""Measured peaks (DRAM bandwidth, FP32 and FP64 FMA rates) and the per-case roofline.

The worker measures each GPU once and caches the figures as JSON under the user's cache
directory (``$XDG_CACHE_HOME/cudaopt/peaks/``, by default ``~/.cache/cudaopt/peaks/``), keyed by
the GPU's name, UUID, PCI bus id and driver version: they describe the machine, not a project,
so every checkout and run shares them. ``cudaopt doctor --measure`` measures again.

The roofline's percentages use the measured peaks when known (what a kernel can actually reach)
and the spec peaks otherwise, and say which. The speed-of-light floor, below which a time is
rejected as implausible, uses the larger of the two: a measurement is only as good as our own
copy and FMA kernels (a read-mostly or tensor-core kernel can beat them), and an honest kernel
must never be rejected.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..wire.precision import allowed_math
from ..wire.protocol import WireModel
from ..wire.results import Roofline

if TYPE_CHECKING:
    from .gpu import Gpu

CHAINS = 8  # independent FMA chains per thread in peaks.cu
FMA_ITERATIONS = 1 << 16
SAMPLES = 10


class MeasuredPeaks(WireModel):
    """What one GPU reached: copy bandwidth (bytes read + written per second) and FMA rates."""

    bytes_per_s: float
    flops_per_s: dict[str, float]  # "float32", "float64"
    identity: dict[str, str]  # name, uuid, pci_bus_id, driver
    measured_at: str
    method: str = ""


# --- the cache -----------------------------------------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudaopt" / "peaks"


def cache_path(identity: dict[str, str]) -> Path:
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    slug = re.sub(r"[^a-z0-9]+", "-", identity.get("name", "gpu").lower()).strip("-")
    return cache_dir() / f"{slug}-{digest}.json"


def load(identity: dict[str, str]) -> MeasuredPeaks | None:
    """The cached figures of exactly this GPU and driver; None when missing or unreadable."""
    try:
        peaks = MeasuredPeaks.model_validate_json(cache_path(identity).read_text())
    except (OSError, ValueError):
        return None
    return peaks if peaks.identity == identity else None


def save(peaks: MeasuredPeaks) -> Path:
    path = cache_path(peaks.identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(peaks.to_json(indent=2) + "\n")
    os.replace(tmp, path)  # atomic: two workers measuring at once leave one whole file
    return path


def load_or_measure(gpu: Gpu) -> MeasuredPeaks:
    """The cached figures, or a measurement now (cached when the cache directory is writable)."""
    found = load(identity(gpu))
    if found is None:
        found = measure(gpu)
        try:
            save(found)
        except OSError:
            pass  # measured again by the next worker; the figures are still used now
    return found


# --- measuring (needs the GPU) --------------------------------------------------------------


def identity(gpu: Gpu) -> dict[str, str]:
    from .gpu import driver_version

    return {"name": gpu.device.name, "uuid": str(gpu.device.uuid), "pci_bus_id": gpu.device.pci_bus_id,
            "driver": driver_version()}


def measure(gpu: Gpu, samples: int = SAMPLES) -> MeasuredPeaks:
    """Best of ``samples`` runs each: a device-to-device copy over buffers far larger than the L2,
    and FMA kernels at full occupancy for float32 and float64."""
    return MeasuredPeaks(
        bytes_per_s=_copy_bandwidth(gpu, samples),
        flops_per_s=_fma_rates(gpu, samples),
        identity=identity(gpu),
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        method=f"best of {samples}: cuMemcpyDtoDAsync (bytes read + written), "
               f"{CHAINS}-chain register FMA kernels (2 flops per FMA)",
    )


def _best(gpu: Gpu, samples: int, run, *args) -> float:
    """The shortest of ``samples`` runs, timed with CUDA events after one warm-up run, in seconds."""
    from cuda.core import EventOptions

    timing = EventOptions(timing_enabled=True)
    run(*args)
    gpu.stream.sync()
    times = []
    for _ in range(samples):
        start = gpu.stream.record(options=timing)
        run(*args)
        end = gpu.stream.record(options=timing)
        gpu.stream.sync()
        times.append((end - start) / 1e3)
    return min(times)


def _copy_bandwidth(gpu: Gpu, samples: int) -> float:
    from .gpu import call

    free, _ = call("cuMemGetInfo")
    size = min(max(256 << 20, 16 * gpu.l2_bytes), int(free) // 4) >> 20 << 20
    src, dst = gpu.alloc(size), gpu.alloc(size)
    try:
        gpu.fill_async(int(src.handle), size, b"\x01")
        seconds = _best(gpu, samples, gpu.copy_async, int(dst.handle), int(src.handle), size)
    finally:
        src.close(gpu.stream)
        dst.close(gpu.stream)
    return 2 * size / seconds


def _fma_rates(gpu: Gpu, samples: int) -> dict[str, float]:
    from cuda.core import LaunchConfig, Program, ProgramOptions, launch

    source = resources.files(__package__).joinpath("peaks.cu").read_text()
    module = Program(source, "c++", ProgramOptions(arch=gpu.arch, std="c++17")).compile("cubin", logs=io.StringIO())
    block = 256
    grid = int(gpu.props.multiprocessor_count) * max(1, int(gpu.props.max_threads_per_multiprocessor) // block)
    config = LaunchConfig(grid=grid, block=block)
    sink = gpu.alloc(8)
    rates = {}
    try:
        for dtype, entry in (("float32", "cudaopt_fma_f32"), ("float64", "cudaopt_fma_f64")):
            value = np.dtype(dtype).type
            args = (value(0.999), value(1e-3), np.int32(FMA_ITERATIONS), np.uint64(int(sink.handle)))
            seconds = _best(gpu, samples, launch, gpu.stream, config, module.get_kernel(entry), *args)
            rates[dtype] = 2.0 * CHAINS * FMA_ITERATIONS * grid * block / seconds
    finally:
        sink.close(gpu.stream)
    return rates


# --- the roofline (arithmetic only) ----------------------------------------------------------


def roofline(seconds: float, flops: float | None, nbytes: float | None, *, spec_flops: float,
             spec_bytes: float, measured_flops: float | None = None, measured_bytes: float | None = None,
             memory_floor: bool = True) -> Roofline:
    """Achieved rates, their share of the roofs and the speed-of-light floor for one timed case.

    Roofs: the measured peak when there is one, else the spec (``*_from`` says which). Floor: the
    declared work over the larger of the two; the memory floor only when the L2 was flushed.
    """
    roof = Roofline()
    floors: dict[str, float] = {}
    if flops is not None:
        peak, source = (measured_flops, "measured") if measured_flops else (spec_flops, "spec")
        roof.flops, roof.achieved_tflops = flops, round(flops / seconds / 1e12, 3)
        roof.peak_tflops, roof.peak_tflops_from = round(peak / 1e12, 1), source
        roof.compute_pct = round(100 * flops / seconds / peak, 1)
        floors["compute"] = flops / max(spec_flops, measured_flops or 0.0)
    if nbytes is not None:
        peak, source = (measured_bytes, "measured") if measured_bytes else (spec_bytes, "spec")
        roof.bytes, roof.achieved_gbps = nbytes, round(nbytes / seconds / 1e9, 1)
        roof.peak_gbps, roof.peak_gbps_from = round(peak / 1e9, 1), source
        roof.memory_pct = round(100 * nbytes / seconds / peak, 1)
        if memory_floor:
            floors["memory"] = nbytes / max(spec_bytes, measured_bytes or 0.0)
    if floors:
        bound, floor = max(floors.items(), key=lambda kv: kv[1])
        roof.floor_us, roof.bound = round(floor * 1e6, 3), bound
    return roof


def judge_plausibility(out, case, signature, limits, flush_l2: bool, spec, measured) -> None:
    """Fill ``out.roofline``; a median under the speed-of-light floor for the arithmetic the
    experiment allows makes the case ``implausible``. Flops and bytes come from the case's own
    scalars, never from a candidate's tunables."""
    from ..wire import expr
    from .gpu import floor_rate_key

    if out.timing is None or out.status != "ok":
        return
    try:
        flops = float(expr.evaluate(case.flops, case.scalars)) if case.flops is not None else None
        nbytes = float(expr.evaluate(case.bytes, case.scalars)) if case.bytes is not None else None
    except expr.ExprError as exc:
        out.roofline = Roofline(error=str(exc))
        return
    dtype = compute_class(signature)
    rate_key = floor_rate_key(dtype, allowed_math(limits, signature), spec.flops_per_s)
    out.roofline = roofline(
        out.timing.median_us * 1e-6, flops, nbytes,
        spec_flops=spec.flops_per_s.get(rate_key, max(spec.flops_per_s.values())), spec_bytes=spec.bytes_per_s,
        measured_flops=measured.flops_per_s.get(dtype) if measured else None,
        measured_bytes=measured.bytes_per_s if measured else None, memory_floor=flush_l2,
    )
    out.roofline.floor_rate = rate_key
    floor_us = out.roofline.floor_us
    if floor_us is not None and out.timing.median_us < floor_us:
        # the floor's figure stays in out.roofline, which the model is never shown: a reason that
        # quoted it would say how far to pad
        out.status = "implausible"
        out.reason = (
            f"median {out.timing.median_us:.3f} us is below the speed-of-light floor for the precision the "
            f"experiment allows ({out.roofline.bound}-bound, from the declared work and the larger of the spec "
            f"and measured peaks for {rate_key.replace('_', ' ')})"
        )


def compute_class(signature) -> str:
    """The narrowest floating type among the inputs decides which peak rate bounds the kernel."""
    widths = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1}
    dtypes = [a.dtype for a in signature.inputs if a.dtype in widths] or ["float32"]
    return min(dtypes, key=lambda d: widths[d])
