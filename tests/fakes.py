"""The fake worker (fake_worker.py) as tests drive it: its command, batches of requests for it, and
its trace (``CUDAOPT_FAKE_TRACE``): when each request ran, on which GPU."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from cudaopt.wire.protocol import Timeouts

FAKE = [sys.executable, str(Path(__file__).with_name("fake_worker.py"))]


def batch(experiment, entries: list[str], **defines) -> list:
    """One request per entry (``sleep:MS`` sleeps MS milliseconds), each with its own kernel, ids r0, r1, ..."""
    out = []
    for i, entry in enumerate(entries):
        name, _, ms = entry.partition(":")
        extra = {"MS": int(ms)} if ms else {}
        out.append(experiment.request(f"// {i}", entry=name, defines={"I": i, **extra, **defines}, request_id=f"r{i}",
                                      timeouts=Timeouts(compile_s=5, check_s=1, timing_s=5)))
    return out


@dataclass
class Span:
    gpu: str
    start: float
    end: float


def intervals(path: Path) -> list[Span]:
    """One span per request, from its start and end lines (a request that never ended has none)."""
    open_at: dict[str, float] = {}
    spans = []
    for line in path.read_text().splitlines():
        gpu, what, stamp = line.split()
        if what == "start":
            open_at[gpu] = float(stamp)
        elif gpu in open_at:
            spans.append(Span(gpu, open_at.pop(gpu), float(stamp)))
    return spans


def one_at_a_time(spans: list[Span]) -> bool:
    """No GPU ran two requests at once."""
    for gpu in {s.gpu for s in spans}:
        mine = sorted((s for s in spans if s.gpu == gpu), key=lambda s: s.start)
        if any(a.end > b.start for a, b in zip(mine, mine[1:])):
            return False
    return True
