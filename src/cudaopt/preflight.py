"""``cudaopt check``: everything about an experiment that can be checked without a GPU.

Loading an experiment already checks its files, fields, signature and every expression on every
case (experiment.py). Here come the checks that need the kernel or the target: every case's
launch (or a ``--launch``) against the kernel's entries and the target's shared memory, and each
case's device memory against the GPU's (NVML; where there is none, an assumed 80 GiB is
compared, and only what no GPU holds refused); then the checks that run code: each kernel (the
initial one, a
``--kernel``, the tunable kernel with its first configuration) and a ``.cu`` reference compiled
with NVRTC for the target architecture, each kernel's SASS held to the precision policy as the
worker holds it; a NumPy reference called on the smallest case, in a
subprocess with a timeout, its outputs' shapes compared with the case's; a PyTorch reference the
same way, on the CPU, where torch can be imported (elsewhere its syntax, function and parameters
are all that is checked, and the check says so); then the negative controls of every case the CPU
can run (cpu_controls.py): a case that accepts a trivial output is refused. ``evaluate`` and
``optimize`` run the same checks before they start a GPU worker, so a mistake is reported the
same way, on one line naming the file and the field, with or without a GPU.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .children import run_child
from .crosschecks import check_launch, shared_limit
from .reading import read_text_file
from .cpu_controls import cpu_controls, cpu_tensor
from .errors import ExperimentError
from .experiment import Experiment
from .worker.case_data import case_bytes, memory_text
from .compilekit.compiler import CompileError, compile_kernel, ready
from .compilekit.target import DEFAULT_ARCH, target_arch
from .compilekit.cubin import kept_state
from .worker.inputs import InputError, generate, shape_of
from .compilekit.math_units import precision_refusal
from .wire.launch import NOMINAL_DEVICE, device_defines
from .wire.precision import allowed_math, math_text
from .wire.protocol import CaseSpec, KernelSpec, LaunchSpec, Limits, ReferenceSpec, WireModel
from .wire.signature import DTYPES, parse_signature
from .worker.reference import ReferenceFailure, call_python, load_python
from .worker.torch_reference import call_torch, import_torch

REFERENCE_TIMEOUT_S = 120.0
DEFAULT_GPU_MEMORY = 80 * 2**30  # the memory assumed when no GPU says how much it has
LARGEST_GPU_MEMORY = 192 * 2**30  # beyond any one GPU's (a B200's 192 GiB): bad input even with no GPU to ask
THIS_GPU = "of this machine's GPU"


@dataclass
class Checked:
    what: str
    detail: str


def local_arch() -> str:
    """The first GPU's target architecture (e.g. sm_90a), or sm_90a where there is none."""
    cc = _local_capability()
    return target_arch(cc.major, cc.minor) if cc is not None else DEFAULT_ARCH


def has_local_gpu() -> bool:
    """Whether the driver opens a GPU on this machine."""
    return _local_capability() is not None


@functools.lru_cache(maxsize=1)
def _local_capability():
    try:
        from cuda.core import Device

        return Device(0).compute_capability
    except Exception:  # no driver, no device
        return None


def preflight(experiment: Experiment, *, kernel: Path | None = None, entry: str | None = None,
              arch: str | None = None, tune: bool = True, launch: LaunchSpec | None = None,
              launch_origin: str = "--launch", ahead: Sequence[dict] = ()) -> list[Checked]:
    """Run every check; raise :class:`ExperimentError` (file and field) at the first failure.
    ``kernel`` replaces the initial kernel; ``tune`` includes the tunable kernel; ``launch``
    (given by ``launch_origin``: a flag or a file) replaces every case's launch. ``ahead``: the
    tunable kernel's configurations a run on this machine's GPU measures first, compiled beside
    the checks and kept on disk (kept_cubins.py), so its GPU worker loads them instead of making
    the run wait for their compilation; one that does not compile is the run's to report, as its
    attempt's compile error."""
    arch = arch or local_arch()
    sources = [(kernel, entry)] if kernel else []
    if experiment.initial_kernel_path and not kernel:
        sources.append((experiment.initial_kernel_path, None))
    texts = [read_text_file(path, "kernel") for path, _ in sources]  # a missing or unreadable kernel first
    with Compilations(experiment, sources, texts, arch, tune, ahead) as compiled:
        done = _checks(experiment, sources, texts, compiled, arch, launch, launch_origin)
        kept = sum(f.result() for f in compiled.ahead)
        if compiled.ahead:
            done.append(Checked("ahead", f"{kept} of {len(compiled.ahead)} further configurations compiled for "
                                         "the run's GPU worker"))
        return done


class Compilations:
    """The pre-flight's NVRTC compilations (a ``.cu`` reference, each kernel, the tunable kernel's first
    configuration), started together on entry, each in a compiler process of its own, so the checks
    wait for the slowest rather than for their sum; read in the checks' order, so the first failure
    reported is the same. Those not yet read when a check fails are cancelled, or awaited on exit."""

    def __init__(self, experiment: Experiment, sources: list[tuple[Path, str | None]], texts: list[str], arch: str,
                 tune: bool, ahead: Sequence[dict] = ()):
        tuning = experiment.tuning if tune else None
        first = tuning.space.first() if tuning is not None else None
        ahead = [d for d in ahead if tuning is not None and d != first]
        cores = min(len(ahead), max(1, (os.cpu_count() or 2) - len(sources) - 2))
        ready()
        self._pool = ThreadPoolExecutor(max_workers=len(sources) + 2 + cores, thread_name_prefix="preflight-compile")
        self.reference = None
        if experiment.reference_kind == "cu":
            self.reference = self._pool.submit(_compile, experiment.reference_path, experiment.reference_source,
                                               experiment.reference_entry, {}, arch)
        self.kernels = [self._pool.submit(_compile, path, text, name or experiment.signature.name, {}, arch,
                                          experiment) for (path, name), text in zip(sources, texts, strict=True)]
        self.tuning = None
        if tuning is not None:
            self.tuning = self._pool.submit(lambda: _compile(tuning.path, tuning.source, experiment.signature.name,
                                                             tuning.space.first(), arch, experiment))  # its error in turn
        self.ahead = [self._pool.submit(_compile_ahead, tuning.source, experiment.signature.name, defines, arch)
                      for defines in ahead]

    def __enter__(self) -> Compilations:
        return self

    def __exit__(self, kind, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=kind is not None)


def _checks(experiment: Experiment, sources: list[tuple[Path, str | None]], texts: list[str],
            compiled: Compilations, arch: str, launch: LaunchSpec | None, launch_origin: str) -> list[Checked]:
    done = [Checked("experiment", f"{len(experiment.case_specs)} cases, signature {experiment.signature}")]
    for text in texts:
        launches = check_launches(experiment, text, launch, launch_origin, arch)
    if sources:
        done.append(Checked("launches", launches))
    done.append(Checked("memory", memory_estimate(experiment)))
    name = experiment.reference_path.name
    if compiled.reference is not None:
        compiled.reference.result()
        done.append(Checked("reference", f"{name} compiles for {arch}"))
    elif experiment.reference_kind == "torch" and importlib.util.find_spec("torch") is None:
        done.append(Checked("reference", f"{name}: a PyTorch reference, not run: torch is not installed here "
                                         "(syntax, function and parameters checked; it runs on the GPU worker, "
                                         "which needs torch)"))
    else:
        case = smallest_case(experiment)
        call_reference(experiment, case)
        where = " on the CPU" if experiment.reference_kind == "torch" else ""
        kind = "PyTorch" if experiment.reference_kind == "torch" else "NumPy"
        done.append(Checked("reference", f"{name} ({kind}) ran on case {case.name!r}{where}, "
                                         "outputs of the right shapes"))
    done += [Checked("controls", line) for line in cpu_controls(experiment).lines()]
    for (path, name), compilation in zip(sources, compiled.kernels, strict=True):
        info = compilation.result()
        if info.registers is None:
            raise ExperimentError(path, "entry", f"{name or experiment.signature.name} is not in the compiled code: "
                                                 'declare it extern "C" __global__ (C++ names are mangled)')
        done.append(Checked("kernel", f"{path.name} compiles for {arch}: {info.registers} registers, "
                                      f"{info.spill_stores or 0} B spilled; math: {math_text(info)}"))
    if compiled.tuning is not None:
        tuning = experiment.tuning
        info = compiled.tuning.result()
        poisoned = f"; a workspace of {info.workspace_bytes} bytes, poisoned before every launch" \
            if info.workspace_bytes else ""
        done.append(Checked("tune", f"{tuning.path.name}: {tuning.space.count()} configurations; the first compiles"
                                    f"{poisoned}; math: {math_text(info)}"))
    return done


def check_launches(experiment: Experiment, source: str, launch: LaunchSpec | None, origin: str, arch: str) -> str:
    """Every case's launch (or ``launch``, for every case) resolved on the case, the kernel it
    names declared in ``source``, within what a GPU of ``arch`` launches; what was checked."""
    sig = experiment.signature
    limit = shared_limit(arch)
    for i, case in enumerate(experiment.case_specs):
        if launch is not None:
            check_launch(origin, "", launch, case, kernel=(source, sig), max_shared=limit)
        elif case.launch is not None:
            field = f"cases[{i}].launch" if case.name in experiment.own_launches else "launch"  # or the file's
            check_launch(experiment.cases_path, field, case.launch, case, kernel=(source, sig), max_shared=limit)
    what = f"{origin} on every case" if launch is not None else "every case's launch"
    return (f"{what} resolves within a GPU's grid and block limits and {arch}'s {limit // 1024} KiB of shared "
            "memory; the kernels it names are declared")


def memory_estimate(experiment: Experiment) -> str:
    """Each case's device memory at the worker's peak on it (:func:`case_memory`) against the GPU's:
    bad input when a case cannot fit the GPU this machine has; with no GPU to ask, bad input only
    beyond any GPU (:data:`LARGEST_GPU_MEMORY`), and a case over the assumed 80 GiB is said."""
    total, origin = gpu_memory()
    needs = check_memory(experiment, experiment.case_specs, experiment.cases_path, "cases", (total, origin))
    largest, name = max(zip(needs, (c.name for c in experiment.case_specs), strict=True), default=(0, ""))
    line = f"largest case {name!r}: about {memory_text(largest)} of the {memory_text(total)} {origin}"
    if largest > total:
        line += ": more than that, so it needs a GPU with more memory (an H200 has 140 GiB)"
    return line


def check_memory(experiment: Experiment, cases: list[CaseSpec], path: Path, field: str,
                 memory: tuple[int, str] | None = None) -> list[int]:
    """Each case's device memory (:func:`case_memory`); bad input (``field[i]`` of ``path``) for one
    that cannot fit this machine's GPU or, with none to ask, any GPU."""
    total, origin = memory or gpu_memory()
    known = origin == THIS_GPU
    needs = []
    for i, case in enumerate(cases):
        needs.append(need := case_memory(experiment, case))
        if need > (total if known else LARGEST_GPU_MEMORY):
            limit = f"the {memory_text(total)} {origin}" if known else f"any GPU's ({memory_text(LARGEST_GPU_MEMORY)})"
            raise ExperimentError(path, f"{field}[{i}]",
                                  f"case {case.name!r} needs about {memory_text(need)} of device memory, more than {limit}")
    return needs


def case_memory(experiment: Experiment, case) -> int:
    """Bytes of device memory the worker holds for one case at its peak (worker/case_data.py)."""
    inputs, outputs = [], []
    for arg in experiment.signature.args:
        spec = case.inputs.get(arg.name) or case.outputs.get(arg.name)
        if spec is None:
            continue
        count = math.prod(shape_of(spec.shape, case.scalars, arg.name))
        size = DTYPES[arg.dtype].itemsize
        if arg.is_input:
            inputs.append(count * size)
        else:
            outputs.append((count, size))
    proto = experiment.timing
    return case_bytes(inputs, outputs, proto.input_sets, proto.checked_launches, guards=True)


def gpu_memory() -> tuple[int, str]:
    """The first GPU's memory (NVML), or the assumed default where no GPU answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total), THIS_GPU
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no driver, no GPU: the stated assumption
        return DEFAULT_GPU_MEMORY, "assumed (no GPU here: an 80 GiB H100)"


def _compile(path: Path, source: str, entry: str, defines: dict, arch: str, experiment: Experiment | None = None):
    """Compile as the worker does, and (a candidate, held to the ``experiment``'s limits) refuse here
    what the worker would refuse as ``global_state`` or ``precision``."""
    try:
        compiled = compile_kernel(_as_worker_compiles(source, entry, defines), arch, math=experiment is not None)
    except CompileError as exc:
        first = next((line for line in exc.log.splitlines() if "error" in line), exc.log.splitlines()[0])
        where = f" with {defines}" if defines else ""
        raise ExperimentError(path, "compile", f"does not compile for {arch}{where}: {first.strip()}") from None
    if experiment is None:  # the trusted reference
        return compiled.info
    limits = experiment.limits
    compiled.info.workspace_bytes, problem = kept_state(compiled.info, limits)
    if problem:
        raise ExperimentError(path, "limits.global_bytes", f"the kernel {problem}")
    problem = precision_refusal(compiled.info, limits, experiment.signature)
    if problem:
        where = f" (with {defines})" if defines else ""
        raise ExperimentError(path, "limits.precision", f"the kernel{where} {problem}")
    return compiled.info


def _as_worker_compiles(source: str, entry: str, defines: dict) -> KernelSpec:
    """The kernel as a GPU worker compiles it (the device's facts as defines), so that the cubin
    kept on disk is the one the worker asks for."""
    return device_defines(KernelSpec(source=source, entry=entry, defines=dict(defines)), NOMINAL_DEVICE)


def _compile_ahead(source: str, entry: str, defines: dict, arch: str) -> bool:
    """Compile one configuration as the worker will (the cubin is kept on disk); whether it compiled."""
    try:
        compile_kernel(_as_worker_compiles(source, entry, defines), arch, math=False)
    except CompileError:
        return False
    return True


def smallest_case(experiment: Experiment) -> CaseSpec:
    def size(case: CaseSpec) -> int:
        return sum(int(np.prod(shape_of(s.shape, case.scalars, case.name), dtype=np.int64))
                   for s in [*case.inputs.values(), *case.outputs.values()])

    return min(experiment.case_specs, key=size)


class ReferenceCall(WireModel):
    """What the subprocess of :func:`call_reference` is given."""
    reference: ReferenceSpec
    case: CaseSpec
    signature: str
    allow_tf32: bool = False


RETURNED = "cudaopt: the reference returned"  # the subprocess's last line when the call came back


def call_reference(experiment: Experiment, case: CaseSpec, timeout_s: float = REFERENCE_TIMEOUT_S) -> None:
    """Call the NumPy or PyTorch reference on one input set of ``case`` in a subprocess (the user's
    code may hang or crash), and check what it returns."""
    request = ReferenceCall(reference=experiment.reference_spec(), case=case, signature=experiment.signature_text,
                            allow_tf32="tf32" in allowed_math(experiment.limits, experiment.signature))
    where = experiment.reference_path
    try:
        done = run_child([sys.executable, "-m", "cudaopt.preflight"], input=request.to_json(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ExperimentError(where, "reference", f"did not return within {timeout_s:g} s on case "
                                                  f"{case.name!r}") from None
    if done.returncode != 0 or RETURNED not in done.stdout.splitlines():
        lines = [line for line in (done.stdout + done.stderr).strip().splitlines() if line.strip()]
        detail = lines[-1] if lines else f"exit status {done.returncode}"
        if done.returncode == 0:
            detail = f"the process ended (status 0) before the reference returned{': ' + detail if lines else ''}"
        raise ExperimentError(where, "reference", f"on case {case.name!r}: {detail}")


def _run_reference_from_stdin() -> int:
    """The subprocess side of :func:`call_reference`: one line of error on failure, exit 1."""
    request = ReferenceCall.model_validate_json(sys.stdin.read())
    ref, case, signature = request.reference, request.case, parse_signature(request.signature)
    try:
        (inputs,) = generate(case, signature, 1)
        shapes = {a.name: shape_of(case.outputs[a.name].shape, case.scalars, a.name) for a in signature.outputs}
        fn = load_python(ref.source, ref.path, ref.entry)
        if ref.kind == "torch":
            torch = import_torch()
            tensors = {n: cpu_tensor(torch, t) for n, t in inputs.items()}
            call_torch(torch, fn, signature, tensors, case.scalars, shapes, request.allow_tf32)
        else:
            call_python(fn, signature, {n: t.as_numbers() for n, t in inputs.items()}, case.scalars, shapes)
    except (ReferenceFailure, InputError) as exc:
        print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return 1
    except SystemExit as exc:  # the user's module or function called sys.exit()
        print(f"the reference called sys.exit({exc.code!r})")
        return 1
    print(RETURNED)
    return 0


if __name__ == "__main__":
    from .compilekit import lifeline

    lifeline.hold()
    sys.exit(_run_reference_from_stdin())
