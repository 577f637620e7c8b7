"""The documentation a new user reads first: every relative link and ``#anchor`` in README.md and
docs/*.md resolves (anchors by GitHub's rules for heading ids), and the README's command table
lists exactly the commands the CLI has, each with every option it takes and no other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.main import get_command

from cudaopt.cli import app
from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, line) of the file's lines outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's id for a heading: its rendered text (code spans, links and emphasis as text),
    lower-cased, punctuation and symbols dropped (``-`` and ``_`` kept), spaces as ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("**", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The ids of the file's headings, a repeated one with GitHub's ``-1``, ``-2`` suffixes."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link and image outside code."""
    found = []
    for number, line in prose(path):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            found.append((number, target))
    return found


def test_the_slugs_follow_github():
    assert slug("Vendor baseline and measured peaks") == "vendor-baseline-and-measured-peaks"
    assert slug("Harness (`benchmarks/bench_harness.py`)") == "harness-benchmarksbench_harnesspy"
    assert slug("`cudaopt evaluate` on the example") == "cudaopt-evaluate-on-the-example"
    assert slug("Shape classes: a winner per class") == "shape-classes-a-winner-per-class"
    assert slug("SGEMM × cuBLAS, 4096³") == "sgemm--cublas-4096³"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(doc):
    broken = []
    for number, target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (doc.parent / file).resolve() if file else doc
        if not resolved.exists():
            broken.append(f"{doc.name}:{number}: {target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{doc.name}:{number}: {target}: no heading #{anchor} in {resolved.name}")
    assert not broken, "\n".join(broken)


def cli_commands() -> set[str]:
    def walk(group, path):
        for name, sub in group.commands.items():
            if getattr(sub, "hidden", False):
                continue
            if hasattr(sub, "commands"):
                yield from walk(sub, [*path, name])
            else:
                yield " ".join([*path, name])

    return set(walk(get_command(app), []))


def readme_commands() -> set[str]:
    """The commands the README's table names: in each row's first cell, the words after ``cudaopt``
    up to the first argument or option."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    found = set()
    for row in table.splitlines():
        if not row.startswith("| `cudaopt"):
            continue
        first = re.split(r"(?<!\\)\|", row)[1]
        for usage in re.findall(r"`cudaopt ([^`]*)`", first):
            words = []
            for word in usage.split():
                if not re.fullmatch(r"[a-z][a-z-]*", word):
                    break
                words.append(word)
            found.add(" ".join(words))
    return found


def test_the_readme_command_table_lists_exactly_the_cli_s_commands():
    listed, real = readme_commands(), cli_commands()
    assert listed == real, f"missing from the README: {sorted(real - listed)}; not commands: {sorted(listed - real)}"


EXPERIMENT_FLAGS = {"--config", "--description", "--signature", "--reference", "--initial-kernel", "--input-cases"}


def readme_usages() -> dict[str, set[str]]:
    """The options each command's row of the README's table names (``experiment flags`` standing for
    the six experiment options), every usage of a row together."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    found: dict[str, set[str]] = {}
    for row in table.splitlines():
        if not row.startswith("| `cudaopt"):
            continue
        for usage in re.findall(r"`cudaopt ([^`]*)`", re.split(r"(?<!\\)\|", row)[1]):
            name = " ".join(re.match(r"((?:[a-z][a-z-]* ?)+)", usage).group(1).split())
            named = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", usage))
            if "experiment flags" in usage:
                named |= EXPERIMENT_FLAGS
            found.setdefault(name, set()).update(named)
    return found


def cli_options() -> dict[str, list[tuple[str, ...]]]:
    """Each command's options, an option as all of its names (``--online``/``--offline`` together)."""
    def walk(group, path):
        for name, sub in group.commands.items():
            if hasattr(sub, "commands"):
                yield from walk(sub, [*path, name])
            else:
                yield " ".join([*path, name]), [tuple(o for o in (*p.opts, *p.secondary_opts) if o.startswith("-"))
                                                for p in sub.params]

    return {name: [names for names in params if names and "--help" not in names]
            for name, params in walk(get_command(app), [])}


def test_the_readme_command_table_names_every_option_and_only_real_ones():
    listed, real = readme_usages(), cli_options()
    for command, options in real.items():
        names = {n for option in options for n in option}
        assert listed[command] <= names, f"README: cudaopt {command}: not options: {sorted(listed[command] - names)}"
        missing = [option[0] for option in options if not set(option) & listed[command]]
        assert not missing, f"README: cudaopt {command}: options missing from its row: {missing}"
