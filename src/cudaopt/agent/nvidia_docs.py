"""NVIDIA documentation pages, fetched on first use, cached, and split into sections for the research search.

The bundled knowledge base summarises; these pages add the full text of the sections it cites when
the network allows. A fetch that fails is a notice, never an error: the search goes on without it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag

from ..paths import cache_root
from ..record.rundir import write_json

MAX_AGE = dt.timedelta(days=30)
TIMEOUT_S = 10
USER_AGENT = "cudaopt (CUDA optimisation guidance cache)"


@dataclass(frozen=True)
class Section:
    title: str
    url: str  # the page URL with the section's #anchor
    text: str


@dataclass(frozen=True)
class Page:
    url: str
    title: str
    fetched_at: str  # ISO 8601, UTC
    sections: tuple[Section, ...]

    def fresh(self, now: dt.datetime) -> bool:
        return now - dt.datetime.fromisoformat(self.fetched_at) < MAX_AGE


def cache_dir() -> Path:
    """``$CUDAOPT_CACHE_DIR/docs``, else ``$XDG_CACHE_HOME/cudaopt/docs`` (``~/.cache``): shared by every run."""
    return cache_root() / "docs"


def fetch_url(url: str) -> str:
    """Where ``url`` is fetched from: itself, or ``$CUDAOPT_DOCS_MIRROR/HOST/PATH`` (a local copy; tests use it)."""
    mirror = os.environ.get("CUDAOPT_DOCS_MIRROR")
    return f"{mirror.rstrip('/')}/{url.split('://', 1)[-1]}" if mirror else url


SKIP = frozenset({"script", "style", "nav", "header", "footer", "aside", "form", "noscript", "svg"})
SKIP_ROLES = frozenset({"navigation", "search", "banner", "contentinfo"})
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"})
INLINE = frozenset({"a", "abbr", "b", "code", "em", "i", "kbd", "samp", "small", "span", "strong", "sub", "sup", "var"})
HEADINGS = frozenset({"h1", "h2", "h3", "h4"})


class _Splitter(HTMLParser):
    """Text between consecutive h1-h4 headings, each heading with the nearest id as its anchor.

    Navigation, scripts and page chrome are skipped, so the site's menus do not pollute the sections.
    """

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.title: list[str] = []
        self.sections: list[tuple[str, str | None, list[str]]] = []
        self.heading: tuple[str, str | None, list[str]] | None = None
        self.skipping: tuple[str, int] | None = None  # the skipped element's tag and its nesting depth
        self.in_title = False
        self.anchor: str | None = None  # the id of the last element opened, until text follows it

    def handle_starttag(self, tag, attrs):
        if self.skipping:
            name, depth = self.skipping
            self.skipping = (name, depth + (tag == name))
            return
        a = dict(attrs)
        if tag not in VOID and (tag in SKIP or a.get("role") in SKIP_ROLES):
            self.skipping = (tag, 1)
            return
        if tag == "title":
            self.in_title = True
        elif tag in HEADINGS:
            self.heading = (tag, a.get("id") or self.anchor, [])
        if a.get("id"):
            self.anchor = a["id"]
        self._space(tag)

    def handle_endtag(self, tag):
        if self.skipping:
            name, depth = self.skipping
            self.skipping = None if (tag == name and depth == 1) else (name, depth - (tag == name))
            return
        if tag == "title":
            self.in_title = False
        elif self.heading and tag == self.heading[0]:
            _, anchor, parts = self.heading
            self.heading = None
            title = _clean(parts).rstrip(" ¶#")
            if title:
                self.sections.append((title, anchor, []))
        self._space(tag)

    def handle_data(self, data):
        if self.skipping:
            return
        if self.in_title:
            self.title.append(data)
        elif self.heading:
            self.heading[2].append(data)
        elif self.sections:
            self.sections[-1][2].append(data)
        if data.strip():
            self.anchor = None

    def _space(self, tag):
        if tag not in INLINE and self.sections and not self.heading:
            self.sections[-1][2].append(" ")


def _clean(parts: list[str]) -> str:
    return " ".join("".join(parts).split())


def split_sections(html: str, url: str) -> tuple[str, tuple[Section, ...]]:
    """The page's title and its sections (those with text), each with ``url#anchor``."""
    parser = _Splitter()
    parser.feed(html)
    parser.close()
    title = _clean(parser.title).rsplit(" — ", 1)[-1] or url  # Sphinx titles read "Chapter — Guide"
    sections = tuple(
        Section(name, f"{url}#{anchor}" if anchor else url, text)
        for name, anchor, parts in parser.sections
        if (text := _clean(parts))
    )
    return title, sections


def fetch(url: str) -> Page:
    """Download and split one page; raises ``urllib.error.URLError`` (or another ``OSError``) on failure."""
    source = fetch_url(url)
    request = urllib.request.Request(source, headers={"User-Agent": USER_AGENT})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        html = response.read().decode(response.headers.get_content_charset() or "utf-8", errors="replace")
        final = response.geturl()
    title, sections = split_sections(html, url if final == source else final)  # cite where a redirect led
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return Page(url=url, title=title, fetched_at=now, sections=sections)


def _path(url: str) -> Path:
    return cache_dir() / (re.sub(r"[^A-Za-z0-9.-]+", "_", url.split("://", 1)[-1]).strip("_") + ".json")


def _read(path: Path) -> Page | None:
    try:
        data = json.loads(path.read_text())
        dt.datetime.fromisoformat(data["fetched_at"])  # a date, or the file does not count
        return Page(url=data["url"], title=data["title"], fetched_at=data["fetched_at"],
                    sections=tuple(Section(**s) for s in data["sections"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable or from another version: fetched again when the network allows


def pages(urls: list[str], online: bool = True, refresh: bool = False) -> tuple[list[Page], list[str]]:
    """The pages of ``urls`` (fragments dropped) and every page already cached, plus notices of what failed.

    Online, a page missing from the cache or older than ``MAX_AGE`` (any page, with ``refresh``) is
    fetched; the first network failure stops fetching for this call, the cache still serves.
    """
    cached = {p.url: p for p in map(_read, sorted(cache_dir().glob("*.json"))) if p}
    wanted = list(dict.fromkeys([*(urldefrag(u).url for u in urls), *cached]))
    now = dt.datetime.now(dt.UTC)
    notices = []
    for url in wanted if online else []:
        if url in cached and cached[url].fresh(now) and not refresh:
            continue
        try:
            page = fetch(url)
        except (urllib.error.HTTPError, ValueError) as exc:  # this page only: a wrong or moved URL
            notices.append(f"{url}: not fetched ({exc})")
            continue
        except OSError as exc:
            reason = getattr(exc, "reason", None) or exc
            serving = f"the bundled entries and {len(cached)} cached pages" if cached else "the bundled entries only"
            notices.append(f"NVIDIA docs not reachable ({reason}); {serving} serve")
            break
        if not page.sections:
            notices.append(f"{url}: no sections found; not cached")
            continue
        try:
            write_json(_path(url), asdict(page))
        except OSError as exc:  # searched all the same, fetched again next time
            notices.append(f"{url}: not cached ({exc})")
        cached[url] = page
    return [cached[u] for u in wanted if u in cached], notices
