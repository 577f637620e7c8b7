"""``cudaopt docs`` and ``doctor``: guidance and the machine, no experiment needed."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from .. import api
from .app import EXIT_FAILED, app, command, console, say
from .render_tools import doctor_table, peaks_table


@app.command()
@command()
def docs(
    query: Annotated[str | None, typer.Argument(metavar="QUERY", help="What to look up, e.g. 'shared memory bank "
                                                                      "conflicts'.")] = None,
    top: Annotated[int, typer.Option("--top", "-k", help="How many entries to show.")] = 3,
    online: Annotated[bool, typer.Option("--online/--offline", help="--online: fetch the NVIDIA pages missing from "
                                         "the cache or older than 30 days (when that fails: a notice, and the "
                                         "bundled entries and cached pages are searched); --offline: no network, the "
                                         "bundled entries and cached pages only.")] = True,
    fetch: Annotated[bool, typer.Option("--fetch", help="Fill the page cache now and list what it holds "
                                        "(no QUERY needed); exit 1 if a page could not be fetched.")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Fetch every page again, however recent.")] = False,
    page: Annotated[list[str] | None, typer.Option("--page", help="Another documentation page (URL) to fetch, "
                                                      "cache and search from now on; repeatable.")] = None,
) -> None:
    """Search CUDA optimisation guidance: the bundled entries and the NVIDIA pages they cite (cached).

    Every hit names its source: a bundled entry the NVIDIA section it summarises, a fetched section its URL.
    """
    answer = api.docs(query, top=top, online=online, fetch=fetch, refresh=refresh, pages=page or ())
    for notice in answer.notices:
        say(console(stderr=True), notice)
    out = console()
    if fetch:
        for p in answer.pages:
            say(out, f"{p.url}: {len(p.sections)} sections, fetched {p.fetched_at}")
        say(out, f"cache: {answer.cache}")
        if answer.notices:
            raise typer.Exit(EXIT_FAILED)
    if query is None:
        return
    if not answer.hits:
        say(out, f"nothing matches {query!r}")
        raise typer.Exit(EXIT_FAILED)
    for hit in answer.hits:
        e = hit.entry
        out.print(f"[bold]{escape(e.title)}[/]  ({e.origin}, score {hit.score:.2f})", highlight=False)
        say(out, f"source: {e.section} — {e.source}")
        out.print(hit.excerpt, highlight=False, markup=False)
        out.print()


@app.command()
@command()
def doctor(
    measure: Annotated[bool, typer.Option("--measure", help="Measure the GPU's memory bandwidth and FP32/FP64 FMA "
                                          "peaks now (cached for the roofline) and show them beside the spec.")] = False,
    device: Annotated[int, typer.Option(help="GPU ordinal (for --measure).")] = 0,
) -> None:
    """Report the GPU, driver, CUDA, NVRTC, the CUDA header roots, the compile sandbox, cuda-core, ncu and
    model credentials."""
    found = api.doctor(measure=measure, device=device)
    console().print(doctor_table(found.checks))
    if not found.ok:
        if measure:
            say(console(stderr=True), f"--measure: nothing measured: missing {', '.join(found.missing)} (the table "
                                      "says what to do)")
        raise typer.Exit(EXIT_FAILED)
    if found.peaks:
        console().print(peaks_table(found.peaks))
        say(console(), f"cached in {found.peaks_cache}")
