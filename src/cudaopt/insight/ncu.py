"""Profiling one checked launch of a kernel with Nsight Compute, in a process of its own.

The worker (``python -m cudaopt.worker.main``) runs under ``ncu`` with a request for one case,
no timing, no gate and no L2 flush: the gate kernel spins on a host flag, which would deadlock
under ncu's serialised, replayed launches, and timings taken under a profiler mean nothing. The
check stays on, so the profiled launch is one whose output was compared with the reference.
ncu writes its CSV to a log file, the worker its JSON lines to stdout, so neither corrupts the
other. A profile's figures are evidence for the model; they are never used as latencies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..compilekit import lifeline
from ..worker.inputs import shape_of
from ..wire.messages import Done, Fatal, read_message
from ..wire.protocol import CaseSpec, EvalRequest, TimingProtocol
from ..wire.results import EvalResult
from ..wire.signature import entry_names
from .parse import KernelMetrics, parse_raw_csv

# What every profile collects (Hopper sm_90 names). Change the list here and nowhere else.
METRICS = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__waves_per_multiprocessor",
    "l1tex__t_sector_hit_rate.pct",
    "lts__t_sector_hit_rate.pct",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio",
)
TIMEOUT_S = 300.0
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
PERMISSION_FIX = (
    "ncu may not read the GPU performance counters here (ERR_NVGPUCTRPERM): run as root, or load the driver "
    "with 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' (see https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
)


class NsightUnavailable(RuntimeError):
    """ncu cannot profile on this machine at all; say so once and go on without it."""


class ProfileError(RuntimeError):
    """This one profile failed (the kernel failed its check, a timeout, no launch profiled)."""


@dataclass
class Profile:
    case: str
    metrics: KernelMetrics
    raw_csv: str
    command: list[str]
    seconds: float


def profile_request(request: EvalRequest, case: str | None = None) -> EvalRequest:
    """The request ncu runs: one case (``case``, or the largest performance case), checked, never timed."""
    if case is None:
        chosen = largest_case([c for c in request.cases if c.role == "performance"] or request.cases)
    else:
        chosen = next((c for c in request.cases if c.name == case), None)
        if chosen is None:
            raise ProfileError(f"no case named {case!r}; cases: {', '.join(c.name for c in request.cases)}")
    return request.model_copy(update=dict(
        cases=[chosen], time_roles=[], check=True,
        protocol=TimingProtocol(warmup=0, iterations=1, flush_l2=False, input_sets=1, gate=False, checked_launches=1),
    ))


def largest_case(cases: list[CaseSpec]) -> CaseSpec:
    """The case with the most elements across its inputs and outputs (shapes from its scalars)."""

    def size(case: CaseSpec) -> int:
        names = case.scalars
        total = 0
        for name, spec in {**case.inputs, **case.outputs}.items():
            elements = 1
            for dim in shape_of(spec.shape, names, f"case {case.name!r} {name!r}"):
                elements *= dim
            total += elements
        return total

    return max(cases, key=size)


def command(ncu: str, request: EvalRequest, log_file: Path, python: str = sys.executable) -> list[str]:
    """The ncu command line for a one-case profile request (see :func:`profile_request`).

    A ``.cu`` reference with the entry's own name launches first, once per input set; ``--launch-skip``
    passes over those launches, so the profiled launch is the candidate's checked one.
    """
    # the case may launch another kernel of the module than the entry (LaunchSpec.entry): any of them
    names = sorted({request.kernel.entry, *entry_names(request.kernel.source)})
    ref = request.reference
    skip = request.protocol.input_sets if ref is not None and ref.kind == "cu" and ref.entry in names else 0
    return [
        ncu, "--target-processes", "all", "--clock-control", "none",
        "--kernel-name", f"regex:^({'|'.join(names)})$", "--launch-skip", str(skip), "--launch-count", "1",
        "--csv", "--page", "raw", "--print-units", "base", "--log-file", str(log_file),
        "--metrics", ",".join(METRICS),
        python, "-m", "cudaopt.worker.main",
    ]


def profile(request: EvalRequest, ncu: str, *, device: int = 0, timeout_s: float = TIMEOUT_S) -> Profile:
    """Run a one-case profile request (see :func:`profile_request`) under ncu and read its metrics."""
    (case,) = request.cases
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(device), PYTHONUNBUFFERED="1", CUDAOPT_MEASURE_PEAKS="0")
    env.pop("CUDA_DEVICE_ORDER", None)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cudaopt-ncu-") as tmp:
        log_file = Path(tmp) / "ncu.csv"
        cmd = command(ncu, request, log_file)
        line = lifeline.spawn(env, group=True, direct=False)  # the profiled worker's parent is ncu
        proc = lifeline.track(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, env=line.env, pass_fds=line.pass_fds,
                                               start_new_session=True, text=True), group=True)
        try:
            out, err = proc.communicate(request.to_json() + "\n", timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # ncu and the worker it started
            proc.communicate()
            raise ProfileError(f"ncu ran past its {timeout_s:g} s timeout and was killed") from None
        finally:
            lifeline.forget(proc)
        log = log_file.read_text(errors="replace") if log_file.is_file() else ""
    if PERMISSION_ERROR in log or PERMISSION_ERROR in err or PERMISSION_ERROR in out:
        raise NsightUnavailable(PERMISSION_FIX)
    result = _worker_result(out)
    if result is None:
        raise ProfileError(f"the worker gave no result under ncu (exit {proc.returncode}): {_messages(log, err)}")
    if not result.ok:
        raise ProfileError(f"the kernel did not pass its check under ncu: {result.status}: {result.reason}")
    kernels = parse_raw_csv(log)
    if not kernels:
        raise ProfileError(f"ncu profiled no launch of {request.kernel.entry}: {_messages(log, err)}")
    return Profile(case=case.name, metrics=kernels[0], raw_csv=log, command=cmd,
                   seconds=round(time.monotonic() - start, 3))


def _worker_result(stdout: str) -> EvalResult | None:
    for line in stdout.splitlines():
        try:
            message = read_message(line)
        except ValueError:  # ncu's own output, or a message that is not the result
            continue
        if isinstance(message, Done):
            return message.result
        if isinstance(message, Fatal):
            raise ProfileError(f"the worker could not start under ncu: {message.message}")
    return None


def _messages(log: str, err: str) -> str:
    """ncu's errors and warnings (or the end of stderr), for a failure message."""
    lines = [line for line in log.splitlines() if line.startswith(("==ERROR==", "==WARNING=="))]
    tail = " | ".join(lines[-5:]) or " | ".join(err.strip().splitlines()[-5:])
    return tail or "no message"
