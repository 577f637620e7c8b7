"""A byte-bounded LRU cache, for what a worker keeps between requests: host input sets, locked
reference outputs, and (:class:`CompileCache`) the cubins it compiled."""

from __future__ import annotations

import os
from collections import OrderedDict

from ..compilekit.compiler import Compiled

CACHE_BYTES = 4 << 30


def host_memory_bytes() -> int:
    """Physical memory of this machine (0 where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def host_share(fraction: float) -> int:
    """A host cache's budget: ``fraction`` of this machine's memory, never less than :data:`CACHE_BYTES`.

    Budgets (here and on the device) scale with the machine so that a large case (KernelBench's
    4096 x 393216 softmax: 19 GB of input sets, 39 GB of float64 answers) is kept between the
    requests of a sweep where it fits, instead of drawn, uploaded and answered again per candidate.
    """
    return max(CACHE_BYTES, int(host_memory_bytes() * fraction))


class Lru:
    """A byte-bounded LRU cache; ``on_evict`` releases what an entry holds."""

    def __init__(self, limit: int = CACHE_BYTES, on_evict=lambda value: None):
        self.limit, self.used, self.items, self.on_evict = limit, 0, OrderedDict(), on_evict

    def get(self, key):
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key][0]
        return None

    def put(self, key, value, nbytes: int) -> None:
        self.items[key] = (value, nbytes)
        self.used += nbytes
        while self.used > self.limit and len(self.items) > 1:
            _, (old, size) = self.items.popitem(last=False)
            self.used -= size
            self.on_evict(old)

    def evict_oldest(self, spare=None) -> bool:
        """Evict the least recently used entry but ``spare``'s; False when there is none."""
        for key in self.items:
            if key != spare:
                value, size = self.items.pop(key)
                self.used -= size
                self.on_evict(value)
                return True
        return False


class CompileCache:
    """Compilations a worker has made, by source, defines and architecture, for requests that name
    the same kernel again (a guard's or a replay's interleaved pairs, a resumed run).

    What is kept is the cubin's bytes, never a loaded module: each hit loads a fresh one, so no
    request sees the __device__ globals an earlier request's launches left behind.
    """

    def __init__(self, limit_bytes: int = 64 << 20):
        self._kept = Lru(limit_bytes)  # key -> (cubin bytes, the first compile's report)

    def __contains__(self, key: str) -> bool:
        return key in self._kept.items

    def get(self, key: str) -> Compiled | None:
        kept = self._kept.get(key)
        if kept is None:
            return None
        code, info = kept
        from cuda.core import ObjectCode

        return Compiled(cubin=ObjectCode.from_cubin(code), info=info.model_copy(update={"cached": True}))

    def put(self, key: str, compiled: Compiled) -> None:
        if key not in self:
            code = bytes(compiled.cubin.code)
            self._kept.put(key, (code, compiled.info.model_copy()), len(code))
