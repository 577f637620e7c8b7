"""Evaluate one request on this process's GPU: compile, check every case, time, judge.

Runs inside a worker process. The steps live in modules of their own — launching and CUDA
errors (launcher.py), launch expressions and tunables (wire/launch.py), case data (case_data.py),
the answer key (answers.py), the references (reference.py, torch_reference.py), the timed run
(timing.py), the vendors (vendor.py) — and this module puts them in order. After a CUDA error that may have lost the
context the runner is ``dead``: the worker reports and exits, and the supervisor starts a fresh one.

Long because the order of an evaluation's steps is the trust argument: each step is a call to a
module of its own, and what is left here is the sequence, read top to bottom.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..wire.launch import LaunchError, candidate_names, device_defines, resolve_launch, tunable_clashes
from ..wire.messages import CaseDone, Compiled, PhaseStarted
from ..wire.protocol import CaseSpec, EvalRequest, KernelSpec, VendorSpec
from ..wire.results import CaseResult, CompileInfo, Controls, EvalResult, LaunchScan, VendorResult
from ..wire.signature import DTYPES, Signature, parse_signature
from ..wire.stats import summarize
from .answers import HOST_DETAILS_BYTES, DeviceAnswer, LockedAnswer, answer_controls, check_output, close_answers
from .buffers import CaseBuffers
from .case_data import DeviceCases, HostSets, Room, cache_key, case_bytes, check_order, make_room
from .compare import describe
from ..compilekit.compiler import CompileError, compile_kernel, ready
from .controls import judge
from .device import Device
from .entries import Entries
from .inputs import InputError
from .launcher import CaseFailure, Launcher, is_cuda_error, occupancy
from .lru import CompileCache, Lru
from .peaks import judge_plausibility
from .reference import CudaReference, ReferenceFailure, call_python, load_python
from .timing import Stopwatch, TimedRun, method, new_seed
from .torch_reference import TorchReference
from .vendor import BoundVendor, Vendor, VendorError


class Runner:
    def __init__(self, gpu: Device, on_event: Callable[[object], None] = lambda event: None):
        self.gpu = gpu
        self.on_event = on_event
        self.launcher = Launcher(gpu)
        self.leftovers = gpu.leftovers()  # shared memory and registers poisoned before each candidate launch
        self.cuda_reference = CudaReference(self.launcher)
        self.torch_reference = TorchReference(gpu)
        self._host_sets = HostSets()
        # of the host input sets: locked on the device, 30% of its memory (DeviceCases keeps 45%)
        self._answers = Lru(limit=int(gpu.memory_info()[1] * 0.3), on_evict=close_answers)
        self._controls = Lru(limit=4096)  # the negative controls of each answer key (one unit each)
        self._devices = DeviceCases(gpu)
        self._prefetched: dict[str, Future] = {}
        self._compiled = CompileCache()
        self._compilers: ThreadPoolExecutor | None = None
        self._vendors: dict[str, Vendor] = {}
        self.facts = gpu.facts()  # what launch expressions and kernels may know of this GPU
        self.host_details_bytes = HOST_DETAILS_BYTES  # outputs up to this size: a failure's details from the host

    @property
    def dead(self) -> bool:
        return self.launcher.dead

    # --- the request ---------------------------------------------------------------------

    def prefetch(self, specs: list[KernelSpec]) -> None:
        """Start compiling kernels that later requests will name, on all CPU cores.

        A sweep knows its configurations up front; compiling them in parallel while earlier
        ones are measured takes compilation off the critical path. Nothing is launched here.
        """
        if self._compilers is None:
            ready()
            self._compilers = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 2))
        for spec in (device_defines(s, self.facts) for s in specs):
            key = _compile_key(spec, self.gpu.arch)
            if key not in self._prefetched and key not in self._compiled:
                self._prefetched[key] = self._compilers.submit(compile_kernel, spec, self.gpu.arch)

    def evaluate(self, req: EvalRequest) -> EvalResult:
        start = time.perf_counter()
        seed = req.protocol.seed if req.protocol.seed is not None else new_seed()
        result = EvalResult(status="ok", request_id=req.id, device=self.gpu.info(), seed=seed)
        try:
            self._evaluate(req, result, seed)
        except CaseFailure as failure:
            result.status, result.reason = failure.status, failure.reason
        except Exception as exc:
            if not is_cuda_error(exc):
                raise
            failure = self.launcher.failure(exc, "internal_error")
            result.status, result.reason = failure.status, f"CUDA error: {failure.reason}"
        result.wall_s = round(time.perf_counter() - start, 4)
        return result

    def _evaluate(self, req: EvalRequest, result: EvalResult, seed: int) -> None:
        signature = parse_signature(req.signature)
        entries = self._prepare(req, signature, result) if req.kernel else None
        try:
            for case in req.cases:
                if self.dead:
                    result.cases.append(CaseResult(name=case.name, role=case.role, status="crashed",
                                                   reason="not run: the GPU context was lost"))
                    continue
                result.cases.append(self._case(req, signature, entries, case, seed))
                self.on_event(CaseDone(case=result.cases[-1]))
        finally:
            if entries is not None and not self.dead:
                entries.close()
        failed = next((c for c in result.cases if c.status != "ok"), None)
        if failed:
            result.status = failed.status
            result.reason = f"case {failed.name}: {failed.reason}"

    def _prepare(self, req: EvalRequest, signature: Signature, result: EvalResult):
        """The candidate compiled and its entry, arguments and device-global state checked."""
        clashes = tunable_clashes(req.kernel.defines, signature, {n for c in req.cases for n in c.scalars})
        if clashes:
            raise CaseFailure("bad_launch_config", "tunables: " + "; ".join(clashes))
        self.on_event(PhaseStarted(phase="compile"))
        entries, info = self._compile(req.kernel, signature)
        result.compile = info
        self.on_event(Compiled(compile=info))
        entries.check_precision(req.limits, trusted=not req.check)
        entries.check_kept_state(req.limits, self.gpu)
        return entries

    def _compile(self, spec: KernelSpec, signature: Signature):
        spec = device_defines(spec, self.facts)
        key = _compile_key(spec, self.gpu.arch)
        compiled = self._compiled.get(key)
        if compiled is None:
            try:
                pending = self._prefetched.pop(key, None)
                compiled = pending.result() if pending else compile_kernel(spec, self.gpu.arch)
            except CompileError as exc:
                raise CaseFailure("compile_error", exc.log) from None
            self._compiled.put(key, compiled)
        # a copy: the kernels other than the entry that this request's cases launch are its own
        info: CompileInfo = compiled.info.model_copy(update={"entries": {}})
        module = self.gpu.load_module(compiled.cubin)
        return Entries(module, spec.source, spec.entry, signature, info, bytes(compiled.cubin.code)), info

    # --- one case ------------------------------------------------------------------------

    def _case(self, req: EvalRequest, signature: Signature, entries: Entries | None, case: CaseSpec,
              seed: int) -> CaseResult:
        out = CaseResult(name=case.name, role=case.role, status="ok")
        buffers, room = None, None
        self.on_event(PhaseStarted(phase="check", case=case.name))
        try:
            kernel, launch = self._launch(req, entries, case, out) if entries is not None else (None, None)
            clock = Stopwatch(out.phases)
            n_sets = max(1, req.protocol.input_sets)
            sets, shapes, data_key = self._host_sets.get(case, signature, n_sets)
            room = self._make_room(req, signature, sets, shapes, not req.sanitize,
                                   self._devices.key_for(data_key, not req.sanitize))
            buffers = self._devices.take(data_key, signature, sets, shapes, case, guards=not req.sanitize)
            clock.lap("setup_s")
            answers = self._set_answers(req, signature, case, buffers) if req.check else None
            clock.lap("reference_s")
            if answers is not None:
                self._judge_controls(out, req, signature, case, buffers, answers)
                clock.lap("controls_s")
            args = buffers.kernel_args(case.scalars)
            if req.check and kernel is not None:
                measure = None if req.sanitize else out.phases["reference_s"]  # a sanitizer slows the kernel alone
                for s in check_order(n_sets):
                    self.leftovers.poison()
                    entries.reset_state(self.gpu)
                    buffers.stage(s)
                    self.gpu.stream.sync()  # the launch phase holds the kernel alone: the harness's work is checking
                    self.on_event(PhaseStarted(phase="launch", case=case.name, reference_s=measure))
                    self.launcher.launch(kernel, launch, args)
                    self.launcher.sync()
                    self.on_event(PhaseStarted(phase="check", case=case.name))
                    self._verify(out, buffers, signature, case, answers[s], s, "check")
                    entries.refuse_altered_state("")
            clock.lap("check_s")
            if case.role in req.time_roles:
                self.on_event(PhaseStarted(phase="timing", case=case.name))
                vendors = [self._vendor(out, spec, signature, case, buffers, answers)
                           for spec in req.vendors] if req.check else []
                self._time(out, req, signature, entries, kernel, launch, args, buffers, case, vendors, seed, clock)
                if kernel is not None:
                    judge_plausibility(out, case, signature, req.limits, req.protocol.flush_l2, self.gpu.peaks,
                                       self.gpu.measured)
        except CaseFailure as failure:
            out.status, out.reason = failure.status, failure.reason
        except (InputError, ReferenceFailure) as exc:
            out.status = "reference_error" if isinstance(exc, ReferenceFailure) else "internal_error"
            out.reason = str(exc)
        except Exception as exc:
            if not is_cuda_error(exc):
                raise
            failure = self.launcher.failure(exc, "internal_error")
            reason = room.explain(failure.reason) if room else failure.reason
            out.status, out.reason = failure.status, f"CUDA error: {reason}"
        finally:
            if buffers is not None and not self.dead:
                self._devices.give_back(buffers, keep=out.status == "ok")
        return out

    def _launch(self, req: EvalRequest, entries: Entries, case: CaseSpec, out: CaseResult):
        """The kernel this case launches and how."""
        spec = req.launch or case.launch
        if spec is None:
            raise CaseFailure("bad_launch_config", "no launch configuration for this case")
        try:
            launch = resolve_launch(spec, candidate_names(case.scalars, req.kernel.defines, self.facts))
        except LaunchError as exc:
            raise CaseFailure("bad_launch_config", f"{exc.field}: {exc}") from None
        out.launch = launch
        kernel = entries.get(launch.entry)
        self.leftovers.cover_local(entries.local_bytes())
        out.occupancy = occupancy(kernel, launch, int(self.gpu.props.max_threads_per_multiprocessor))
        return kernel, launch

    # --- the answer key ------------------------------------------------------------------

    def _set_answers(self, req: EvalRequest, signature: Signature, case: CaseSpec,
                     buffers: CaseBuffers) -> list[dict[str, LockedAnswer]]:
        """Reference outputs of the host input sets, computed once per case and kept on the device,
        locked: no kernel can read them outside a comparison (answers.py)."""
        ref = req.reference
        if ref is None:
            raise ReferenceFailure("the request has no reference")
        key = self._answer_key(req, buffers.key)
        cached = self._answers.get(key)
        if cached is not None:
            return cached
        answers: list[dict[str, LockedAnswer]] = []
        try:
            for s, host_set in enumerate(buffers.sets):
                if ref.kind == "py":
                    values = self._python_answer(req, signature, case, buffers, host_set)
                    answers.append({name: LockedAnswer(self.gpu, v) for name, v in values.items()})
                    continue
                if ref.kind == "torch":  # on copies of the pristine set, never the working buffers
                    device = self.torch_reference.run(req, signature, case.scalars, buffers, s)
                else:
                    buffers.stage(s)
                    device = self.cuda_reference.run(ref, signature, case, buffers)
                try:
                    if ref.kind == "cu" and buffers.modified_inputs(s):
                        raise ReferenceFailure("the reference kernel changed its inputs")
                    answers.append({name: LockedAnswer(self.gpu, v) for name, v in device.items()})
                finally:
                    for value in device.values():
                        value.scrub()
        except BaseException:
            close_answers(answers)
            raise
        self._answers.put(key, answers, sum(a.nbytes for o in answers for a in o.values()))
        return answers

    def _answer_key(self, req: EvalRequest, buffers_key: str) -> str:
        ref = req.reference
        tf32 = ref.kind == "torch" and [req.limits.allow_tf32, req.limits.precision]  # what its TF32 switch follows
        return cache_key(ref.source, ref.entry, ref.kind, ref.launch.to_data() if ref.launch else None, tf32,
                         buffers_key, self.gpu.arch)

    def _make_room(self, req: EvalRequest, signature: Signature, sets, shapes, guards: bool, buffers_key: str) -> Room:
        """What the case still needs (case_bytes) freed of other cases' kept buffers and answers."""
        answer_key = self._answer_key(req, buffers_key) if req.check and req.reference else None
        answered = answer_key is None or self._answers.get(answer_key) is not None  # None: no answers to make
        outputs = [(math.prod(shapes[a.name]), DTYPES[a.dtype].itemsize) for a in signature.outputs]
        need = case_bytes([t.data.nbytes for t in sets[0].values()], outputs, len(sets),
                          req.protocol.checked_launches, guards=guards, kept=buffers_key in self._devices.kept,
                          answered=answered)
        caches = [(self._devices.release_oldest, buffers_key), (self._answers.evict_oldest, answer_key)]
        return make_room(self.gpu, need, caches)

    def _judge_controls(self, out: CaseResult, req: EvalRequest, signature: Signature, case: CaseSpec,
                        buffers: CaseBuffers, answers: list[dict[str, LockedAnswer]]) -> None:
        """Negative controls (controls.py) once per case and reference: refused unless ``trivial_ok`` says why."""
        key = self._answer_key(req, buffers.key)
        if self._controls.get(key) is None:
            self._controls.put(key, answer_controls(case, signature, buffers.sets, answers), 1)
        out.controls = Controls.model_validate(self._controls.get(key).to_data())
        if refusal := judge(case, out.controls):
            raise CaseFailure("non_discriminating", refusal)

    def _python_answer(self, req: EvalRequest, signature, case, buffers, host_set) -> dict[str, np.ndarray]:
        fn = load_python(req.reference.source, req.reference.path, req.reference.entry)
        inputs = {n: t.as_numbers() for n, t in host_set.items()}
        return call_python(fn, signature, inputs, case.scalars, buffers.output_shapes)

    def _fresh_answer(self, req: EvalRequest, signature, case, buffers: CaseBuffers) -> dict:
        """The reference on the fresh inputs staged in the working buffers now (the candidate is done)."""
        if req.reference.kind == "py":
            return self._python_answer(req, signature, case, buffers, buffers.download_inputs())
        if req.reference.kind == "torch":
            return self.torch_reference.run(req, signature, case.scalars, buffers)
        return self.cuda_reference.run(req.reference, signature, case, buffers)

    def _verify(self, out: CaseResult, buffers: CaseBuffers, signature, case, answer: dict, s: int, phase: str) -> None:
        violations = buffers.guard_violations()
        if violations:
            raise CaseFailure("guard_violation", "; ".join(violations))
        changed = buffers.modified_inputs(s)
        if changed:
            raise CaseFailure("input_modified", "; ".join(changed))
        self._check_outputs(out.checks, buffers, signature, case, answer, s, phase)

    def _check_outputs(self, into: list, buffers: CaseBuffers, signature, case, answer: dict, s: int, phase: str,
                       slot: int | None = None, launch: int | None = None) -> None:
        for arg in signature.outputs:
            info = check_output(self.gpu, arg.name, arg.dtype, buffers.output_ptr(arg.name, slot),
                                buffers.outputs[arg.name].nbytes, buffers.output_shapes[arg.name],
                                case.outputs[arg.name], answer[arg.name], s, phase, launch, self.host_details_bytes)
            into.append(info)
            if not info.ok:
                raise CaseFailure("mismatch", describe(info))

    # --- the vendor baseline -------------------------------------------------------------

    def _vendor(self, out: CaseResult, spec: VendorSpec, signature: Signature, case: CaseSpec,
                buffers: CaseBuffers, answers) -> BoundVendor | None:
        """One vendor over this case's buffers, checked once against the reference (input set 0).

        Its result is appended to ``out.vendors``; None when it cannot be timed (the result says
        why). Never fails the candidate, unless the vendor destroys the GPU context, which ends the
        case for everyone.
        """
        result = VendorResult(label=spec.label or spec.entry, status="ok")
        out.vendors.append(result)
        try:
            key = cache_key(spec.to_data())
            if key not in self._vendors:
                self._vendors[key] = Vendor(spec, int(self.gpu.stream.handle))
            vendor = self._vendors[key]
            bound = vendor.bind(signature, buffers.ranges(), case.scalars)
        except VendorError as exc:
            result.status, result.reason = "error", str(exc)
            return None
        buffers.stage(0)
        bound()
        bound.deliver()
        try:
            self.launcher.sync()
        except CaseFailure as failure:
            if self.dead:
                raise CaseFailure("crashed", f"the vendor baseline {result.label} crashed the GPU context: "
                                             f"{failure.reason}") from None
            bound.error = bound.error or failure.reason
        vendor.release()  # what it computed on input set 0 stays out of the candidates' reach
        if bound.error:
            result.status, result.reason = "error", bound.error
            return None
        try:
            self._check_outputs(result.checks, buffers, signature, case, answers[0], 0, "check")
        except CaseFailure as failure:
            result.status, result.reason = "mismatch", failure.reason
            return None
        return bound

    # --- timing --------------------------------------------------------------------------

    def _time(self, out: CaseResult, req: EvalRequest, signature: Signature, entries: Entries | None, kernel,
              launch, args, buffers: CaseBuffers, case: CaseSpec, vendors: list[BoundVendor | None], seed: int,
              clock: Stopwatch) -> None:
        """Warm up and time on fresh inputs with the launch scan, then check the hidden few.
        Without a kernel, only the vendors are timed."""
        proto = req.protocol
        timed = [v for v in vendors if v is not None]
        run = TimedRun(self.gpu, self.launcher, self.leftovers, buffers, proto, seed, case.name,
                       reset=(lambda: entries.reset_state(self.gpu)) if entries is not None else None)
        try:
            out.clocks["before"] = self.gpu.clocks()
            candidate = (lambda: self.launcher.launch(kernel, launch, args)) if kernel is not None else None
            timings = run.run(candidate, timed)
            out.clocks["after"] = self.gpu.clocks()
            scanned = run.verify_scan() if kernel is not None else 0
            if kernel is not None:
                entries.refuse_altered_state("during timing: ")
                run.verify_saved_outputs()
        finally:
            run.close()
        clock.lap("timing_s")
        plan = run.plan  # the checked launches among those timed, drawn once the warm-ups said how many
        if kernel is not None:
            out.scan = LaunchScan(checked_launches=list(plan.checked), launches_scanned=scanned, seed=seed)
            self._timed_checks(out, req, signature, buffers, case, plan, seed, clock)
            others = "the vendor baselines" if len(timed) > 1 else "the vendor baseline" if timed else ""
            out.timing = summarize(timings.candidate, method(proto, len(plan.checked),
                                                             timings.gate_timeouts["candidate"], others))
        for result, bound in zip(out.vendors, vendors, strict=True):
            if bound is None:
                continue
            if bound.error:
                result.status, result.reason = "error", bound.error
                continue
            index = timed.index(bound)
            names = ["the candidate"] * (kernel is not None) + [v.label for v in timed if v is not bound]
            result.timing = summarize(timings.vendors[index], method(
                proto, 0, timings.gate_timeouts[f"vendor {index}"], ", ".join(names)))

    def _timed_checks(self, out: CaseResult, req: EvalRequest, signature: Signature, buffers: CaseBuffers,
                      case: CaseSpec, plan, seed: int, clock: Stopwatch) -> None:
        """The guards after timing, then each hidden checked launch against the reference of its own
        inputs, drawn again."""
        if not req.check:
            return
        violations = buffers.guard_violations()
        if violations:
            raise CaseFailure("guard_violation", "during timing: " + "; ".join(violations))
        altered = buffers.altered_fixed_inputs()
        if altered:
            raise CaseFailure("input_modified", "during timing: " + "; ".join(altered))
        for slot, timed in enumerate(plan.checked):
            stream = plan.launch_number(timed)
            buffers.stage_fresh(plan.inputs_key(seed, stream), stream)
            answer = self._fresh_answer(req, signature, case, buffers)
            try:
                self._check_outputs(out.checks, buffers, signature, case, answer, -1, "timed", slot, timed)
            finally:
                for value in answer.values():
                    if isinstance(value, DeviceAnswer):
                        value.scrub()
        clock.lap("timed_checks_s")


def _compile_key(spec: KernelSpec, arch: str) -> str:
    return cache_key(spec.to_data(), arch)
