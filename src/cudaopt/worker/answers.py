"""The answer key: reference outputs, held where no candidate can read or change them.

Answers kept between requests (those of a case's input sets) live in device memory mapped with
the virtual memory API and made inaccessible (``PROT_NONE``) whenever they are not being
compared: a candidate kernel that reads or writes them faults, however it found the address.
A comparison waits for the stream to drain, opens the mapping, compares and closes it again,
so no candidate kernel ever runs while an answer is readable. Answers that live only for one
comparison (fresh inputs' references) are uploaded or computed after the candidate ran, and
zeroed and freed before anything else is queued.
"""

from __future__ import annotations

import hashlib
import math
from contextlib import contextmanager

import numpy as np

from ..wire.protocol import CaseSpec, OutputSpec
from ..wire.results import CheckInfo
from ..wire.signature import DTYPES, Signature
from .compare import compare, json_float
from .controls import ControlSet, negative_controls, runs
from .device import Device
from .inputs import to_numbers


class DeviceAnswer:
    """Reference values (float64) that are on the device right now; :meth:`scrub` ends that."""

    def __init__(self, gpu: Device, buffer, shape: tuple[int, ...]):
        self.gpu, self.buffer, self.shape = gpu, buffer, shape

    @classmethod
    def upload(cls, gpu: Device, values: np.ndarray) -> DeviceAnswer:
        data = np.ascontiguousarray(values, dtype=np.float64)
        buffer = gpu.alloc(data.nbytes)
        gpu.upload(int(buffer.handle), data)
        return cls(gpu, buffer, tuple(data.shape))

    @property
    def ptr(self) -> int:
        return int(self.buffer.handle)

    def to_host(self) -> np.ndarray:
        n = int(np.prod(self.shape, dtype=np.int64))
        return self.gpu.download(self.ptr, 8 * n).view(np.float64).reshape(self.shape)

    def scrub(self) -> None:
        self.gpu.scrub(self.buffer)


class LockedAnswer:
    """Reference values (float64) in device memory that no kernel can touch outside :meth:`opened`."""

    def __init__(self, gpu: Device, source: np.ndarray | DeviceAnswer):
        self.gpu = gpu
        self.shape = tuple(source.shape)
        self.nbytes = 8 * int(np.prod(self.shape, dtype=np.int64))
        self.memory = gpu.lock_memory(self.nbytes)
        self.ptr, self.size = self.memory.ptr, self.memory.size
        with self.opened():
            if isinstance(source, DeviceAnswer):
                gpu.copy_async(self.ptr, source.ptr, self.nbytes)
                gpu.stream.sync()
            else:
                gpu.upload(self.ptr, np.ascontiguousarray(source, dtype=np.float64))

    @contextmanager
    def opened(self):
        """Readable for the duration: the stream is drained first, and closed again after."""
        self.gpu.stream.sync()
        self.memory.set_readable(True)
        try:
            yield self.ptr
            self.gpu.stream.sync()
        finally:
            self.memory.set_readable(False)

    def to_host(self) -> np.ndarray:
        with self.opened():
            return self.gpu.download(self.ptr, self.nbytes).view(np.float64).reshape(self.shape)

    def close(self) -> None:
        self.memory.free()


Answer = np.ndarray | DeviceAnswer | LockedAnswer


def close_answers(answers: list[dict[str, LockedAnswer]]) -> None:
    for answer in answers:
        for value in answer.values():
            value.close()


class LockedValues:
    """:class:`~.controls.Values` of a locked answer, read while it is opened: at flat indices (one
    copy per contiguous run of them) or whole. Every host copy is kept until :meth:`zero`."""

    def __init__(self, answer: LockedAnswer):
        self.answer, self.shape = answer, answer.shape
        self.copies: list[np.ndarray] = []
        self._at: dict[bytes, np.ndarray] = {}  # the controls read the same sample for every trivial output
        self._all: np.ndarray | None = None

    def at(self, index: np.ndarray) -> np.ndarray:
        key = hashlib.blake2b(np.ascontiguousarray(index), digest_size=16).digest()
        if key not in self._at:
            out = self._kept(np.empty(index.size, dtype=np.float64))
            with self.answer.opened() as ptr:
                done = 0
                for first, end in runs(index):
                    raw = self.answer.gpu.download(ptr + 8 * first, 8 * (end - first))
                    out[done:done + end - first] = raw.view(np.float64)
                    raw.fill(0)
                    done += end - first
            self._at[key] = out
        return self._at[key]

    def all(self) -> np.ndarray:
        if self._all is None:
            self._all = self._kept(self.answer.to_host().reshape(-1))
        return self._all

    def _kept(self, values: np.ndarray) -> np.ndarray:
        self.copies.append(values)
        return values

    def zero(self) -> None:
        for values in self.copies:
            values.fill(0)


def answer_controls(case: CaseSpec, signature: Signature, host_sets: list, answers: list[dict[str, LockedAnswer]]):
    """The negative controls (controls.py) of a case's input sets, read from the locked answers
    before any candidate of the case runs: a sample of each, all of one only for a trivial output
    that passed its sample (KernelBench's softmax has 39 GB of answers); every host copy zeroed
    when they are done."""
    views = [{name: LockedValues(answer) for name, answer in by_output.items()} for by_output in answers]
    try:
        sets = [ControlSet({n: (t.data, t.dtype) for n, t in host_sets[s].items()}, views[s])
                for s in range(len(views))]
        near_duplicate = {frozenset((0, 2))} if len(sets) >= 3 else set()  # inputs.py: set 2 repeats set 0
        return negative_controls(case, signature, sets, near_duplicate)
    finally:
        for by_output in views:
            for values in by_output.values():
                values.zero()


# A failed comparison's details come from the host (an independent second implementation of the
# element rule) only when the output is at most this large: copying a larger one back and holding
# it to the reference on the CPU takes seconds to minutes (KernelBench's 4096 x 393216 softmax:
# 6.4 GB of output, 12.9 GB of answer). Beyond it the device's own counts say everything.
HOST_DETAILS_BYTES = 64 << 20


def check_output(gpu: Device, name: str, dtype: str, out_ptr: int, out_bytes: int, shape: tuple[int, ...],
                 tol: OutputSpec, answer: Answer, input_set: int, phase: str, launch: int | None = None,
                 host_details_bytes: int = HOST_DETAILS_BYTES) -> CheckInfo:
    """Compare one output buffer with its reference on the device. A failure's details come from
    the host when the output is at most ``host_details_bytes``, else from the device's counts and
    the two values at the first bad element: the same fields either way, in bounded time.

    A host answer is uploaded for the comparison and scrubbed after it; a device answer is the
    caller's to scrub; a locked answer is opened for the comparison only.
    """
    n = int(np.prod(shape, dtype=np.int64))
    if isinstance(answer, LockedAnswer):
        with answer.opened() as ptr:
            stats = gpu.compare(out_ptr, ptr, n, dtype, tol.rtol, tol.atol)
    else:
        device = answer if isinstance(answer, DeviceAnswer) else DeviceAnswer.upload(gpu, answer)
        try:
            stats = gpu.compare(out_ptr, device.ptr, n, dtype, tol.rtol, tol.atol)
        finally:
            if device is not answer:
                device.scrub()
    if stats["bad"] and out_bytes <= host_details_bytes:
        raw = gpu.download(out_ptr, out_bytes).view(DTYPES[dtype].numpy).reshape(shape)
        expected = answer if isinstance(answer, np.ndarray) else answer.to_host()
        info = compare(name, raw, expected, dtype, tol.rtol, tol.atol, input_set, phase)
        info.launch = launch
        return info
    info = CheckInfo(
        output=name, input_set=input_set, phase=phase, ok=not stats["bad"], elements=n, mismatches=stats["bad"],
        unwritten=stats["unwritten"], nan_count=stats["nan"], inf_count=stats["inf"], max_abs_error=stats["max_abs"],
        max_rel_error=stats["max_rel"], rel_l2_error=_rel_l2(stats["err_sq"], stats["ref_sq"]), launch=launch,
    )
    if stats["bad"]:
        first = stats["first_bad"]
        info.first_bad_index = [int(i) for i in np.unravel_index(first, shape)] if shape else []
        info.actual = json_float(element(gpu, out_ptr, first, dtype))
        info.expected = json_float(expected_at(gpu, answer, first))
    return info


def element(gpu: Device, ptr: int, index: int, dtype: str) -> float:
    """Element ``index`` of a device array of ``dtype``, as a number: one element copied back."""
    info = DTYPES[dtype]
    raw = gpu.download(ptr + index * info.itemsize, info.itemsize).view(info.numpy)
    return float(to_numbers(raw, dtype)[0])


def expected_at(gpu: Device, answer: Answer, index: int) -> float:
    """The reference's value at flat ``index``: one float64 copied back (a locked answer opened for it)."""
    if isinstance(answer, np.ndarray):
        return float(answer.flat[index])
    if isinstance(answer, LockedAnswer):
        with answer.opened() as ptr:
            return element(gpu, ptr, index, "float64")
    return element(gpu, answer.ptr, index, "float64")


def _rel_l2(err_sq: float, ref_sq: float) -> float:
    return math.sqrt(err_sq / ref_sq) if ref_sq > 0 else math.sqrt(err_sq)
