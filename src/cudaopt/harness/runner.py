"""Evaluate one request on this process's GPU: compile, check every case, time, judge.

Runs inside a worker process. A sticky CUDA error (illegal address, ...) marks the runner
``dead``: the worker reports and exits, and the supervisor starts a fresh one.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from . import expr
from .buffers import CaseBuffers
from .check import compare, describe
from .compiler import CompileError, compile_kernel
from .gpu import CudaCallError, Gpu, is_sticky
from .inputs import InputError, generate, names_for, shape_of
from .protocol import (
    CaseResult,
    CaseSpec,
    CheckInfo,
    CompileInfo,
    EvalRequest,
    EvalResult,
    KernelSpec,
    LaunchSpec,
    to_dict,
)
from .reference import ReferenceFailure, call_python, load_python
from .signature import DTYPES, Signature, find_entry, parse_signature
from .stats import summarize

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
    pad = lambda d: tuple(d) + (1,) * (3 - len(d))  # noqa: E731
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

    # --- the request ---------------------------------------------------------------------

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
            compiled = compile_kernel(spec, self.gpu.arch)
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
            sets, shapes = self._input_sets(case, signature, n_sets, names)
            buffers = CaseBuffers(self.gpu, signature, sets, shapes)
            clock.lap("setup_s")
            refs = self._reference(req, signature, case, buffers, names) if req.check else None
            if refs is not None:
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
                self._time(out, req, kernel, launch, buffers, case)
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
                buffers.close()
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
        key = _key(to_dict(case), n_sets, names, str(signature))
        sets = self._inputs.get(key)
        if sets is None:
            sets = generate(case, signature, n_sets, names)
            self._inputs.put(key, sets, sum(t.data.nbytes for s in sets for t in s.values()))
        return sets, shapes

    def _reference(self, req: EvalRequest, signature, case, buffers: CaseBuffers, names) -> list[dict]:
        ref = req.reference
        if ref is None:
            raise ReferenceFailure("the request has no reference")
        key = _key(ref.source, ref.entry, ref.kind, to_dict(ref.launch) if ref.launch else None,
                   to_dict(case), len(buffers.sets), names, self.gpu.arch)
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
            tol = case.outputs[arg.name]
            slot = s if from_slot else None
            stats = self.gpu.compare(buffers.output_ptr(arg.name, slot), int(buffers.refs[s][arg.name].handle),
                                     buffers.elements(arg.name), arg.dtype, tol.rtol, tol.atol)
            if stats["bad"]:
                # the details (first bad index, expected and actual) come from the host comparison
                raw = buffers.read_output(arg.name, arg.dtype, from_slot=slot)
                info = compare(arg.name, raw, refs[s][arg.name], arg.dtype, tol.rtol, tol.atol, s, phase)
            else:
                info = CheckInfo(
                    output=arg.name, input_set=s, phase=phase, ok=True, elements=buffers.elements(arg.name),
                    nan_count=stats["nan"], inf_count=stats["inf"], max_abs_error=stats["max_abs"],
                    max_rel_error=stats["max_rel"],
                    rel_l2_error=_rel_l2(stats["err_sq"], stats["ref_sq"]),
                )
            out.checks.append(info)
            if not info.ok:
                raise CaseFailure("mismatch", describe(info))

    # --- timing --------------------------------------------------------------------------

    def _time(self, out: CaseResult, req: EvalRequest, kernel, launch, buffers: CaseBuffers, case) -> None:
        from cuda.core import EventOptions

        proto = req.protocol
        order = check_order(len(buffers.sets))
        args = buffers.kernel_args(case.scalars)
        buffers.ensure_slots()
        for i in range(proto.warmup):
            buffers.stage(order[i % len(order)])
            self._launch(kernel, launch, args)
        self._sync()
        out.clocks["before"] = self.gpu.clocks()
        samples: list[float] = []
        gate_timeouts = 0
        timing = EventOptions(timing_enabled=True)
        stream = self.gpu.stream
        for first in range(0, proto.iterations, max(1, proto.chunk)):
            count = min(proto.chunk, proto.iterations - first)
            if proto.gate:
                self.gpu.close_gate()
            events = []
            for i in range(first, first + count):
                s = order[i % len(order)]
                buffers.stage(s)
                if proto.flush_l2:
                    self.gpu.flush_l2()
                start = stream.record(options=timing)
                self._launch(kernel, launch, args)
                end = stream.record(options=timing)
                buffers.save_outputs(s)
                events.append((start, end))
            if proto.gate:
                self.gpu.open_gate()
            self._sync()
            gate_timeouts += int(proto.gate and self.gpu.gate_timed_out())
            samples.extend((end - start) * 1000.0 for start, end in events)
        out.clocks["after"] = self.gpu.clocks()
        method = "cuda-events"
        method += ", gated queue" if proto.gate else ", ungated"
        method += ", L2 flushed" if proto.flush_l2 else ", L2 warm"
        method += f", {len(order)} rotating input sets"
        if gate_timeouts:
            method += f", gate timed out in {gate_timeouts} chunk(s): host latency may be included"
        out.timing = summarize(samples, method)

    def _judge_plausibility(self, out: CaseResult, case: CaseSpec, names, signature: Signature, req) -> None:
        if out.timing is None or out.status != "ok":
            return
        seconds = out.timing.median_us * 1e-6
        floors = {}
        roof: dict = {}
        try:
            if case.flops is not None:
                flops = float(expr.evaluate(case.flops, names))
                peak = self.gpu.peaks.flops_per_s.get(_compute_class(signature), max(self.gpu.peaks.flops_per_s.values()))
                floors["compute"] = flops / peak
                roof.update(flops=flops, achieved_tflops=round(flops / seconds / 1e12, 3),
                            peak_tflops=round(peak / 1e12, 1))
            if case.bytes is not None:
                nbytes = float(expr.evaluate(case.bytes, names))
                peak_bw = self.gpu.peaks.bytes_per_s
                roof.update(bytes=nbytes, achieved_gbps=round(nbytes / seconds / 1e9, 1),
                            peak_gbps=round(peak_bw / 1e9, 1))
                if req.protocol.flush_l2:
                    floors["memory"] = nbytes / peak_bw
        except expr.ExprError as exc:
            roof["error"] = str(exc)
        if floors:
            bound, floor = max(floors.items(), key=lambda kv: kv[1])
            roof.update(floor_us=round(floor * 1e6, 3), bound=bound)
            if seconds < floor:
                out.status = "implausible"
                out.reason = (
                    f"median {out.timing.median_us:.3f} us is below the speed-of-light floor "
                    f"{floor * 1e6:.3f} us ({bound}-bound, from the declared work and the device's peaks)"
                )
        out.roofline = roof


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
