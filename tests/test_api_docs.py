"""Every example of docs/api.md runs, in order, as a notebook runs them, on a fake GPU that runs the
real harness on the CPU (tests/fake_pool.py): the API a user reads about is the API there is."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.fake_pool import FakePool

PAGE = ROOT / "docs" / "api.md"
BLOCK = re.compile(r"^```(\w+)(?: ([^\n]+))?\n(.*?)^```", re.M | re.S)
COMMANDS = ("check", "evaluate", "optimize", "verify", "replay", "report", "export", "guard_record", "guard_check",
            "audit", "import_kernelbench", "fast_p", "docs", "doctor")


def blocks() -> list[tuple[str, str | None, str]]:
    """(language, file name or None, text) of every fenced block, in page order."""
    return [(lang, name, text) for lang, name, text in BLOCK.findall(PAGE.read_text())]


def examples() -> list[str]:
    return [text for lang, name, text in blocks() if lang == "python" and not name]


def test_the_page_opens_with_a_ten_line_example_from_a_torch_function_to_a_checked_kernel():
    first = examples()[0]
    lines = [line for line in first.splitlines() if line.strip()]
    assert len(lines) <= 10 and "import torch" in first and "api.experiment(" in first and "api.evaluate(" in first
    assert PAGE.read_text().index(first) < PAGE.read_text().index("| function |")


def test_every_command_has_a_function_with_an_example():
    code = "\n".join(examples())
    table = PAGE.read_text()
    for name in COMMANDS:
        assert f"api.{name}(" in code, f"docs/api.md has no example of api.{name}"
        assert f"| `api.{name}(" in table, f"docs/api.md's table has no api.{name}"


def test_every_example_runs_on_a_fake_gpu(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    from cudaopt.pool import pools

    fake = FakePool({"relu": lambda x, n: {"y": np.maximum(x, 0)}})
    monkeypatch.setattr(pools, "open_pool", lambda devices, ray=None, log_dir=None: fake)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    for lang, name, text in blocks():
        if name:
            Path(name).write_text(text)
    namespace: dict = {}
    for number, text in enumerate(examples(), start=1):
        cell = Path(f"example-{number}.py")  # a file, as a notebook keeps its cells: a reference's source is read
        cell.write_text(text)
        exec(compile(text, str(cell.resolve()), "exec"), namespace)  # the page's own code
    assert namespace["result"].candidate.ok
    assert namespace["outcome"].passed and namespace["recorded"].baseline is not None
    assert namespace["checked"].passed and Path("guard.md").is_file()
    assert Path("native/relu.cu").is_file() and Path("ops/relu.py").is_file()
    assert (namespace["run"].path / "experiment" / "experiment.json").is_file()  # replayable: the files kept
    assert [e.status for e in namespace["audited"].report.entries] == ["ok", "ok"]
    assert "ok" in capsys.readouterr().out
