"""A byte-bounded LRU cache, for what a worker keeps between requests: host input sets, locked
reference outputs, compiled cubins."""

from __future__ import annotations

from collections import OrderedDict

CACHE_BYTES = 4 << 30


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
