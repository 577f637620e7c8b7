"""``cudaopt doctor``: what this machine has, and what to do about what it lacks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .compilekit.compile_process import COMPILERS, CompilerUnavailable
from .worker.gpu import Gpu, call, nvrtc_version
from .compilekit.nvrtc_build import HEADER_LIBS, header_roots
from .worker.peaks import measure, save


@dataclass
class Check:
    name: str
    ok: bool
    value: str
    fix: str = ""


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def run_checks() -> list[Check]:
    checks = [Check("cudaopt", True, _version("cudaopt") or "source tree")]
    core = _version("cuda-core")
    checks.append(Check("cuda-core", core is not None, core or "missing", "pip install 'cuda-core[cu13]'"))

    checks.append(_nvrtc_check(nvrtc_version(), header_releases()))
    checks.extend(_compile_checks())
    checks.extend(_gpu_checks())
    checks.append(_ncu_check())
    key = bool(os.environ.get("OPENAI_API_KEY"))
    checks.append(Check(
        "model credentials", key, "OPENAI_API_KEY is set" if key else "OPENAI_API_KEY not set",
        "export OPENAI_API_KEY=... (or use --base-url with a local OpenAI-compatible server)",
    ))
    return checks


def _release(version: str) -> str:
    """``major.minor`` of a version (``13.5.37`` -> ``13.5``)."""
    return ".".join(version.split(".")[:2])


def header_releases() -> dict[str, str]:
    """The CUDA release (``13.5``) of each header family NVRTC compiles against, where it can be
    told: the runtime headers by their ``CUDART_VERSION``, the ``crt/`` headers beside them by the
    wheel that installed them (a system toolkit's are its runtime's release)."""

    root = next((directory for lib, directory, _ in header_roots() if lib == "cudart"), None)
    if root is None:
        return {}
    found = {}
    try:
        text = (Path(root) / "cuda_runtime_api.h").read_text(errors="replace")
    except OSError:
        text = ""
    if (match := re.search(r"#define\s+CUDART_VERSION\s+(\d+)", text)) is not None:
        number = int(match.group(1))
        found["cudart"] = f"{number // 1000}.{number % 1000 // 10}"
    crt = (Path(root) / "crt" / "host_config.h").resolve()
    for dist in metadata.distributions():
        if not (dist.metadata["Name"] or "").lower().startswith(("nvidia", "cuda")):
            continue
        files = [f for f in dist.files or () if str(f).endswith("crt/host_config.h")]
        if any(Path(dist.locate_file(f)).resolve() == crt for f in files):
            found["crt"] = _release(dist.version)
            break
    else:
        if crt.is_file() and "cudart" in found:
            found["crt"] = found["cudart"]
    return found


def _nvrtc_check(nvrtc: str, headers: dict[str, str]) -> Check:
    """NVRTC's version, and whether the headers it compiles with come from its own CUDA release: a
    compiler of one release over the headers of another fails on some kernels, or builds them
    differently from the release either one says."""
    wheel = _version("nvidia-cuda-nvrtc")
    shown = f"{nvrtc} (nvidia-cuda-nvrtc {wheel})" if wheel else f"{nvrtc} (not from a wheel)"
    if nvrtc.startswith("unknown"):
        return Check("NVRTC", False, shown, "pip install 'cuda-core[cu13]' (brings the NVRTC wheel)")
    others = {family: release for family, release in headers.items() if release != _release(nvrtc)}
    if others:
        said = ", ".join(f"{family} headers {release}" for family, release in others.items())
        return Check("NVRTC", False, f"{shown}, but {said}: not one CUDA release",
                     f"install NVRTC and the headers from one release: pip install --force-reinstall "
                     f"'cuda-toolkit[nvrtc,cudart,cccl,crt,curand]=={_release(nvrtc)}.*' (add PyTorch with "
                     "pip install -e '.[torch]', which keeps them together)")
    said = ", ".join(f"{family} {release}" for family, release in headers.items())
    return Check("NVRTC", True, f"{shown}; headers of the same release ({said})" if said else shown)


def _compile_checks() -> list[Check]:
    """Where NVRTC's headers come from, and what confines the compiler process."""
    roots = header_roots()
    found = {lib for lib, _, _ in roots}
    wheels = all(how == "site-packages" for _, _, how in roots)
    shown = "; ".join(f"{lib}: {directory} ({how})" for lib, directory, how in roots) or "none found"
    missing = [lib for lib in HEADER_LIBS if lib not in found]
    if missing:
        shown += f"; missing: {', '.join(missing)}"
    checks = [Check("CUDA headers", not missing and wheels, shown,
                    "pip install -e . (declares the header wheels: cuda-toolkit[cudart,cccl,crt,curand])")]
    try:
        hello = COMPILERS.status()
    except CompilerUnavailable as exc:
        return checks + [Check("compile sandbox", False, f"the compiler process does not start: {exc}",
                               "reinstall cudaopt's dependencies (pip install -e .)")]
    if hello.get("landlock"):
        value = f"Landlock ABI {hello['landlock']}: the compiler reads the CUDA headers only"
        return checks + [Check("compile sandbox", True, value)]
    return checks + [Check("compile sandbox", False, f"Landlock not available ({hello.get('why')}): scan only",
                           "a Linux kernel >= 5.13 with Landlock enabled (lsm=...,landlock) confines the "
                           "compiler; without it the include scan alone keeps kernels from host files")]


def _gpu_checks() -> list[Check]:
    try:
        from cuda.core import Device


        device = Device(0)
        device.set_current()
        props = device.properties
        version = call("cuDriverGetVersion")
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        return [Check("GPU", False, f"none usable ({reason})",
                      "run on a machine with an NVIDIA GPU and driver (nvidia-smi should list it)")]
    cc = device.compute_capability
    return [
        Check("GPU", True, f"{device.name} (sm_{cc.major}{cc.minor}, {props.multiprocessor_count} SMs, "
              f"L2 {props.l2_cache_size // (1 << 20)} MiB)"),
        Check("driver CUDA version", True, f"{version // 1000}.{version % 1000 // 10}"),
    ]


def _ncu_check() -> Check:
    ncu = shutil.which("ncu")
    if ncu is None:
        return Check("Nsight Compute (ncu)", False, "not on PATH",
                     "install Nsight Compute and put ncu on PATH (only --use-nsight needs it)")
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=30).stdout
        version = out.strip().splitlines()[-1] if out.strip() else "unknown version"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("Nsight Compute (ncu)", False, f"{ncu} does not run: {exc}", "reinstall Nsight Compute")
    restricted = _profiling_restricted()
    if restricted and os.geteuid() != 0:
        return Check("Nsight Compute (ncu)", False, f"{version}; counters restricted to admins",
                     "run as root or set NVreg_RestrictProfilingToAdminUsers=0 (ERR_NVGPUCTRPERM)")
    return Check("Nsight Compute (ncu)", True, version)


def _profiling_restricted() -> bool:
    try:
        with open("/proc/driver/nvidia/params") as fh:
            return any(line.strip() == "RmProfilingAdminOnly: 1" for line in fh)
    except OSError:
        return False


@dataclass
class PeakRow:
    name: str
    unit: str
    spec: float
    measured: float


def measure_peaks(device: int = 0) -> tuple[list[PeakRow], str]:
    """Measure the GPU's peaks now, replace its cached figures, and set them beside the spec ones.

    Returns the rows and the cache file. The spec FP32/FP64 figures are the matrix-unit rates the
    speed-of-light floor uses; the measured ones are FMA rates on the CUDA cores.
    """
    gpu = Gpu(device)
    found = measure(gpu)
    path = save(found)
    spec = gpu.peaks
    rows = [PeakRow("memory bandwidth", "GB/s", spec.bytes_per_s / 1e9, found.bytes_per_s / 1e9)]
    for kind, label in (("float32", "FP32"), ("float64", "FP64")):
        rows.append(PeakRow(label, "TFLOP/s", spec.flops_per_s[kind] / 1e12, found.flops_per_s[kind] / 1e12))
    return rows, str(path)
