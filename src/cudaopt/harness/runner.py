"""Evaluate one request on this process's GPU: compile, check every case, time, judge.

Runs inside a worker process. A sticky CUDA error (illegal address, ...) marks the runner
``dead``: the worker reports and exits, and the supervisor starts a fresh one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from . import expr
from .buffers import CaseBuffers
from .check import compare, describe
from .compiler import CompileError, compile_kernel
from .gpu import CudaCallError, Gpu, call, is_sticky
from .inputs import InputError, generate, names_for, shape_of
from .peaks import roofline
from .protocol import (
    CaseResult,
    CaseSpec,
    CheckInfo,
    CompileInfo,
    EvalRequest,
    EvalResult,
    KernelSpec,
    LaunchSpec,
    TimingProtocol,
    VendorResult,
    to_dict,
)
from .reference import ReferenceFailure, call_python, load_python
from .signature import DTYPES, Signature, find_entry, parse_signature
from .stats import summarize
from .vendor import BoundVendor, Vendor, VendorError

DEFAULT_SHARED_LIMIT = 48 * 1024
_CACHE_BYTES = 4 << 30


class _Lru:
    """A byte-bounded LRU cache for generated inputs and reference outputs."""

    def __init__(self, limit: int):
        self.limit, self.used, self.items = limit, 0, OrderedDict()

    def get(self, key):
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key][0]
        return None

    def put(self, key, value, nbytes: int) -> None:
        self.items[key] = (value, nbytes)
        self.used += nbytes
        while self.used > self.limit and len(self.items) > 1:
            _, (_, size) = self.items.popitem(last=False)
            self.used -= size


class _Stopwatch:
    """Wall time per step of a case, recorded into ``CaseResult.phases``."""

    def __init__(self, into: dict):
        self.into, self.last = into, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.into[name] = round(now - self.last, 4)
        self.last = now


class CaseFailure(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def check_order(sets: int) -> list[int]:
    """Input-set order: the near duplicate (set 2) right after its original (set 0)."""
    return [0, 2, 1, *range(3, sets)] if sets >= 3 else list(range(sets))


def resolve_launch(spec: LaunchSpec, names: dict) -> dict:
    """Evaluate grid, block and shared bytes; raise ValueError on anything unusable."""
    try:
        grid = [expr.evaluate_int(v, names) for v in spec.grid]
        block = [expr.evaluate_int(v, names) for v in spec.block]
        shared = expr.evaluate_int(spec.shared_bytes, names)
    except expr.ExprError as exc:
        raise ValueError(str(exc)) from None
    for label, dims in (("grid", grid), ("block", block)):
        if not 1 <= len(dims) <= 3:
            raise ValueError(f"{label} needs 1 to 3 dimensions, got {len(dims)}")
        if any(d < 1 for d in dims):
            raise ValueError(f"{label} {dims} has a dimension below 1")
    if shared < 0:
        raise ValueError(f"shared_bytes {shared} is negative")
    pad = lambda d: tuple(d) + (1,) * (3 - len(d))
    return {"grid": pad(grid), "block": pad(block), "shared_bytes": shared}


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class Runner:
    def __init__(self, gpu: Gpu, on_event: Callable[[dict], None] = lambda event: None):
        self.gpu = gpu
        self.on_event = on_event
        self.dead = False
        self._inputs = _Lru(_CACHE_BYTES)
        self._refs = _Lru(_CACHE_BYTES)
        self._modules: dict[str, object] = {}
        self._prefetched: dict[str, Future] = {}
        self._compilers: ThreadPoolExecutor | None = None
        self._devices = _DeviceCases(self.gpu)
        self._vendors: dict[str, Vendor] = {}

    # --- the request ---------------------------------------------------------------------

    def prefetch(self, specs: list[KernelSpec]) -> None:
        """Start compiling kernels that later requests will name, on all CPU cores.

        A sweep knows its configurations up front; compiling them in parallel while earlier
        ones are measured takes compilation off the critical path. Nothing is launched here.
        """
        if self._compilers is None:
            self._compilers = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 2))
        for spec in specs:
            key = _compile_key(spec, self.gpu.arch)
            if key not in self._prefetched:
                self._prefetched[key] = self._compilers.submit(compile_kernel, spec, self.gpu.arch)

    def evaluate(self, req: EvalRequest) -> EvalResult:
        start = time.perf_counter()
        result = EvalResult(status="ok", request_id=req.id, device=self.gpu.info())
        try:
            self._evaluate(req, result)
        except CaseFailure as failure:
            result.status, result.reason = failure.status, failure.reason
        result.wall_s = round(time.perf_counter() - start, 4)
        return result

    def _evaluate(self, req: EvalRequest, result: EvalResult) -> None:
        signature = parse_signature(req.signature)
        self.on_event({"type": "phase", "phase": "compile", "case": ""})
        kernel, info = self._compile(req.kernel, signature)
        result.compile = info
        self.on_event({"type": "compiled", "compile": to_dict(info)})
        for case in req.cases:
            if self.dead:
                result.cases.append(CaseResult(case.name, case.role, "crashed", "not run: the GPU context was lost"))
                continue
            result.cases.append(self._case(req, signature, kernel, case))
            self.on_event({"type": "case", "case": to_dict(result.cases[-1])})
        failed = next((c for c in result.cases if c.status != "ok"), None)
        if failed:
            result.status = failed.status
            result.reason = f"case {failed.name}: {failed.reason}"

    def _compile(self, spec: KernelSpec, signature: Signature):
        declared = find_entry(spec.source, spec.entry)
        if declared is not None and not declared.same_types(signature):
            raise CaseFailure(
                "bad_signature", f"{spec.entry} is declared as '{declared}', the experiment needs '{signature}'"
            )
        try:
            pending = self._prefetched.pop(_compile_key(spec, self.gpu.arch), None)
            compiled = pending.result() if pending else compile_kernel(spec, self.gpu.arch)
        except CompileError as exc:
            raise CaseFailure("compile_error", exc.log) from None
        try:
            kernel = compiled.cubin.get_kernel(spec.entry)
        except Exception:
            found = _entries(spec.source)
            hint = f"; the source defines {', '.join(found)}" if found else ""
            raise CaseFailure("missing_entry", f"no kernel named {spec.entry!r} in the module{hint}") from None
        if kernel.num_arguments != len(signature.args):
            raise CaseFailure(
                "bad_signature",
                f"{spec.entry} takes {kernel.num_arguments} arguments, the experiment's signature has {len(signature.args)}",
            )
        sizes = [8 if a.pointer else DTYPES[a.dtype].itemsize for a in signature.args]
        actual = [int(p.size) for p in kernel.arguments_info]
        if actual != sizes:
            raise CaseFailure("bad_signature", f"{spec.entry} argument sizes {actual} != expected {sizes}")
        info: CompileInfo = compiled.info
        attrs = kernel.attributes
        if info.registers is None:  # no ptxas report in the log: read the loaded kernel instead
            info.registers = int(attrs.num_regs)
        if info.static_shared_bytes is None:
            info.static_shared_bytes = int(attrs.shared_size_bytes)
        info.local_bytes = int(attrs.local_size_bytes)
        info.max_threads_per_block = int(attrs.max_threads_per_block)
        return kernel, info

    # --- one case ------------------------------------------------------------------------

    def _case(self, req: EvalRequest, signature: Signature, kernel, case: CaseSpec) -> CaseResult:
        out = CaseResult(name=case.name, role=case.role, status="ok")
        names = names_for(case, {k: v for k, v in req.kernel.defines.items() if isinstance(v, (int, float))})
        buffers = None
        self.on_event({"type": "phase", "phase": "check", "case": case.name})
        try:
            spec = req.launch or case.launch
            if spec is None:
                raise CaseFailure("bad_launch_config", "no launch configuration for this case")
            try:
                launch = resolve_launch(spec, names)
            except ValueError as exc:
                raise CaseFailure("bad_launch_config", str(exc)) from None
            out.launch = {k: list(v) if isinstance(v, tuple) else v for k, v in launch.items()}
            out.occupancy = self._occupancy(kernel, launch)
            clock = _Stopwatch(out.phases)
            n_sets = max(1, req.protocol.input_sets)
            sets, shapes, data_key = self._input_sets(case, signature, n_sets, names)
            buffers = self._devices.take(data_key, signature, sets, shapes)
            clock.lap("setup_s")
            refs = self._reference(req, signature, case, buffers, names) if req.check else None
            if refs is not None and not buffers.refs:
                buffers.load_references(refs)
            clock.lap("reference_s")
            if req.check:
                for s in check_order(n_sets):
                    buffers.stage(s)
                    self._launch(kernel, launch, buffers.kernel_args(case.scalars))
                    self._sync()
                    self._verify(out, buffers, signature, case, refs, s, "check")
            clock.lap("check_s")
            if case.role in req.time_roles:
                self.on_event({"type": "phase", "phase": "timing", "case": case.name})
                vendor = self._vendor(out, req, signature, case, buffers, refs) if req.vendor and req.check else None
                self._time(out, req, kernel, launch, buffers, case, vendor)
                clock.lap("timing_s")
                if req.check:
                    for s in check_order(n_sets):
                        self._verify(out, buffers, signature, case, refs, s, "timed", from_slot=True)
                    last = check_order(n_sets)[(req.protocol.iterations - 1) % n_sets]
                    changed = buffers.modified_inputs(last)
                    if changed:
                        raise CaseFailure("input_modified", "during timing: " + "; ".join(changed))
                clock.lap("verify_timed_s")
                self._judge_plausibility(out, case, names, signature, req)
        except CaseFailure as failure:
            out.status, out.reason = failure.status, failure.reason
        except (InputError, ReferenceFailure) as exc:
            out.status = "reference_error" if isinstance(exc, ReferenceFailure) else "internal_error"
            out.reason = str(exc)
        finally:
            if buffers is not None and not self.dead:
                self._devices.give_back(buffers, keep=out.status == "ok")
        return out

    def _occupancy(self, kernel, launch: dict) -> dict:
        threads = int(np.prod(launch["block"]))
        try:
            blocks = kernel.occupancy.max_active_blocks_per_multiprocessor(threads, launch["shared_bytes"])
        except Exception as exc:  # e.g. more threads than the kernel can take; the launch will say
            return {"error": str(exc).splitlines()[0]}
        max_warps = int(self.gpu.props.max_threads_per_multiprocessor) // 32
        warps = blocks * -(-threads // 32)
        return {"blocks_per_sm": int(blocks), "warps_per_sm": warps, "occupancy": round(warps / max_warps, 3)}

    def _input_sets(self, case: CaseSpec, signature: Signature, n_sets: int, names: dict):
        shapes = {
            a.name: shape_of(case.outputs[a.name].shape, names, f"case {case.name!r} output {a.name!r}")
            for a in signature.outputs
            if a.name in case.outputs
        }
        missing = [a.name for a in signature.outputs if a.name not in case.outputs]
        if missing:
            raise InputError(f"case {case.name!r}: no output spec for {missing}")
        inputs = {n: shape_of(i.shape, names, f"case {case.name!r} input {n!r}") for n, i in case.inputs.items()}
        # keyed by resolved shapes, not by every name: a sweep's configurations share one case's data
        key = _key(to_dict(case), n_sets, inputs, shapes, str(signature))
        sets = self._inputs.get(key)
        if sets is None:
            sets = generate(case, signature, n_sets, names)
            self._inputs.put(key, sets, sum(t.data.nbytes for s in sets for t in s.values()))
        return sets, shapes, key

    def _reference(self, req: EvalRequest, signature, case, buffers: CaseBuffers, names) -> list[dict]:
        ref = req.reference
        if ref is None:
            raise ReferenceFailure("the request has no reference")
        key = _key(ref.source, ref.entry, ref.kind, to_dict(ref.launch) if ref.launch else None,
                   buffers.key, self.gpu.arch)
        cached = self._refs.get(key)
        if cached is not None:
            return cached
        outputs: list[dict] = []
        if ref.kind == "py":
            fn = load_python(ref.source, ref.path, ref.entry)
            for host_set in buffers.sets:
                inputs = {n: t.as_numbers() for n, t in host_set.items()}
                outputs.append(call_python(fn, signature, inputs, case.scalars, buffers.output_shapes))
        else:
            kernel = self._reference_kernel(ref, signature)
            spec = ref.launch or case.launch
            if spec is None:
                raise ReferenceFailure(f"case {case.name!r}: no launch configuration for the reference kernel")
            launch = resolve_launch(spec, names)
            for s in range(len(buffers.sets)):
                buffers.stage(s)
                try:
                    self._launch(kernel, launch, buffers.kernel_args(case.scalars))
                    self._sync()
                except CaseFailure as failure:
                    raise ReferenceFailure(f"reference kernel failed: {failure.reason}") from None
                produced = {}
                for arg in signature.outputs:
                    n = buffers.elements(arg.name)
                    widened = self.gpu.alloc(8 * n)
                    try:
                        self.gpu.widen(buffers.output_ptr(arg.name), int(widened.handle), n, arg.dtype)
                        stats = self.gpu.compare(buffers.output_ptr(arg.name), int(widened.handle), n, arg.dtype,
                                                 math.inf, math.inf)
                        if stats["unwritten"]:
                            raise ReferenceFailure(
                                f"the reference kernel left {stats['unwritten']} elements of {arg.name!r} unwritten"
                            )
                        raw = self.gpu.download(int(widened.handle), 8 * n)
                    finally:
                        widened.close(self.gpu.stream)
                    produced[arg.name] = raw.view(np.float64).reshape(buffers.output_shapes[arg.name])
                if buffers.modified_inputs(s) or buffers.guard_violations():
                    raise ReferenceFailure("the reference kernel wrote outside its outputs")
                outputs.append(produced)
        self._refs.put(key, outputs, sum(a.nbytes for o in outputs for a in o.values()))
        return outputs

    def _reference_kernel(self, ref, signature: Signature):
        key = _key(ref.source, ref.entry, self.gpu.arch)
        if key not in self._modules:
            try:
                compiled = compile_kernel(KernelSpec(source=ref.source, entry=ref.entry), self.gpu.arch)
                self._modules[key] = compiled.cubin.get_kernel(ref.entry)
            except CompileError as exc:
                raise ReferenceFailure(f"the reference kernel does not compile:\n{exc.log}") from None
            except Exception as exc:
                raise ReferenceFailure(f"the reference has no kernel {ref.entry!r}: {exc}") from None
        return self._modules[key]

    # --- launching -----------------------------------------------------------------------

    def _launch(self, kernel, launch: dict, args: list) -> None:
        from cuda.core import LaunchConfig
        from cuda.core import launch as cuda_launch

        try:
            if launch["shared_bytes"] > DEFAULT_SHARED_LIMIT:
                _set_max_dynamic_shared(kernel, launch["shared_bytes"], self.gpu.device.device_id)
            config = LaunchConfig(grid=launch["grid"], block=launch["block"], shmem_size=launch["shared_bytes"])
            cuda_launch(self.gpu.stream, config, kernel, *args)
        except Exception as exc:
            self._raise_cuda(exc, "launch_error")

    def _sync(self) -> None:
        try:
            self.gpu.stream.sync()
        except Exception as exc:
            self._raise_cuda(exc, "launch_error")

    def _raise_cuda(self, exc: Exception, status: str):
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        if is_sticky(str(exc)):
            self.dead = True
            raise CaseFailure("crashed", message) from None
        raise CaseFailure(status, message) from None

    def _verify(self, out: CaseResult, buffers: CaseBuffers, signature, case, refs, s: int, phase: str,
                from_slot: bool = False) -> None:
        violations = buffers.guard_violations()
        if violations:
            raise CaseFailure("guard_violation", "; ".join(violations))
        if not from_slot:
            changed = buffers.modified_inputs(s)
            if changed:
                raise CaseFailure("input_modified", "; ".join(changed))
        for arg in signature.outputs:
            info = self._check(buffers, arg, case, refs, s, phase, s if from_slot else None)
            out.checks.append(info)
            if not info.ok:
                raise CaseFailure("mismatch", describe(info))

    def _check(self, buffers: CaseBuffers, arg, case, refs, s: int, phase: str, slot: int | None) -> CheckInfo:
        """One output (the working buffer, or a timed slot) against input set ``s``'s reference."""
        tol = case.outputs[arg.name]
        stats = self.gpu.compare(buffers.output_ptr(arg.name, slot), int(buffers.refs[s][arg.name].handle),
                                 buffers.elements(arg.name), arg.dtype, tol.rtol, tol.atol)
        if stats["bad"]:
            # the details (first bad index, expected and actual) come from the host comparison
            raw = buffers.read_output(arg.name, arg.dtype, from_slot=slot)
            return compare(arg.name, raw, refs[s][arg.name], arg.dtype, tol.rtol, tol.atol, s, phase)
        return CheckInfo(
            output=arg.name, input_set=s, phase=phase, ok=True, elements=buffers.elements(arg.name),
            nan_count=stats["nan"], inf_count=stats["inf"], max_abs_error=stats["max_abs"],
            max_rel_error=stats["max_rel"], rel_l2_error=_rel_l2(stats["err_sq"], stats["ref_sq"]),
        )

    # --- the vendor baseline -------------------------------------------------------------

    def _vendor(self, out: CaseResult, req: EvalRequest, signature: Signature, case: CaseSpec,
                buffers: CaseBuffers, refs) -> BoundVendor | None:
        """The vendor over this case's buffers, checked once against the reference (input set 0).

        Returns None when it cannot be timed; ``out.vendor`` says why. Never fails the candidate,
        unless the vendor destroys the GPU context, which ends the case for everyone.
        """
        spec = req.vendor
        out.vendor = VendorResult(label=spec.label or spec.entry, status="ok")
        pointers = {a.name: (buffers.inputs[a.name].ptr, buffers.sets[0][a.name].data.shape) for a in signature.inputs}
        pointers |= {a.name: (buffers.outputs[a.name].ptr, buffers.output_shapes[a.name]) for a in signature.outputs}
        try:
            key = _key(to_dict(spec))
            if key not in self._vendors:
                self._vendors[key] = Vendor(spec, int(self.gpu.stream.handle))
            bound = self._vendors[key].bind(signature, pointers, case.scalars)
        except VendorError as exc:
            out.vendor.status, out.vendor.reason = "error", str(exc)
            return None
        buffers.stage(0)
        bound()
        try:
            self._sync()
        except CaseFailure as failure:
            if self.dead:
                raise CaseFailure("crashed", f"the vendor baseline {out.vendor.label} crashed the GPU context: "
                                             f"{failure.reason}") from None
            bound.error = bound.error or failure.reason
        if bound.error:
            out.vendor.status, out.vendor.reason = "error", bound.error
            return None
        for arg in signature.outputs:
            info = self._check(buffers, arg, case, refs, 0, "check", None)
            out.vendor.checks.append(info)
            if not info.ok:
                out.vendor.status, out.vendor.reason = "mismatch", describe(info)
                return None
        return bound

    # --- timing --------------------------------------------------------------------------

    def _time(self, out: CaseResult, req: EvalRequest, kernel, launch, buffers: CaseBuffers, case,
              vendor: BoundVendor | None) -> None:
        """Warm up, then time in gated chunks; with a vendor, its chunks alternate with the candidate's
        (vendor first, so the inputs checked after timing are the candidate's) and drift hits both."""
        proto = req.protocol
        order = check_order(len(buffers.sets))
        args = buffers.kernel_args(case.scalars)
        buffers.ensure_slots()
        runs: dict[str, Callable[[], None]] = {"vendor": vendor} if vendor else {}
        runs["candidate"] = lambda: self._launch(kernel, launch, args)
        for run in runs.values():
            for i in range(proto.warmup):
                buffers.stage(order[i % len(order)])
                run()
        self._sync()
        out.clocks["before"] = self.gpu.clocks()
        samples: dict[str, list[float]] = {name: [] for name in runs}
        gate_timeouts = dict.fromkeys(runs, 0)
        for first in range(0, proto.iterations, max(1, proto.chunk)):
            count = min(proto.chunk, proto.iterations - first)
            if vendor and vendor.error:
                runs.pop("vendor", None)
            for name, run in runs.items():
                times, timed_out = self._chunk(run, buffers, order, first, count, proto, save=name == "candidate")
                samples[name].extend(times)
                gate_timeouts[name] += timed_out
        out.clocks["after"] = self.gpu.clocks()
        out.timing = summarize(samples["candidate"], _method(proto, len(order), gate_timeouts["candidate"],
                                                             "the vendor baseline" if vendor else ""))
        if vendor and vendor.error:
            out.vendor.status, out.vendor.reason = "error", vendor.error
        elif vendor:
            out.vendor.timing = summarize(samples["vendor"], _method(proto, len(order), gate_timeouts["vendor"],
                                                                     "the candidate"))

    def _chunk(self, run: Callable[[], None], buffers: CaseBuffers, order: list[int], first: int, count: int,
               proto: TimingProtocol, save: bool) -> tuple[list[float], bool]:
        """Queue ``count`` samples behind the gate (stage, flush, event, run, event), release them
        together; their times in µs and whether the gate timed out."""
        from cuda.core import EventOptions

        timing = EventOptions(timing_enabled=True)
        stream = self.gpu.stream
        if proto.gate:
            self.gpu.close_gate()
        events = []
        try:
            for i in range(first, first + count):
                s = order[i % len(order)]
                buffers.stage(s)
                if proto.flush_l2:
                    self.gpu.flush_l2()
                start = stream.record(options=timing)
                run()
                end = stream.record(options=timing)
                if save:
                    buffers.save_outputs(s)
                events.append((start, end))
        finally:
            if proto.gate:
                self.gpu.open_gate()
        self._sync()
        return [(end - start) * 1000.0 for start, end in events], proto.gate and self.gpu.gate_timed_out()

    def _judge_plausibility(self, out: CaseResult, case: CaseSpec, names, signature: Signature, req) -> None:
        if out.timing is None or out.status != "ok":
            return
        try:
            flops = float(expr.evaluate(case.flops, names)) if case.flops is not None else None
            nbytes = float(expr.evaluate(case.bytes, names)) if case.bytes is not None else None
        except expr.ExprError as exc:
            out.roofline = {"error": str(exc)}
            return
        spec, measured = self.gpu.peaks, self.gpu.measured
        kind = _compute_class(signature)
        out.roofline = roofline(
            out.timing.median_us * 1e-6, flops, nbytes,
            spec_flops=spec.flops_per_s.get(kind, max(spec.flops_per_s.values())), spec_bytes=spec.bytes_per_s,
            measured_flops=measured.flops_per_s.get(kind) if measured else None,
            measured_bytes=measured.bytes_per_s if measured else None, memory_floor=req.protocol.flush_l2,
        )
        floor_us = out.roofline.get("floor_us")
        if floor_us is not None and out.timing.median_us < floor_us:
            out.status = "implausible"
            out.reason = (
                f"median {out.timing.median_us:.3f} us is below the speed-of-light floor {floor_us:.3f} us "
                f"({out.roofline['bound']}-bound, from the declared work and the larger of the spec and measured peaks)"
            )


def _method(proto: TimingProtocol, sets: int, gate_timeouts: int, interleaved: str) -> str:
    method = "cuda-events"
    method += ", gated queue" if proto.gate else ", ungated"
    method += ", L2 flushed" if proto.flush_l2 else ", L2 warm"
    method += f", {sets} rotating input sets"
    if interleaved:
        method += f", chunks interleaved with {interleaved}"
    if gate_timeouts:
        method += f", gate timed out in {gate_timeouts} chunk(s): host latency may be included"
    return method


class _DeviceCases:
    """A case's device buffers (input sets, references), kept between requests of a sweep.

    Uploading a large case's input sets and float64 references for every configuration costs
    more than many of its kernels. Buffers are reused only after a candidate passed on them
    (a failing one may have scribbled anywhere), with fresh guard bands; a byte budget bounds
    what is kept.
    """

    def __init__(self, gpu: Gpu):
        self.gpu = gpu
        self.kept: OrderedDict[str, CaseBuffers] = OrderedDict()
        self._budget: int | None = None

    @property
    def budget(self) -> int:
        """A quarter of the device's memory, at most 16 GiB: candidates need the rest."""
        if self._budget is None:
            _free, total = call("cuMemGetInfo")
            self._budget = min(16 << 30, int(total) // 4)
        return self._budget

    def take(self, key: str, signature: Signature, sets, shapes) -> CaseBuffers:
        buffers = self.kept.pop(key, None)
        if buffers is None:
            buffers = CaseBuffers(self.gpu, signature, sets, shapes)
            buffers.key = key
        else:
            buffers.reset_guards()
        return buffers

    def give_back(self, buffers: CaseBuffers, keep: bool) -> None:
        if not keep:
            buffers.close()
            return
        self.kept[buffers.key] = buffers
        while self.kept and sum(b.device_bytes() for b in self.kept.values()) > self.budget:
            self.kept.popitem(last=False)[1].close()


def _compile_key(spec: KernelSpec, arch: str) -> str:
    return _key(to_dict(spec), arch)


def _rel_l2(err_sq: float, ref_sq: float) -> float:
    return math.sqrt(err_sq / ref_sq) if ref_sq > 0 else math.sqrt(err_sq)


def _compute_class(signature: Signature) -> str:
    """The narrowest floating type among the inputs decides which peak rate bounds the kernel."""
    widths = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1}
    dtypes = [a.dtype for a in signature.inputs if a.dtype in widths] or ["float32"]
    return min(dtypes, key=lambda d: widths[d])


def _entries(source: str) -> list[str]:
    import re

    return re.findall(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)', source)


def _set_max_dynamic_shared(kernel, nbytes: int, device_id: int) -> None:
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = kernel.handle
    if isinstance(handle, driver.CUkernel):
        err, = driver.cuKernelSetAttribute(attr, nbytes, handle, device_id)
    else:
        err, = driver.cuFuncSetAttribute(handle, attr, nbytes)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise CudaCallError(
            f"cannot allow {nbytes} bytes of dynamic shared memory: {name.decode()}"
        )
