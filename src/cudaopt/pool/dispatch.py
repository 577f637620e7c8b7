"""Requests dispatched over GPUs: one request per GPU at a time, results in request order.

A *lane* is one GPU's worker: a local worker process (supervisor.py) or a Ray actor that owns
one (ray_cluster.py). The dispatcher hands each idle lane the next request it should run and
never a second one before the first is back, so no two timed kernels ever share a GPU.
Whatever finishes first, ``on_done`` sees the results in request order, so what a run records
does not depend on which GPU was quicker. A request may be pinned to a lane (a replay's
winner/baseline pairs of one case stay on one GPU). A batch's kernels are shared out among the
lanes to compile ahead, each lane its own share; a lane runs its share first, then takes what
the others have not started.

A lane that cannot start its worker any more leaves the pool and its request goes to another
lane (no lane left: WorkerError). A lane whose transport broke during a request
(:class:`LaneInterrupted`: a Ray actor lost with its node) hands the request back to be run
again, at most ``MAX_TRIES`` times in all; the candidate is not blamed for the transport.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ..errors import WorkerError
from ..wire.messages import WorkerMessage
from ..wire.protocol import EvalRequest, KernelSpec, WireModel
from ..wire.results import CaseResult, DeviceInfo, EvalResult

MAX_TRIES = 3


class LaneInterrupted(WorkerError):
    """The way to a worker broke during a request (not the worker's doing): run it elsewhere."""


class GpuRef(WireModel):
    """Which GPU measured a result: its model, and where it is (host and ordinal)."""

    name: str = ""  # the GPU model, e.g. "NVIDIA H200"
    index: int | None = None  # its ordinal on its host; None: not known (a result from the cache)
    host: str = ""  # the Ray node's address; "" for this machine
    pci_bus_id: str = ""

    @property
    def label(self) -> str:
        where = f"GPU {self.index}" if self.index is not None else f"GPU {self.pci_bus_id or '?'}"
        return f"{self.host} {where}" if self.host else where

    @classmethod
    def of(cls, device: DeviceInfo, index: int | None = None, host: str = "") -> GpuRef:
        return cls(name=device.name, index=index, host=host, pci_bus_id=device.pci_bus_id)


class Measured(WireModel):
    """One request's result and the GPU that measured it."""

    result: EvalResult
    gpu: GpuRef


OnEvent = Callable[[WorkerMessage], None]
OnStart = Callable[[int, GpuRef], None]
OnDone = Callable[[int, "Measured | None"], None]


class Lane(Protocol):
    """One GPU's worker, used by one request at a time."""

    info: DeviceInfo

    @property
    def ref(self) -> GpuRef: ...

    def start(self) -> None: ...

    def evaluate(self, request: EvalRequest, on_event: OnEvent | None = None) -> EvalResult: ...

    def prefetch(self, kernels: list[KernelSpec]) -> None: ...

    def stop(self) -> None: ...


class Evaluator(Protocol):
    """What the layers above need of the pool layer (a pool of GPUs; a scripted one in tests)."""

    notices: list[str]  # lanes left out or lost, one line each
    backend: str  # where the workers run: "local", or "ray ADDRESS"

    def evaluate(self, request: EvalRequest, on_event: OnEvent | None = None) -> EvalResult: ...

    def evaluate_all(self, requests: list[EvalRequest], *, pins: list[int | None] | None = None,
                     on_event: OnEvent | None = None, on_start: OnStart | None = None,
                     on_done: OnDone | None = None,
                     should_stop: Callable[[], bool] | None = None) -> list[Measured | None]: ...

    def device_info(self) -> DeviceInfo: ...

    def gpus(self) -> list[GpuRef]: ...

    def compile_ahead(self, kernels: list[KernelSpec]) -> None:
        """Start compiling kernels that the next batch of requests will name, while other work runs."""


def unfinished(request: EvalRequest, status: str, reason: str, case: str = "", partial: EvalResult | None = None,
               start: float | None = None) -> EvalResult:
    """The result of a request that could not finish: the cases done kept, the rest marked."""
    partial = partial or EvalResult(status=status, request_id=request.id)
    done = {c.name for c in partial.cases}
    for spec in request.cases:
        if spec.name in done:
            continue
        if spec.name == case or (not case and status == "crashed"):
            partial.cases.append(CaseResult(name=spec.name, role=spec.role, status=status, reason=reason))
            case = spec.name
        else:
            partial.cases.append(CaseResult(name=spec.name, role=spec.role, status=status,
                                            reason=f"not run: {status} in case {case or '-'}"))
    partial.status = status
    partial.reason = f"case {case}: {reason}" if case else reason
    if start is not None:
        partial.wall_s = round(time.monotonic() - start, 4)
    return partial


def _kernel_key(kernel: KernelSpec) -> str:
    return hashlib.sha256(kernel.to_json().encode()).hexdigest()


def deal(pins: list[int | None], usable: list[int]) -> list[int]:
    """The lane of each request of a batch: its pin, or else the usable lanes in turn."""
    owners, turn = [], 0
    for pin in pins:
        owners.append(usable[turn % len(usable)] if pin is None else pin)
        turn += pin is None
    return owners


def _share_out(lanes: list[Lane], requests: list[EvalRequest], pins: list[int | None], usable: list[int],
               lost: dict[int, str]) -> list[int | None]:
    """Which lane each request belongs to; each lane compiles its share ahead (a batch of one: nothing)."""
    if len(requests) < 2:
        return [None] * len(requests)
    owners: list[int | None] = deal(pins, usable)
    for k in list(usable):
        kernels = {_kernel_key(r.kernel): r.kernel for r, o in zip(requests, owners, strict=True)
                   if o == k and r.kernel is not None}  # a vendor-only request has nothing to compile
        try:
            lanes[k].prefetch(list(kernels.values()))
        except WorkerError as exc:
            _lose(k, str(exc), usable, lost, pins, owners)
    return owners


def _lose(k: int, reason: str, usable: list[int], lost: dict[int, str], pins: list[int | None],
          owners: list[int | None]) -> None:
    """Lane ``k`` leaves the pool; what was pinned to it or its share goes to the first lane left."""
    lost[k] = reason
    usable.remove(k)
    if not usable:
        raise WorkerError(reason)
    for seq in (pins, owners):
        for i, lane in enumerate(seq):
            if lane == k:
                seq[i] = usable[0]


def _next_for(k: int, pending: list[int], pins: list[int | None], owners: list[int | None]) -> int | None:
    """The request lane ``k`` runs next: one pinned to it, else one of its share, else any unpinned one."""
    for wanted in (lambda i: pins[i] == k, lambda i: pins[i] is None and owners[i] in (k, None),
                   lambda i: pins[i] is None):
        found = next((i for i in pending if wanted(i)), None)
        if found is not None:
            return found
    return None


def _run(lane: Lane, k: int, i: int, request: EvalRequest, messages: queue.Queue) -> None:
    """One request on one lane, in a thread of its own; everything it has to say goes to ``messages``."""
    try:
        result = lane.evaluate(request, on_event=lambda m: messages.put(("event", k, i, m)))
        messages.put(("done", k, i, result))
    except BaseException as exc:  # handed to the dispatching thread, which decides
        messages.put(("error", k, i, exc))


def dispatch(lanes: list[Lane], requests: list[EvalRequest], *, pins: list[int | None] | None = None,
             on_event: OnEvent | None = None, on_start: OnStart | None = None, on_done: OnDone | None = None,
             should_stop: Callable[[], bool] | None = None, lost: dict[int, str] | None = None) -> list[Measured | None]:
    """Run ``requests`` on the lanes, at most one per lane at a time; the results in request order.

    ``pins[i]``: the GPU request ``i`` must run on, by its place among the lanes in the pool (the
    order of ``Dispatcher.gpus``). Callbacks run in the calling thread:
    ``on_start`` when a request is handed to a lane, ``on_event`` for each worker message,
    ``on_done`` once per request in request order (None: not run). ``should_stop`` is asked
    before each request is handed out; once true, nothing more starts, what runs finishes.
    ``lost`` (lane position -> why) holds the lanes out of the pool, and gains those that leave.
    """
    lost = {} if lost is None else lost
    usable = [k for k in range(len(lanes)) if k not in lost]
    if not usable:
        raise WorkerError(next(iter(lost.values()), "no GPU worker"))
    n = len(requests)
    pins = [None if p is None else usable[p] for p in (pins or [None] * n)]
    owners = _share_out(lanes, requests, pins, usable, lost)
    pending, tries = list(range(n)), [0] * n
    results: list[Measured | None] = [None] * n
    settled = [False] * n
    busy: dict[int, int] = {}
    messages: queue.Queue = queue.Queue()
    committed = 0
    while True:
        if pending and should_stop is not None and should_stop():
            for i in pending:
                settled[i] = True
            pending.clear()
        for k in [k for k in usable if k not in busy]:
            i = _next_for(k, pending, pins, owners)
            if i is None:
                continue
            pending.remove(i)
            busy[k] = i
            if on_start is not None:
                on_start(i, lanes[k].ref)
            threading.Thread(target=_run, args=(lanes[k], k, i, requests[i], messages), daemon=True).start()
        while committed < n and settled[committed]:
            if on_done is not None:
                on_done(committed, results[committed])
            committed += 1
        if not busy:
            if pending:  # every lane idle and none may take them: a bug in the pins
                raise RuntimeError(f"requests {pending} have no lane to run on")
            break
        kind, k, i, payload = messages.get()
        if kind == "event":
            if on_event is not None:
                on_event(payload)
            continue
        del busy[k]
        if kind == "done":
            results[i], settled[i] = Measured(result=payload, gpu=lanes[k].ref), True
        elif isinstance(payload, LaneInterrupted):
            tries[i] += 1
            if tries[i] < MAX_TRIES:
                pending.insert(0, i)
            else:
                reason = f"{tries[i]} workers were lost while running it (last: {payload})"
                results[i] = Measured(result=unfinished(requests[i], "crashed", reason), gpu=lanes[k].ref)
                settled[i] = True
        elif isinstance(payload, WorkerError):
            pending.insert(0, i)
            _lose(k, str(payload), usable, lost, pins, owners)
        else:
            raise payload
    return results


class Dispatcher:
    """An :class:`Evaluator` over lanes, one per GPU (the local supervisor and the Ray backend are two).

    The lanes start together at first use. A pool measures on one GPU model, the first lane's:
    a lane with another model is left out with a notice, so that every comparison a run makes
    is between measurements of the same kind of GPU.
    """

    backend = "local"

    def __init__(self, lanes: list[Lane]):
        self.lanes = lanes
        self.lost: dict[int, str] = {}
        self.notices: list[str] = []
        self._started = False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        if self._started:
            return
        with ThreadPoolExecutor(max_workers=len(self.lanes)) as pool:
            failures = [f.exception() for f in [pool.submit(lane.start) for lane in self.lanes]]
        failed = next((exc for exc in failures if exc is not None), None)
        if failed is not None:
            raise failed
        self._started = True
        model = self.lanes[0].info.name
        for k, lane in enumerate(self.lanes[1:], start=1):
            if lane.info.name != model:
                self.lost[k] = f"a {lane.info.name}, not a {model}"
                self.notices.append(f"{lane.ref.label} ({lane.info.name}) left out: this pool measures on "
                                    f"{model} GPUs only, so that its measurements compare")

    def device_info(self) -> DeviceInfo:
        """The first GPU's facts (the model every measurement of this pool is made on)."""
        self.start()
        return self.lanes[0].info

    def gpus(self) -> list[GpuRef]:
        self.start()
        return [lane.ref for k, lane in enumerate(self.lanes) if k not in self.lost]

    def evaluate(self, request: EvalRequest, on_event: OnEvent | None = None) -> EvalResult:
        (measured,) = self.evaluate_all([request], on_event=on_event)
        return measured.result

    def compile_ahead(self, kernels: list[KernelSpec]) -> None:
        """Each lane starts compiling the kernels it will be handed when they come as one batch of
        requests, in this order (dealt as :func:`_share_out` deals them), so that the compilation
        runs beside whatever the lanes measure first (a run's baseline)."""
        self.start()
        usable = [k for k in range(len(self.lanes)) if k not in self.lost]
        owners = deal([None] * len(kernels), usable)
        for k in usable:
            share = [kernel for kernel, owner in zip(kernels, owners, strict=True) if owner == k]
            if share:
                try:
                    self.lanes[k].prefetch(share)
                except WorkerError as exc:  # the lane is lost when it is next asked to measure
                    self.notices.append(f"{self.lanes[k].ref.label} could not compile ahead: {exc}")

    def evaluate_all(self, requests: list[EvalRequest], **options) -> list[Measured | None]:
        """See :func:`dispatch`."""
        self.start()
        before = set(self.lost)
        try:
            return dispatch(self.lanes, requests, lost=self.lost, **options)
        finally:
            for k in sorted(set(self.lost) - before):
                self.notices.append(f"{self.lanes[k].ref.label} left the pool: {self.lost[k]}")

    def close(self) -> None:
        for lane in self.lanes:
            lane.stop()
