"""``cudaopt verify --sanitize``: the winner under NVIDIA's compute-sanitizer.

Each tool (memcheck, racecheck, initcheck, synccheck) wraps a worker of its own that checks the
winner on the correctness and holdout cases, once each, without guard bands (so the tool sees the
true end of every allocation and an out-of-bounds read is an error, not a read of a guard). The
tool's report goes to a log file; its error summary decides. Any error fails verification.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

from ..errors import ExperimentError
from ..pool.supervisor import WORKER_COMMAND, Supervisor
from ..wire.protocol import EvalRequest, Timeouts
from ..record.files import SanitizeReport

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# memcheck, initcheck, synccheck: "ERROR SUMMARY: N errors"; racecheck: "N hazards displayed (E errors, W warnings)"
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error|hazards displayed \((\d+) error")
_REPORT_LINES = 60


TOOLKIT_BINS = ("/usr/local/cuda/bin", "/opt/cuda/bin")


def error_count(report: str) -> int | None:
    """The error count of a tool's report (its last summary line); None when it has none."""
    counts = [int(a or b) for a, b in _SUMMARY.findall(report)]
    return counts[-1] if counts else None


def find_sanitizer(toolkit_bins: tuple[str, ...] = TOOLKIT_BINS) -> str:
    """The compute-sanitizer executable: on PATH, or in the CUDA toolkit."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in toolkit_bins:
        candidate = Path(root) / "compute-sanitizer"
        if candidate.is_file():
            return str(candidate)
    raise ExperimentError("--sanitize", "", "compute-sanitizer not found: install the CUDA toolkit (it ships "
                                             "compute-sanitizer) or put it on PATH")


def sanitize(request: EvalRequest, device: int, log_dir: Path, tools: tuple[str, ...] = TOOLS,
             on_tool: Callable[[str], None] = lambda tool: None) -> list[SanitizeReport]:
    """Run ``request`` (checks only) under each tool; one report per tool."""
    executable = find_sanitizer()
    request = request.model_copy(update=dict(
        sanitize=True, time_roles=[], vendors=[], protocol=request.protocol.model_copy(update={"input_sets": 1}),
        timeouts=Timeouts(compile_s=300, check_s=1200, timing_s=60),
    ))
    records = []
    for tool in tools:
        on_tool(tool)
        log_file = log_dir / f"sanitize-{tool}.log"
        log_file.unlink(missing_ok=True)
        # API errors are the harness's business (cuda-core probes parameter counts until one fails)
        command = [executable, "--tool", tool, "--log-file", str(log_file), "--print-limit", "20",
                   "--report-api-errors", "no", "--target-processes", "application-only",  # not the compiler process
                   *(["--racecheck-report", "all"] if tool == "racecheck" else []), *WORKER_COMMAND]
        # peaks measured under a tool would be wrong: the worker only reads the cache
        with Supervisor(devices=[device], log_dir=log_dir, command=command,
                        env={"CUDAOPT_MEASURE_PEAKS": "0"}) as supervisor:
            result = supervisor.evaluate(request)
        report = log_file.read_text(errors="replace") if log_file.is_file() else ""
        errors = error_count(report)
        passed = errors == 0 and result.status == "ok"
        records.append(SanitizeReport(tool=tool, passed=passed, errors=errors, status=result.status,
                                      reason=result.reason, report="\n".join(report.splitlines()[:_REPORT_LINES]),
                                      log=str(log_file)))
    return records
