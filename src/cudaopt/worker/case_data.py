"""A case's data, generated once and kept: host input sets and reference outputs (byte-bounded
LRU caches), and device buffers reused between the requests of a sweep."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..wire.protocol import CaseSpec
from ..wire.signature import Signature
from .buffers import CaseBuffers, guard_size
from .device import Device
from .inputs import InputError, generate, shape_of
from .lru import Lru, host_share


def cache_key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def output_shapes(case: CaseSpec, signature: Signature) -> dict[str, tuple[int, ...]]:
    """Each output's shape, from the case's own scalars (never a tunable)."""
    missing = [a.name for a in signature.outputs if a.name not in case.outputs]
    if missing:
        raise InputError(f"case {case.name!r}: no output spec for {missing}")
    return {a.name: shape_of(case.outputs[a.name].shape, case.scalars, f"case {case.name!r} output {a.name!r}")
            for a in signature.outputs}


def check_order(sets: int) -> list[int]:
    """Input-set order: the near duplicate (set 2) right after its original (set 0)."""
    return [0, 2, 1, *range(3, sets)] if sets >= 3 else list(range(sets))


class HostSets:
    """Input sets per case, drawn on the host from the case's seed and kept."""

    def __init__(self):
        self._cache = Lru(limit=host_share(0.25))

    def get(self, case: CaseSpec, signature: Signature, n_sets: int):
        shapes = output_shapes(case, signature)
        inputs = {n: shape_of(i.shape, case.scalars, f"case {case.name!r} input {n!r}") for n, i in case.inputs.items()}
        key = cache_key(case.to_data(), n_sets, inputs, shapes, str(signature))
        sets = self._cache.get(key)
        if sets is None:
            sets = generate(case, signature, n_sets)
            self._cache.put(key, sets, sum(t.data.nbytes for s in sets for t in s.values()))
        return sets, shapes, key


class DeviceCases:
    """A case's device buffers (working buffers, input sets), kept between requests of a sweep.

    Uploading a large case's input sets for every configuration costs more than many of its
    kernels. Buffers are reused only after a candidate passed on them (a failing one may have
    scribbled anywhere), with fresh guard bands; a byte budget bounds what is kept.
    """

    def __init__(self, gpu: Device):
        self.gpu = gpu
        self.kept: OrderedDict[str, CaseBuffers] = OrderedDict()
        self._budget: int | None = None

    @property
    def budget(self) -> int:
        """45% of the device's memory (the answers keep 30%): enough for one case of KernelBench's
        size (the 4096 x 393216 softmax's 58 GB on a 141 GB GPU) to stay between the requests of
        a sweep. What a case needs beyond that is freed of these caches first (make_room)."""
        if self._budget is None:
            _free, total = self.gpu.memory_info()
            self._budget = int(total) * 45 // 100
        return self._budget

    @staticmethod
    def key_for(data_key: str, guards: bool) -> str:
        """What a case's buffers are kept under: its data, with or without guard bands."""
        return f"{data_key}/{guards}"

    def release_oldest(self, spare: str) -> bool:
        """Free the least recently kept buffers but ``spare``'s; False when there are none."""
        for key in self.kept:
            if key != spare:
                self.kept.pop(key).close()
                return True
        return False

    def take(self, key: str, signature: Signature, sets, shapes, case: CaseSpec, guards: bool) -> CaseBuffers:
        key = self.key_for(key, guards)
        buffers = self.kept.pop(key, None)
        if buffers is None:
            inits = {name: spec.init for name, spec in case.inputs.items()}
            buffers = CaseBuffers(self.gpu, signature, sets, shapes, inits=inits, guards=guards)
            buffers.key = key
        else:
            buffers.reset_guards()
        return buffers

    def give_back(self, buffers: CaseBuffers, keep: bool) -> None:
        """Keep ``buffers`` for the case's next request, the least recently kept freed beyond the
        budget. Buffers larger than the whole budget are freed at once: kept, they would push every
        other case's out and then themselves, and each request would upload every case again."""
        if not keep or buffers.device_bytes() > self.budget:
            buffers.close()
            return
        self.kept[buffers.key] = buffers
        while self.kept and sum(b.device_bytes() for b in self.kept.values()) > self.budget:
            self.kept.popitem(last=False)[1].close()


def case_bytes(inputs: list[int], outputs: list[tuple[int, int]], sets: int, checked: int, *, guards: bool,
               kept: bool = False, answered: bool = False) -> int:
    """Device bytes a case needs at its peak (``inputs``: bytes of each input; ``outputs``: elements
    and bytes per element of each output): its buffers unless kept (every input set and the working
    inputs, the working outputs and a copy per checked timed launch, guard bands around the working
    buffers: buffers.py), its float64 answers of every set unless cached, and one fresh input
    set's answer (answers.py). The worker makes room for it (runner.py); ``cudaopt check`` and
    every command before a worker compare it with the GPU's memory (preflight.py)."""
    elements = sum(count for count, _ in outputs)
    need = 8 * elements
    if not kept:
        out_bytes = [count * size for count, size in outputs]
        need += sum(inputs) * (sets + 1) + sum(out_bytes) * (1 + checked)
        need += 2 * sum(guard_size(n) for n in [*inputs, *out_bytes]) if guards else 0
    if not answered:
        need += 8 * elements * sets
    return need


def memory_text(size: int) -> str:
    """Bytes as people read them: GiB from 64 MiB up, MiB below (and a power of two for sizes no
    float holds, which an absurd shape can ask for)."""
    if size >= 2**1000:
        return f"about 2^{size.bit_length() - 1} bytes"
    return f"{size / 2**30:.3g} GiB" if size >= 2**26 else f"{size / 2**20:.3g} MiB"


@dataclass(frozen=True)
class Room:
    """What a case needs on the device at its peak and what was free for it once the caches had
    made room: an allocation that fails says how far off it was and who else may hold memory."""

    need: int
    free: int
    total: int

    def explain(self, error: str) -> str:
        """The out-of-memory ``error`` of an allocation made for this case, with the figures."""
        if "OUT_OF_MEMORY" not in error:
            return error
        others = (" once this worker had freed its caches: other processes on this GPU hold the rest "
                  "(nvidia-smi lists them)") if self.free < self.need else ""
        return (f"{error}; the case needs about {memory_text(self.need)} of GPU memory at its peak and "
                f"{memory_text(self.free)} of {memory_text(self.total)} were free{others}")


def make_room(gpu: Device, need: int, caches: list[tuple[Callable[..., bool], object]]) -> Room:
    """Free what ``caches`` hold, least recently used first and each in turn (``release(spare=key)``
    frees one entry but ``key``'s), until the device has ``need`` bytes free or nothing is left:
    the caches are sized to the GPU, and a large case must not fail for what they keep of others."""
    free, total = gpu.memory_info()
    while free < need and any(release(spare=spare) for release, spare in caches):
        free, total = gpu.memory_info()
    return Room(need, free, total)
