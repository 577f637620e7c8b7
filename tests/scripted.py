"""A scripted evaluator (no GPU) and answer builders for agent tests.

A kernel's source says what its evaluation returns: ``// RESULT: ok 0.5`` passes every case with
medians 0.5x the base figures, ``// RESULT: compile_error``, ``// RESULT: mismatch``,
``// RESULT: precision`` (TF32 tensor cores, refused before any launch), ``// RESULT: slow 20``
(sleeps 20 s, for kill tests). A request with vendors gets each timed at
``VENDOR`` x the base figures (the second at twice that, and so on) on every performance case; a
vendor with "mismatch" in its label mismatches on square-4096, one with "broken" errors
everywhere. A request without a kernel times the vendors alone. A timed case reports the timed
and checked launches its protocol asks for.
"""

from __future__ import annotations

import json
import re
import threading
import time

from cudaopt.pool.dispatch import Dispatcher, GpuRef, dispatch
from cudaopt.wire.messages import PhaseStarted
from cudaopt.wire.results import (
    CaseResult,
    CheckInfo,
    CompileInfo,
    DeviceInfo,
    EvalResult,
    LaunchScan,
    Roofline,
    TimingStats,
    VendorResult,
)

SIGNATURE = 'extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)'
BASE_US = {"square-256": 20.0, "rect-384x256x320": 25.0, "square-4096": 17000.0}
LAUNCH = {"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16], "shared_bytes": 0}
VENDOR = 0.6


def kernel(result: str, body: str = "") -> str:
    return f"// RESULT: {result}\n{SIGNATURE} {{ {body} }}\n"


def answer(result: str, rationale: str = "an idea", launch: dict | None = None) -> str:
    return (f"Here is my proposal.\n```cuda\n{kernel(result)}```\n"
            f"```json\n{json.dumps({'launch': launch or LAUNCH, 'rationale': rationale})}\n```\n")


class ScriptedEvaluator:
    """One scripted GPU: an evaluator of its own (batches go through the real dispatcher, with it as
    the only lane) and a lane for :class:`ScriptedPool`."""

    backend = "scripted"

    def __init__(self, index: int = 0):
        self.index = index
        self.requests = []
        self.prefetched: list[list] = []
        self.notices: list[str] = []

    @property
    def attempts(self) -> list:
        """The requests of a run's attempts (not its finalists' rounds nor its crowning audit)."""
        return [r for r in self.requests if r.id.startswith("attempt-")]

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(name="Scripted GPU", arch="sm_90", sm_count=132, pci_bus_id=f"scripted:{self.index}")

    @property
    def info(self) -> DeviceInfo:
        return self.device_info()

    @property
    def ref(self) -> GpuRef:
        return GpuRef.of(self.device_info(), self.index)

    def gpus(self) -> list[GpuRef]:
        return [self.ref]

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def prefetch(self, kernels) -> None:
        self.prefetched.append([k.defines for k in kernels])

    def compile_ahead(self, kernels) -> None:
        self.prefetch(kernels)

    def evaluate_all(self, requests, **options):
        return dispatch([self], requests, **options)

    def evaluate(self, request, on_event=None) -> EvalResult:
        result = self._evaluate(request, on_event)
        result.device = self.device_info()
        return result

    def _evaluate(self, request, on_event=None) -> EvalResult:
        self.requests.append(request)
        if on_event:
            on_event(PhaseStarted(phase="compile"))
        if request.kernel is None:
            return self._vendors_only(request)
        match = re.search(r"// RESULT: (\w+)(?: ([\d.]+))?", request.kernel.source)
        what, arg = (match.group(1), match.group(2)) if match else ("ok", "1.0")
        defines = request.kernel.defines
        if defines:  # tuning: the bigger the tiles the faster, FAIL=1 does not compile
            if defines.get("FAIL"):
                what = "compile_error"
            arg = str(float(arg or 1.0) * 16 / (16 + sum(v for v in defines.values() if isinstance(v, int))))
        if what == "interrupt":
            raise KeyboardInterrupt
        if what == "slow":
            time.sleep(float(arg))
            what, arg = "ok", "1.0"
        if what == "compile_error":
            return EvalResult(status="compile_error", reason="default_program(3): error: identifier \"x\" is undefined")
        if what == "precision":
            return EvalResult(status="precision", compile=CompileInfo(ok=True, log=""), reason=(
                "the kernel uses math outside the precision policy: HMMA.1688.F32.TF32 in matmul_f32 (tf32). "
                'limits.precision allows [] (the default for a signature of float32 pointers); "tf32" would allow it'))
        compile_info = CompileInfo(ok=True, log="", registers=40, spill_stores=0, spill_loads=0)
        cases = []
        for case in request.cases:
            if what == "mismatch" and case.role == "correctness":
                check = CheckInfo(output="c", input_set=0, phase="check", ok=False, elements=1147, mismatches=37,
                                  first_bad_index=[30, 0], expected=1.5, actual=0.0, max_abs_error=2.0)
                cases.append(CaseResult(name=case.name, role=case.role, status="mismatch", reason="c: 37/1147 wrong",
                                        checks=[check]))
                continue
            timing, roofline = None, None
            if case.role in request.time_roles:
                median = base_us(case) * float(arg or 1.0)
                timing = stats(median, "scripted")
                m, n, k = (case.scalars[x] for x in "mnk")
                flops, nbytes = 2.0 * m * n * k, 4.0 * (m * k + k * n + m * n)
                roofline = Roofline(flops=flops, bytes=nbytes, achieved_tflops=round(flops / median / 1e6, 3),
                                    peak_tflops=535.3, peak_gbps=4814.3,  # spec roofs: nothing measured here
                                    compute_pct=round(flops / median / 1e6 / 535.3 * 100, 1),
                                    memory_pct=round(nbytes / median / 1e3 / 4814.3 * 100, 1),
                                    floor_us=max(flops / 535.3e12, nbytes / 4814.3e9) * 1e6)
            phases = {"setup_s": 0.1, "reference_s": 0.2, "check_s": 0.1}  # scripted: the base figures' scale
            scan = None
            if timing:
                phases.update(timing_s=base_us(case) * float(arg or 1.0) * 1e-4, timed_checks_s=0.01)
                timing.n = request.protocol.iterations
                scan = LaunchScan(checked_launches=list(range(request.protocol.checked_launches)))
            cases.append(CaseResult(name=case.name, role=case.role, status="ok", timing=timing, roofline=roofline,
                                    phases=phases, vendors=_vendors(request.vendors, case) if timing else [],
                                    scan=scan))
        status = next((c.status for c in cases if c.status != "ok"), "ok")
        return EvalResult(status=status, reason="" if status == "ok" else "case odd: mismatch",
                          compile=compile_info, cases=cases, wall_s=0.01)

    def _vendors_only(self, request) -> EvalResult:
        cases = [CaseResult(name=case.name, role=case.role, status="ok", phases={"setup_s": 0.1, "reference_s": 0.2},
                            vendors=_vendors(request.vendors, case) if case.role in request.time_roles else [])
                 for case in request.cases]
        return EvalResult(status="ok", cases=cases, wall_s=0.01)


def _vendors(specs, case) -> list[VendorResult]:
    return [_vendor(spec, case, VENDOR * (i + 1)) for i, spec in enumerate(specs)]


def _vendor(spec, case, ratio: float) -> VendorResult:
    if "broken" in spec.label:
        return VendorResult(label=spec.label, status="error", reason=f"{spec.label}: RuntimeError: no compiler")
    if "mismatch" in spec.label and case.name == "square-4096":
        check = CheckInfo(output="c", input_set=0, phase="check", ok=False, elements=16777216, mismatches=9,
                          max_abs_error=0.01, first_bad_index=[7, 7], expected=1.0, actual=1.01)
        return VendorResult(label=spec.label, status="mismatch", reason="c (input set 0, check): 9/16777216 wrong",
                            checks=[check])
    timing = stats(base_us(case) * ratio, "scripted, chunks interleaved with the candidate")
    return VendorResult(label=spec.label, status="ok", timing=timing)


def base_us(case) -> float:
    """The scripted baseline's median on a case: the table above, else 10 TFLOP/s of 2*m*n*k."""
    if case.name in BASE_US:
        return BASE_US[case.name]
    m, n, k = (case.scalars[x] for x in "mnk")
    return 2.0 * m * n * k / 10e6


def stats(median: float, method: str = "scripted") -> TimingStats:
    """Timing statistics around ``median`` (a 10% band)."""
    return TimingStats(median_us=median, mean_us=median, stdev_us=0.1, min_us=median * 0.9, max_us=median * 1.1,
                       p10_us=median * 0.95, p90_us=median * 1.05, n=100, method=method)


class ScriptedPool(Dispatcher):
    """Several scripted GPUs of one model behind the real dispatcher. ``delays`` (seconds per
    request) make some finish later; ``speeds`` scale the times a GPU reports (0.5: it reports
    every kernel twice as fast), as GPUs of one model that differ a little would. ``lockstep``: the
    lanes start each tuned attempt together, so none finishes its share early and takes another's."""

    def __init__(self, count: int = 2, delays: dict[int, float] | None = None, speeds: dict[int, float] | None = None,
                 lockstep: bool = False):
        together = threading.Barrier(count, timeout=30) if lockstep else None
        super().__init__([_Lane(i, (delays or {}).get(i, 0.0), (speeds or {}).get(i, 1.0), together)
                          for i in range(count)])

    @property
    def requests(self) -> list:
        return [r for lane in self.lanes for r in lane.requests]


class _Lane(ScriptedEvaluator):
    def __init__(self, index: int, delay: float, speed: float, together: threading.Barrier | None = None):
        super().__init__(index)
        self.delay, self.speed, self.together = delay, speed, together

    def evaluate(self, request, on_event=None) -> EvalResult:
        tuned = request.id.startswith("attempt-") and request.kernel is not None and bool(request.kernel.defines)
        if self.together is not None and tuned:
            self.together.wait()
        time.sleep(self.delay)
        result = super().evaluate(request, on_event)
        for case in result.cases:
            if case.timing:
                case.timing = stats(case.timing.median_us * self.speed, case.timing.method)
        return result


def trial_of(args, path, source: str):
    """A Trial of ``source`` as if read from ``path`` (nothing read, no preflight: what is under test
    is what measures it)."""
    from cudaopt.trial import Trial

    experiment = args.load()
    return Trial(experiment=experiment, kernel=path, source=source, protocol=experiment.protocol(), args=args)
