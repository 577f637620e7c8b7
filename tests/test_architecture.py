"""The layers of docs/architecture.md, checked: nothing imports upward, no import cycles,
and the worker side (harness/) imports nothing of cudaopt outside itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "cudaopt"

# Lowest first. A module may import from its own layer or any layer below it (docs/architecture.md).
LAYERS = [
    {"wire"},
    {"harness"},
    {"errors", "paths", "config", "evaluation", "insight", "doctor"},
    {"checks"},
    {"experiment"},
    {"preflight", "cpu_controls", "evaluate", "record"},
    {"agent", "report", "sanitize", "shapes", "kernelbench", "exporter"},
    {"strategies", "verify", "replay", "guard"},
    {"optimize", "render", "audit", "api"},
    {"cli"},
    {"__main__"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str:
    """The layer unit a module belongs to: its package under cudaopt, or the module itself."""
    return module.split(".")[1] if module.count(".") >= 1 else module


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every cudaopt module ``path`` imports, at the top or inside a function."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("cudaopt")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("cudaopt"):
                found.add(target)
                # "from . import agent" names a module, not an attribute
                found |= {f"{target}.{a.name}" for a in node.names
                          if (SRC.parent / Path(*f"{target}.{a.name}".split("."))).with_suffix(".py").is_file()}
    return found - {module}


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def test_every_unit_has_a_layer():
    units = {unit_of(m) for m in MODULES if m != "cudaopt"}
    assert units <= set(RANK), f"add to LAYERS (and docs/architecture.md): {sorted(units - set(RANK))}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "cudaopt"))
def test_nothing_imports_upward(module):
    mine = RANK[unit_of(module)]
    upward = sorted(t for t in imports(MODULES[module]) if t != "cudaopt" and RANK[unit_of(t)] > mine)
    assert not upward, f"{module} (layer {mine}) imports from above: {upward}"


def test_the_worker_side_imports_only_itself():
    for module, path in MODULES.items():
        if unit_of(module) == "harness":
            outside = sorted(t for t in imports(path) if unit_of(t) not in ("harness", "wire"))
            assert not outside, f"{module} imports {outside}"


def test_no_import_cycles():
    graph = {m: {t for t in imports(p) if t in MODULES} for m, p in MODULES.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_modules_stay_small_or_say_why():
    for module, path in MODULES.items():
        lines = len(path.read_text().splitlines())
        if lines > 420:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "Long because" in doc, f"{module} has {lines} lines and no reason in its docstring"
