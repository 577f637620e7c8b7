"""``docs`` and ``doctor``: CUDA optimisation guidance and what this machine has, no experiment
needed (``cudaopt docs`` and ``cudaopt doctor``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..agent.nvidia_docs import Page, cache_dir
from ..agent.research import Hit, load_library
from ..doctor import Check, PeakRow, measure_peaks, run_checks
from ..errors import ExperimentError
from .arguments import check as check_arguments

ESSENTIAL = ("cuda-core", "NVRTC", "GPU")  # without these nothing can be measured


@dataclass(frozen=True)
class DocsAnswer:
    """What a documentation search found, the pages the cache holds, and what could not be fetched."""

    hits: list[Hit]
    pages: list[Page]
    notices: list[str]
    cache: Path


def docs(query: str | None = None, *, top: int = 3, online: bool = True, fetch: bool = False, refresh: bool = False,
         pages: Sequence[str] = ()) -> DocsAnswer:
    """Search CUDA optimisation guidance (``cudaopt docs``): the bundled entries and the NVIDIA pages
    they cite (and ``pages``), fetched once and cached for 30 days (``online`` False: the cache
    only; ``refresh``: fetch every page again). Every hit names its NVIDIA source. ``fetch`` fills
    the cache (no query needed)."""
    if isinstance(pages, str):
        raise ExperimentError("--page", "", f"{pages!r}: give a list of URLs, such as [{pages!r}]")
    check_arguments({"query": query, "top": top, "pages": list(pages)})
    if query is None and not fetch:
        raise ExperimentError("QUERY", "", "give a QUERY to search for, or --fetch")
    library = load_library(online=online, refresh=refresh, pages=pages)
    hits = library.search(query, k=top) if query is not None else []
    return DocsAnswer(hits=hits, pages=list(library.pages), notices=list(library.notices), cache=cache_dir())


@dataclass(frozen=True)
class DoctorReport:
    """What this machine has for cudaopt (each check with what to do when it is missing), and the
    GPU's peaks when they were measured."""

    checks: list[Check]
    peaks: list[PeakRow] = field(default_factory=list)
    peaks_cache: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the essentials are there: cuda-core, NVRTC and a GPU."""
        return all(c.ok for c in self.checks if c.name in ESSENTIAL)

    @property
    def missing(self) -> list[str]:
        """The essentials that are missing (without them nothing is measured, ``measure`` included)."""
        return [c.name for c in self.checks if c.name in ESSENTIAL and not c.ok]


def doctor(*, measure: bool = False, device: int = 0) -> DoctorReport:
    """Check the GPU, driver, CUDA, NVRTC, the CUDA header roots, the compile sandbox, cuda-core,
    Nsight Compute and the model's credentials (``cudaopt doctor``); with ``measure``, and the
    essentials there, measure the GPU's bandwidth and FP32/FP64 peaks (cached for the roofline)."""
    check_arguments({"device": device})
    found = DoctorReport(run_checks())
    if not measure or not found.ok:
        return found
    rows, path = measure_peaks(device)
    return DoctorReport(found.checks, rows, path)
