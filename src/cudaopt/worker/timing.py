"""The timed part of a case: every launch on fresh inputs, a hidden few of them checked.

Warm-up and timed launches each get inputs drawn on the device, outside the timed interval, from
a one-way hash of the request's seed, the case and the launch number (LaunchPlan.inputs_key), so
no launch sees data another launch saw, in this case or another (a memo table never hits). After
every launch, outside the interval, its outputs are scanned for unwritten elements (a launch that
skips its work is caught whichever it is) and its inputs for changes, and its outputs are copied
aside with a keyed digest. A few timed launches, drawn at random per request, copy them to slots
that are judged; the others to a decoy. After timing each checked launch's inputs are drawn again
and the user's reference says what its outputs should be, once its digest shows they were not
touched since. Every launch gets the same work before and after it, so which launches are checked
is never visible to the kernel: one that works on only some launches is caught, or timed at its
honest cost.

Before each launch every SM's shared memory, registers and every thread's local memory are
poisoned, the candidate's module variables are set back to their load image (entries.py), and
before each L2 flush the case's lines are set back to normal eviction priority (leftovers.py):
nothing an earlier kernel left on the SMs, in the module or pinned in L2 helps a launch.

Samples are queued in chunks behind a gate (a kernel that spins on a host flag), so no host
launch latency falls between a sample's events; with vendor baselines their chunks alternate
with the candidate's (each vendor's chunk, then the candidate's, and again), so drift hits all
alike. Without a candidate (a run's baseline when it has no initial kernel) only the vendors run.
"""

from __future__ import annotations

import hashlib
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..wire.protocol import TimingProtocol
from .buffers import CaseBuffers
from .device import Device, Wipes
from .launcher import CaseFailure, Launcher

VENDOR_LAUNCHES = 1 << 40  # each vendor's fresh inputs come from launch numbers of their own (+ index << 32)
_SCAN_WORDS = 3  # per launch: unwritten output elements, changed input elements, the outputs' digest


class Stopwatch:
    """Wall time per step of a case, recorded into ``CaseResult.phases``."""

    def __init__(self, into: dict):
        self.into, self.last = into, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.into[name] = round(now - self.last, 4)
        self.last = now


def new_seed() -> int:
    return int.from_bytes(os.urandom(6), "little")


@dataclass(frozen=True)
class LaunchPlan:
    """Which timed launches of a case are checked (0-based among the timed launches)."""

    warmup: int
    iterations: int
    checked: tuple[int, ...]
    case: str = ""  # the case's name: its launches' inputs are its own

    def launch_number(self, timed_index: int) -> int:
        """The launch's number within the case (warm-ups first): it names its fresh inputs."""
        return self.warmup + timed_index

    def inputs_key(self, seed: int, stream: int) -> int:
        """The key the device draws stream ``stream``'s inputs from: a one-way hash of the seed, the
        case and the stream. A kernel may work out the key of the inputs it was given (the device's
        generator is invertible), but from it neither the seed, nor the key of any other launch or
        case, nor so which launches are checked."""
        text = f"{seed}/{self.case}/{stream}".encode()
        return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def checked_count(proto: TimingProtocol) -> int:
    """Timed launches checked per case: the same however many are timed (the protocol's check)."""
    return max(1, min(proto.checked_launches, proto.iterations))


def draw_plan(seed: int, case_name: str, proto: TimingProtocol, iterations: int | None = None) -> LaunchPlan:
    """Draw the checked launches uniformly over the whole timed run (``iterations`` launches, the
    protocol's unless given), from the request's seed."""
    iterations = iterations or proto.iterations
    rng = np.random.default_rng([seed, zlib.crc32(case_name.encode())])
    count = min(checked_count(proto), iterations)
    checked = sorted(int(i) for i in rng.choice(iterations, size=count, replace=False))
    return LaunchPlan(warmup=proto.warmup, iterations=iterations, checked=tuple(checked), case=case_name)


@dataclass
class Timings:
    candidate: list[float]
    vendors: list[list[float]]  # in the order given
    gate_timeouts: dict[str, int]  # "candidate", "vendor 0", ...


class TimedRun:
    """Warm up and time one case's candidate (and vendor), with the launch scan.

    How many launches are timed is decided after the warm-ups (``TimingProtocol.timed_launches``
    of the candidate's median warm-up, or the first vendor's without one), and only then are the
    checked ones drawn among them: ``plan`` holds them once :meth:`run` has returned."""

    def __init__(self, gpu: Device, launcher: Launcher, leftovers: Wipes, buffers: CaseBuffers,
                 proto: TimingProtocol, seed: int, case_name: str, reset: Callable[[], None] | None = None):
        self.gpu, self.launcher, self.leftovers, self.buffers = gpu, launcher, leftovers, buffers
        self.proto, self.seed = proto, seed
        self.plan = LaunchPlan(warmup=proto.warmup, iterations=proto.iterations, checked=(), case=case_name)
        self.reset = reset  # the candidate's module variables and workspace, before each of its launches
        total = proto.warmup + proto.iterations  # the most launches: the scan's rows and digest keys
        self.scan_bytes = 8 * _SCAN_WORDS * total
        self.scan = gpu.alloc(self.scan_bytes)
        gpu.fill_async(int(self.scan.handle), self.scan_bytes, b"\0")
        # the keys of each launch's output digest, kept on the host: no kernel can forge a digest
        self.digest_keys = np.frombuffer(os.urandom(8 * total), dtype=np.uint64)
        self.decoy = checked_count(proto)  # the slot every launch that is not checked saves its outputs to
        buffers.ensure_slots(self.decoy + 1)
        buffers.slot_table()  # built (and uploaded, which waits on the stream) before any gate closes
        self.ranges = leftovers.range_table(buffers.allocations())  # demoted in L2 before each flush

    def close(self) -> None:
        self.scan.close(self.gpu.stream)
        self.ranges[0].close(self.gpu.stream)

    def run(self, candidate: Callable[[], None] | None, vendors: list[Callable[[], None]]) -> Timings:
        """Warm-ups of each, then the chunks interleaved; a vendor that fails stops being called."""
        runs: dict[str, Callable[[], None]] = {f"vendor {i}": vendor for i, vendor in enumerate(vendors)}
        if candidate is not None:
            runs["candidate"] = candidate
        pacing = "candidate" if candidate is not None else "vendor 0"  # its warm-ups say how many launches are timed
        warm = {name: [self._sample(name, run, i, timed=None, measure=name == pacing and bool(self.proto.timed_ms))
                       for i in range(self.plan.warmup)] for name, run in runs.items()}
        self.launcher.sync()
        self.plan = draw_plan(self.seed, self.plan.case, self.proto,
                              self.proto.timed_launches(warmup_ms([e for e in warm.get(pacing, []) if e])))
        samples: dict[str, list[float]] = {name: [] for name in runs}
        gate_timeouts = dict.fromkeys(runs, 0)
        chunk = max(1, self.proto.chunk)
        for first in range(0, self.plan.iterations, chunk):
            count = min(chunk, self.plan.iterations - first)
            for name in [n for n, run in runs.items() if getattr(run, "error", "")]:
                runs.pop(name)
            for name, run in runs.items():
                times, timed_out = self._chunk(name, run, first, count)
                samples[name].extend(times)
                gate_timeouts[name] += timed_out
        return Timings(samples.get("candidate", []), [samples[f"vendor {i}"] for i in range(len(vendors))],
                       gate_timeouts)

    def _chunk(self, name: str, run, first: int, count: int) -> tuple[list[float], bool]:
        if self.proto.gate:
            self.gpu.close_gate()
        events = []
        try:
            for i in range(first, first + count):
                events.append(self._sample(name, run, self.plan.launch_number(i), timed=i))
        finally:
            if self.proto.gate:
                self.gpu.open_gate()
        self.launcher.sync()
        return [(end - start) * 1000.0 for start, end in events], self.proto.gate and self.gpu.gate_timed_out()

    def _sample(self, name: str, run, launch: int, timed: int | None, measure: bool = False):
        """Poison shared memory, registers and local memory, restore the candidate's module, stage
        fresh inputs, (demote and flush the L2, events around) the run; for the candidate, then the
        launch scan of its inputs and outputs and its outputs set aside with their digest: the same
        work after every launch, so nothing after a launch tells whether it is checked. Events
        come back for a timed launch, and for a warm-up when ``measure``."""
        checked = name == "candidate" and timed is not None and timed in self.plan.checked
        # a checked launch's inputs are drawn like any other's: nothing in them tells it apart
        stream = launch if name == "candidate" else VENDOR_LAUNCHES + (int(name.split()[1]) << 32) + launch
        key = self.plan.inputs_key(self.seed, stream)
        self.leftovers.poison()  # first: the kernels between it and the launch use no shared memory
        if name == "candidate" and self.reset is not None:
            self.reset()  # before the flush: what the restore writes is not left in L2
        self.buffers.stage_fresh(key, stream)
        if timed is None:
            start = self.gpu.record_event() if measure else None
            run()
            end = self.gpu.record_event() if measure else None
        else:
            if self.proto.flush_l2:
                self.leftovers.demote_l2(self.ranges)  # no line kept past the flush by an evict_last hint
                self.gpu.flush_l2()
            start = self.gpu.record_event()
            run()
            end = self.gpu.record_event()
        if name == "candidate":
            words = int(self.scan.handle) + 8 * _SCAN_WORDS * launch
            self.buffers.scan_launch(key, stream, words, inputs=True)
            slot = self.plan.checked.index(timed) if checked else self.decoy
            self.buffers.save_outputs(slot, int(self.digest_keys[launch]), words + 16)
        return (start, end) if start is not None else None

    def verify_saved_outputs(self) -> None:
        """Raise if the outputs set aside from a checked launch changed before they were judged
        (their digest, keyed by a number only the host knows, no longer matches)."""
        words = self.gpu.download(int(self.scan.handle), self.scan_bytes).view(np.uint64).reshape(-1, _SCAN_WORDS)
        for slot, timed in enumerate(self.plan.checked):
            launch = self.plan.launch_number(timed)
            if self.buffers.digest_slot(slot, int(self.digest_keys[launch])) != int(words[launch, 2]):
                raise CaseFailure("guard_violation", f"the outputs set aside from timed launch {timed} were changed "
                                                     "by a later launch (memory outside the kernel's buffers)")

    def verify_scan(self) -> int:
        """Raise for the first launch that left outputs unwritten or changed an input; return the
        number of launches scanned."""
        words = self.gpu.download(int(self.scan.handle), self.scan_bytes).view(np.uint64)
        words = words.reshape(-1, _SCAN_WORDS)[:self.plan.warmup + self.plan.iterations]
        for launch, (unwritten, changed, _digest) in enumerate(words):
            where = _describe(launch, self.plan)
            if unwritten:
                raise CaseFailure("mismatch", f"{where} left {int(unwritten)} output elements unwritten")
            if changed:
                raise CaseFailure("input_modified", f"{where} changed {int(changed)} input elements")
        return len(words)


def warmup_ms(events: list[tuple]) -> float | None:
    """The median of the measured warm-ups, the first left out (it pays for loading the module)
    where there are others; None without any."""
    times = [end - start for start, end in (events[1:] if len(events) > 1 else events)]
    return float(np.median(times)) if times else None


def _describe(launch: int, plan: LaunchPlan) -> str:
    if launch < plan.warmup:
        return f"warm-up launch {launch}"
    return f"timed launch {launch - plan.warmup}"


def method(proto: TimingProtocol, checked: int, gate_timeouts: int, interleaved: str) -> str:
    text = "cuda-events"
    text += ", gated queue" if proto.gate else ", ungated"
    text += ", L2 flushed" if proto.flush_l2 else ", L2 warm"
    text += f", fresh inputs every launch, {checked} random launches checked"
    if interleaved:
        text += f", chunks interleaved with {interleaved}"
    if gate_timeouts:
        text += f", gate timed out in {gate_timeouts} chunk(s): host latency may be included"
    return text

