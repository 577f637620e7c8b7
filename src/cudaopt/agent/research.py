"""Offline research: a bundled knowledge base of CUDA optimisation guidance, ranked with BM25.

Each entry in ``cudaopt/knowledge/*.md`` summarises one topic in this project's words and names
the NVIDIA documentation section it summarises, so every hit carries its source.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Entry:
    name: str
    title: str
    source: str
    section: str
    tags: str
    text: str


@dataclass(frozen=True)
class Hit:
    entry: Entry
    score: float

    def to_dict(self) -> dict:
        e = self.entry
        return {"title": e.title, "source": e.source, "section": e.section, "text": e.text,
                "score": round(self.score, 3)}


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
    folder = resources.files("cudaopt").joinpath("knowledge")
    return tuple(
        parse_entry(item.name, item.read_text())
        for item in sorted(folder.iterdir(), key=lambda p: p.name)
        if item.name.endswith(".md")
    )


@functools.lru_cache(maxsize=1)
def _index():
    import bm25s

    corpus = [f"{e.title} {e.tags} {e.tags} {e.text}" for e in entries()]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
    return retriever


def search(query: str, k: int = 3) -> list[Hit]:
    """The ``k`` entries most relevant to ``query`` (fewer when fewer match at all)."""
    import bm25s

    if not query.strip():
        return []
    tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
    if not any(len(doc) for doc in tokens.ids):
        return []
    k = max(1, min(k, len(entries())))
    docs, scores = _index().retrieve(tokens, k=k, show_progress=False)
    return [Hit(entries()[int(i)], float(s)) for i, s in zip(docs[0], scores[0], strict=True) if s > 0]


def search_cuda_docs(query: str) -> dict:
    """Search the bundled CUDA optimisation guidance (coalescing, tiling, bank conflicts, register blocking,
    vectorised access, occupancy, shuffles, async copies, tensor cores, Hopper). Returns the best entries,
    each with the NVIDIA documentation section it summarises."""
    return {"query": query, "results": [hit.to_dict() for hit in search(query, k=3)]}
