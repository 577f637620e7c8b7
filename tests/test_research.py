"""The bundled knowledge base, fetched NVIDIA pages, their BM25 ranking, `cudaopt docs`, and the research tool.

No test reaches the real network: pages come from a local http.server (``CUDAOPT_DOCS_MIRROR``), and
conftest points every other test at a closed port and an empty cache.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from cudaopt.agent import nvidia_docs
from cudaopt.agent.model import ModelSettings
from cudaopt.agent.research import (
    EXCERPT_CHARS,
    Library,
    entries,
    load_library,
    parse_entry,
    search_cuda_docs,
)
from cudaopt.cli import app
from cudaopt.optimize import Options, start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.record.files import ModelCall
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, answer


@pytest.mark.parametrize(
    "query,expected",
    [
        ("shared memory bank conflicts padding", "bank_conflicts.md"),
        ("coalesced global memory access stride", "coalescing.md"),
        ("tensor cores wmma half precision", "tensor_cores_wmma.md"),
        ("register blocking micro-tile outer product", "register_blocking.md"),
        ("occupancy registers __launch_bounds__", "occupancy.md"),
        ("warp shuffle reduction sum", "warp_shuffle_reduction.md"),
        ("cp.async double buffering pipeline", "async_copy.md"),
        ("float4 vectorized loads alignment", "vectorized_access.md"),
        ("hopper thread block clusters TMA", "hopper_specifics.md"),
    ],
)
def test_the_right_entry_ranks_first(query, expected):
    hits = Library(entries()).search(query)
    assert hits and hits[0].entry.name == expected
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


def test_every_entry_cites_nvidia_documentation():
    assert len(entries()) >= 12
    for e in entries():
        assert e.source.startswith(("https://docs.nvidia.com/", "https://developer.nvidia.com/")), e.name
        assert e.section and len(e.text) > 300


def test_nothing_relevant_gives_nothing():
    bundled = Library(entries())
    assert bundled.search("xyzzy plugh") == [] and bundled.search("   ") == []


def test_a_malformed_entry_is_named():
    with pytest.raises(ValueError, match="bad.md: header lacks"):
        parse_entry("bad.md", "---\ntitle: x\n---\ntext")


def test_cudaopt_docs_answers_offline_with_sources():
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["docs", "shared memory bank conflicts", "-k", "2",
                                                            "--offline"])
    assert result.exit_code == 0 and not result.stderr
    assert "Shared-memory bank conflicts and padding" in result.output
    assert "source: CUDA C++ Programming Guide" in result.output and "docs.nvidia.com" in result.output
    assert CliRunner().invoke(app, ["docs", "xyzzy", "--offline"]).exit_code == 1
    assert CliRunner().invoke(app, ["docs"]).exit_code == 2


def test_the_tool_result_carries_sources():
    result = search_cuda_docs("coalescing")
    assert result["results"][0]["source"].startswith("https://docs.nvidia.com/")


def unreachable(notices: list[str], rest: str = "only") -> bool:
    """One notice line, naming why and what serves instead."""
    pattern = rf"NVIDIA docs not reachable \(.*refused\); the bundled entries {rest} serve"
    return len(notices) == 1 and re.fullmatch(pattern, notices[0]) is not None


def run_with(tmp_path, script, research):
    with FakeOpenAI(script) as server:
        run, _ = start_or_resume(ExperimentArgs(config=str(SGEMM / "experiment.json")),
                                 ModelSettings(base_url=server.url), Budget(max_iterations=1),
                                 tmp_path / "results", ScriptedEvaluator(), Options(research=research))
    return run, server


def test_nvidia_research_gives_the_model_the_tool_and_records_what_it_returned(tmp_path):
    script = [{"tool_calls": [{"name": "search_cuda_docs", "arguments": {"query": "register blocking"}}]},
              answer("ok 0.5")]
    run, server = run_with(tmp_path, script, research=True)
    tools = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert tools == ["gpu_info", "search_cuda_docs"]
    assert "call search_cuda_docs" in server.requests[0]["messages"][0]["content"]
    call = ModelCall.model_validate(run.read_json("model-001.json"))
    result = call.tool_calls[0]["result"]
    assert result["results"][0]["title"].startswith("Register blocking")
    assert "efficient_gemm" in result["results"][0]["source"]
    assert unreachable(result["notices"])


def test_without_the_flag_the_tool_is_not_offered(tmp_path):
    _, server = run_with(tmp_path, [answer("ok 0.5")], research=False)
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == ["gpu_info"]


GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html"
PAGE = """<!DOCTYPE html>
<html><head><title>5. Performance Guidelines &mdash; CUDA C++ Programming Guide</title>
<script>var headings = "<h2>not a heading</h2>";</script><style>h2 { color: green }</style></head>
<body>
<nav class="wy-nav-side"><h2>Contents</h2><ul><li><a href="#shared-memory">Shared Memory</a></li></ul></nav>
<div role="navigation"><a href="index.html">Docs</a> &raquo; Guide</div>
<p>Text before any heading belongs to no section.</p>
<section id="performance-guidelines">
<h1>5. Performance Guidelines<a class="headerlink" href="#performance-guidelines" title="Link to this heading">¶</a></h1>
<p>Overall strategies for performance.</p>
<section id="maximize-memory-throughput">
<h2>5.3. Maximize Memory Throughput<a class="headerlink" href="#maximize-memory-throughput">#</a></h2>
<p>Minimise data transfers with low bandwidth; use <em>on-chip</em> memory.</p>
<section id="shared-memory">
<h3>5.3.2.3. Shared Memory</h3>
<p>Shared memory has 32 banks. A <code>xylophone</code> access pattern that maps many threads
of a warp to one bank causes bank conflicts and serialises the request.</p>
<pre>__shared__ float tile[32][33];</pre>
</section>
<section id="empty"><h3>5.3.2.4. Heading without text</h3></section>
<h3 id="long-section">5.3.2.5. A long section</h3>
<p>LONG</p>
</section></section>
<footer>Copyright NVIDIA Corporation</footer>
</body></html>
""".replace("LONG", "zeppelin occupancy words " * 300)


def test_a_page_splits_into_sections_at_its_headings():
    title, sections = nvidia_docs.split_sections(PAGE, GUIDE)
    assert title == "CUDA C++ Programming Guide"
    assert [(s.title, s.url.split("#")[1]) for s in sections] == [
        ("5. Performance Guidelines", "performance-guidelines"),  # the id of the enclosing <section>
        ("5.3. Maximize Memory Throughput", "maximize-memory-throughput"),
        ("5.3.2.3. Shared Memory", "shared-memory"),
        ("5.3.2.5. A long section", "long-section"),  # the heading's own id; the empty section is dropped
    ]
    assert sections[1].text == "Minimise data transfers with low bandwidth; use on-chip memory."
    assert "bank conflicts" in sections[2].text and "tile[32][33]" in sections[2].text
    text = " ".join(s.title + s.text for s in sections)
    assert not any(chrome in text for chrome in ("Contents", "not a heading", "green", "Docs", "Copyright", "before"))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """The cited NVIDIA pages on loopback: the guide is PAGE, the others a small page each; requests are kept."""
    root = tmp_path / "site"
    for url in {e.source for e in entries()}:
        html = PAGE if url == GUIDE else f"<title>{url}</title><h1 id='top'>Elsewhere</h1><p>Other advice.</p>"
        path = root / url.split("://", 1)[1]
        path = path / "index.html" if url.endswith("/") else path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html)
    requests: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_request(self, code="-", size="-"):
            requests.append(self.path)

        def log_message(self, fmt, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    monkeypatch.setenv("CUDAOPT_DOCS_MIRROR", f"http://127.0.0.1:{server.server_address[1]}")
    yield requests
    server.shutdown()
    server.server_close()


def test_pages_are_cached_and_fetched_again_only_when_stale_or_refreshed(site):
    pages, notices = nvidia_docs.pages([GUIDE + "#shared-memory", GUIDE])
    assert notices == [] and [p.url for p in pages] == [GUIDE]
    assert site == ["/docs.nvidia.com/cuda/cuda-c-programming-guide/index.html"]
    stored = json.loads((nvidia_docs.cache_dir() / "docs.nvidia.com_cuda_cuda-c-programming-guide_index.html.json")
                        .read_text())
    assert stored["url"] == GUIDE and stored["fetched_at"] and stored["sections"][2]["title"] == "5.3.2.3. Shared Memory"

    assert nvidia_docs.pages([GUIDE])[0] == pages and len(site) == 1  # fresh: from the cache
    nvidia_docs.pages([GUIDE], refresh=True)
    assert len(site) == 2

    path = nvidia_docs.cache_dir() / "docs.nvidia.com_cuda_cuda-c-programming-guide_index.html.json"
    stale = {**stored, "fetched_at": "2000-01-01T00:00:00+00:00"}
    path.write_text(json.dumps(stale))
    offline, _ = nvidia_docs.pages([GUIDE], online=False)
    assert len(site) == 2 and offline[0].fetched_at == stale["fetched_at"]  # offline: stale but served
    nvidia_docs.pages([], online=True)  # a cached page is kept fresh even when nobody names it
    assert len(site) == 3 and json.loads(path.read_text())["fetched_at"] != stale["fetched_at"]


def test_an_unreachable_site_leaves_a_notice_and_the_cached_pages(site, monkeypatch):
    nvidia_docs.pages([GUIDE])
    path = next(nvidia_docs.cache_dir().glob("*.json"))
    path.write_text(path.read_text().replace('"fetched_at": "2', '"fetched_at": "1'))  # stale
    monkeypatch.setenv("CUDAOPT_DOCS_MIRROR", "http://127.0.0.1:1")
    pages, notices = nvidia_docs.pages([GUIDE, "https://docs.nvidia.com/other.html"])
    assert [p.url for p in pages] == [GUIDE]
    assert unreachable(notices, r"and \d+ cached pages")


def test_an_unreadable_cache_file_counts_as_missing(site):
    nvidia_docs.pages([GUIDE])
    path = next(nvidia_docs.cache_dir().glob("*.json"))
    path.write_text(path.read_text().replace('"fetched_at": "', '"fetched_at": "x'))
    assert nvidia_docs.pages([GUIDE], online=False) == ([], [])
    nvidia_docs.pages([GUIDE])
    assert len(site) == 2 and nvidia_docs.pages([GUIDE], online=False)[0][0].url == GUIDE


def test_a_cache_that_cannot_be_written_is_a_notice(site, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CUDAOPT_CACHE_DIR", str(tmp_path / "file"))
    library = load_library(pages=[])
    assert any(n.startswith(f"{GUIDE}: not cached") for n in library.notices)
    assert library.search("xylophone", k=1)[0].entry.source == GUIDE + "#shared-memory"


def test_without_the_network_the_bundled_entries_answer():
    library = load_library()
    assert unreachable(library.notices)
    assert {e.origin for e in library.entries} == {"bundled"}
    result = CliRunner().invoke(app, ["docs", "shared memory bank conflicts", "-k", "1"])
    assert result.exit_code == 0 and "not reachable" in result.stderr
    assert "Shared-memory bank conflicts and padding  (bundled" in result.stdout


def test_one_ranking_mixes_bundled_entries_and_fetched_sections(site):
    library = load_library()
    assert library.notices == [] and {e.origin for e in library.entries} == {"bundled", "fetched"}
    hits = [hit.to_dict() for hit in library.search("shared memory bank conflicts", k=3)]
    assert {h["origin"] for h in hits} == {"bundled", "fetched"}
    fetched = next(h for h in hits if h["origin"] == "fetched")
    assert fetched["source"] == GUIDE + "#shared-memory"
    assert fetched["section"] == 'CUDA C++ Programming Guide, "5.3.2.3. Shared Memory"'
    bundled = next(h for h in hits if h["origin"] == "bundled")
    assert bundled["source"].startswith("https://docs.nvidia.com/") and bundled["section"]

    long = library.search("zeppelin", k=1)[0].to_dict()
    assert long["source"] == GUIDE + "#long-section"
    assert len(long["text"]) <= EXCERPT_CHARS + 2 and long["text"].endswith(" …")


def test_the_research_tool_searches_the_fetched_pages_too(site):
    result = search_cuda_docs("xylophone bank conflicts")
    assert result["results"][0]["source"] == GUIDE + "#shared-memory" and "notices" not in result


def test_cudaopt_docs_fetches_caches_and_searches_offline(site):
    runner = CliRunner(env={"COLUMNS": "200"})
    fetched = runner.invoke(app, ["docs", "--fetch"])
    assert fetched.exit_code == 0, fetched.output
    assert f"{GUIDE}: 4 sections, fetched " in fetched.stdout and "cache: " in fetched.stdout
    count = len(site)
    assert count == len({e.source for e in entries()})

    found = runner.invoke(app, ["docs", "xylophone", "--offline", "-k", "1"])
    assert found.exit_code == 0 and len(site) == count
    assert "5.3.2.3. Shared Memory  (fetched" in found.stdout
    assert f'source: CUDA C++ Programming Guide, "5.3.2.3. Shared Memory" — {GUIDE}#shared-memory' in found.stdout

    missing = runner.invoke(app, ["docs", "--fetch", "--page", "https://docs.nvidia.com/cuda/missing.html"])
    assert missing.exit_code == 1 and len(site) == count + 1
    assert "https://docs.nvidia.com/cuda/missing.html: not fetched (HTTP Error 404" in missing.stderr
