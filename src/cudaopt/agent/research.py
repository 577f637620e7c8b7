"""Research: CUDA optimisation guidance ranked with BM25, every hit with its NVIDIA source.

Two kinds of entries share one index. Bundled entries (``cudaopt/knowledge/*.md``) summarise one
topic each in this project's words, name the NVIDIA documentation section they summarise, and work
offline. Fetched entries are the sections of the NVIDIA pages the bundled ones cite (and of any
other page the user adds), downloaded on first use and cached (:mod:`.nvidia_docs`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from . import nvidia_docs

EXCERPT_CHARS = 1500  # a fetched section can run to pages; this is enough to act on and cheap in tokens


@dataclass(frozen=True)
class Entry:
    name: str
    title: str
    source: str
    section: str
    tags: str
    text: str
    origin: str = "bundled"  # or "fetched"


@dataclass(frozen=True)
class Hit:
    entry: Entry
    score: float

    @property
    def excerpt(self) -> str:
        text = self.entry.text
        return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS].rsplit(" ", 1)[0] + " …"

    def to_dict(self) -> dict:
        e = self.entry
        return {"title": e.title, "origin": e.origin, "source": e.source, "section": e.section,
                "text": self.excerpt, "score": round(self.score, 3)}


def parse_entry(name: str, text: str) -> Entry:
    """An entry: a ``---`` header of ``key: value`` lines (title, source, section, tags), then the text."""
    if not text.startswith("---\n"):
        raise ValueError(f"{name}: missing the --- header")
    header, _, body = text[4:].partition("\n---\n")
    fields = dict(line.split(": ", 1) for line in header.splitlines() if ": " in line)
    missing = {"title", "source", "section", "tags"} - set(fields)
    if missing:
        raise ValueError(f"{name}: header lacks {sorted(missing)}")
    return Entry(name=name, text=" ".join(body.split()), **{k: fields[k] for k in ("title", "source", "section", "tags")})


@functools.lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    """The bundled entries."""
    folder = resources.files("cudaopt").joinpath("knowledge")
    return tuple(
        parse_entry(item.name, item.read_text())
        for item in sorted(folder.iterdir(), key=lambda p: p.name)
        if item.name.endswith(".md")
    )


class Library:
    """Entries in one BM25 index, with the notices of what could not be fetched for it."""

    def __init__(self, items: Sequence[Entry], pages: Sequence[nvidia_docs.Page] = (), notices: Sequence[str] = ()):
        import bm25s

        self.entries = tuple(items)
        self.pages = list(pages)
        self.notices = list(notices)
        corpus = [f"{e.title} {e.tags} {e.tags} {e.text}" for e in self.entries]
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The ``k`` entries most relevant to ``query`` (fewer when fewer match at all)."""
        import bm25s

        if not query.strip():
            return []
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not any(len(doc) for doc in tokens.ids):
            return []
        k = max(1, min(k, len(self.entries)))
        docs, scores = self.retriever.retrieve(tokens, k=k, show_progress=False)
        return [Hit(self.entries[int(i)], float(s)) for i, s in zip(docs[0], scores[0], strict=True) if s > 0]


def load_library(online: bool = True, refresh: bool = False, pages: Sequence[str] = ()) -> Library:
    """The bundled entries plus the sections of the pages they cite, of ``pages`` and of any page cached before."""
    found, notices = nvidia_docs.pages([*(e.source for e in entries()), *pages], online=online, refresh=refresh)
    fetched = [Entry(name=s.url, title=s.title, source=s.url, section=f'{page.title}, "{s.title}"', tags="",
                     text=s.text, origin="fetched")
               for page in found for s in page.sections]
    return Library([*entries(), *fetched], found, notices)


@functools.lru_cache(maxsize=1)
def default_library() -> Library:
    """What the research tool searches: built once per process, so the network is tried at most once."""
    return load_library()


def search_cuda_docs(query: str) -> dict:
    """Search CUDA optimisation guidance (coalescing, tiling, bank conflicts, register blocking, vectorised
    access, occupancy, shuffles, async copies, tensor cores, Hopper): bundled summaries and the NVIDIA
    documentation sections they cite. Returns the best matches, each with its NVIDIA source (section and URL)."""
    library = default_library()
    result = {"query": query, "results": [hit.to_dict() for hit in library.search(query, k=3)]}
    if library.notices:
        result["notices"] = library.notices
    return result
