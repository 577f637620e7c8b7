"""The layers of docs/architecture.md, checked: nothing imports upward, no import cycles, the
types that cross the process boundary (wire/) import only themselves, the compile kit
(compilekit/) imports nothing of cudaopt but itself and wire/, the GPU worker (worker/) nothing
but itself, compilekit/ and wire/, and inside every package each module imports only modules of
a lower rank."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "cudaopt"

# Lowest first. A module may import from its own layer or any layer below it (docs/architecture.md).
LAYERS = [
    {"wire"},
    {"compilekit"},
    {"worker"},
    {"errors", "paths", "reading", "children", "config", "pool", "insight", "doctor"},
    {"crosschecks"},
    {"experiment"},
    {"preflight", "cpu_controls", "evaluate", "record", "trial"},
    {"engine"},
    {"agent", "report", "kernelbench", "exporter"},
    {"strategies", "winner", "guard"},
    {"optimize", "fleet", "schemas"},
    {"api"},
    {"cli"},
    {"__main__"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

# Inside a package, lowest first: a module imports only modules of its package in a lower entry
# (so a cycle inside the package cannot pass). Every module of the package is listed.
PACKAGE_LAYERS = {
    "wire": [
        {"expr", "signature", "fields"},  # the two small languages: expressions, C signatures; field types of user files
        {"protocol"},  # requests, and WireModel, the base of every wire and file type
        {"results", "tiers"},  # what comes back; a tier table chosen for one case
        {"launch", "messages", "stats", "precision"},  # a launch resolved, the worker's messages, statistics; the policy
    ],
    "compilekit": [
        {"pp_lines", "host_headers", "landlock", "cubin", "locate", "lifeline", "target"},
        {"sandbox", "math_units"},  # the include scan; the math units of the SASS
        {"nvrtc_build"},  # one compilation
        {"compile_process", "kept_cubins"},  # the confined compiler process; cubins kept on disk
        {"compiler"},  # what callers call: scan, compile remotely, read the math
    ],
    "worker": [
        {"driver", "device", "lru", "arrays", "inputs"},
        {"locked", "leftovers", "launcher", "compare"},
        {"gpu", "controls"},
        {"buffers", "answers", "peaks"},
        {"case_data", "timing"},
        {"entries", "reference"},
        {"torch_reference", "vendor"},
        {"runner"},
        {"main"},  # the process: python -m cudaopt.worker.main
    ],
    "pool": [{"dispatch"}, {"devices", "supervisor"}, {"ray_cluster"}, {"pools"}],  # the Evaluator, then backends
    "insight": [{"parse"}, {"card", "compiled", "ncu"}],
    "record": [{"bake", "crown", "events", "heatmap", "rundir"}, {"files"}, {"cache", "runs"}, {"dispatch_table"}],
    "engine": [{"scoring"}, {"summary"}, {"recorder"}],  # pure functions below the one that writes
    "agent": [{"instruments", "model", "nvidia_docs", "prompts", "proposal"}, {"graph", "research"}],
    "report": [{"charts", "roi"}, {"build"}],
    "kernelbench": [{"discriminate", "metrics", "problem"}, {"translate"}, {"glue"}, {"importer"}, {"isolated"}],
    "exporter": [{"lower", "source", "torch_runtime"}, {"launch_code"}, {"cuda_target", "torch_target"},
                 {"kernelbench_target"}],
    "strategies": [{"base"}, {"agent", "tune"}],
    "winner": [{"replay", "sanitize", "shapes"}, {"crowning", "verify"}],
    "guard": [{"files", "git", "stats"}, {"junit", "load", "summaries"}, {"check", "record"}],
    "fleet": [{"files"}, {"headroom", "page"}, {"audit"}],
    "api": [
        {"arguments"},  # the checks on every argument
        {"workers"},  # the GPU workers a function measures on (their arguments checked first)
        {"experiments"},  # how an experiment is given; check, evaluate
        {"from_python"},  # an experiment built in Python
        {"guards", "kernelbench", "optimizing", "shipping", "tools", "winners"},  # one group of commands each
        {"fleets"},  # the fleet audit, which optimises too
    ],
    "cli": [
        {"app", "options", "render_cells", "render_kernelbench", "render_tools"},  # app: errors -> exit statuses
        {"progress", "render_audit", "render_experiments", "render_guard", "render_runs"},
        {"audit", "experiments", "export", "guard", "kernelbench", "runs", "tools"},  # one group of commands each
    ],
}


def unit_of(module: str) -> str:
    """The layer unit a module belongs to: its package under cudaopt, or the module itself."""
    return module.split(".")[1] if module.count(".") >= 1 else module


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    place = SRC.parent / Path(*dotted.split("."))
    return place.with_suffix(".py").is_file() or (place / "__init__.py").is_file()


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
                # "from . import agent" names a module (or a package), not an attribute
                found |= {f"{target}.{a.name}" for a in node.names if is_module(f"{target}.{a.name}")}
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


@pytest.mark.parametrize(("unit", "allowed"), [("wire", {"wire"}), ("compilekit", {"compilekit", "wire"}),
                                               ("worker", {"worker", "compilekit", "wire"})])
def test_each_side_of_the_process_boundary_imports_only_what_it_may(unit, allowed):
    for module, path in MODULES.items():
        if unit_of(module) == unit:
            outside = sorted(t for t in imports(path) if unit_of(t) not in allowed)
            assert not outside, f"{module} imports {outside}"


def test_the_command_line_reaches_the_core_only_through_the_api():
    """One door: cli/ imports nothing of cudaopt but the API, the errors and its own modules, so
    every check the API runs holds whichever door a user takes."""
    for module, path in MODULES.items():
        if unit_of(module) == "cli":
            outside = sorted(t for t in imports(path)
                             if t not in ("cudaopt", "cudaopt.api", "cudaopt.errors") and unit_of(t) != "cli")
            assert not outside, f"{module} imports {outside}: reach the core through cudaopt.api"


# Where a function may import a module of cudaopt, and why; everywhere else every import is at the
# top. (``import cudaopt`` and ``cudaopt.api`` load their names on first use through importlib, so
# that the command line and a script start fast: no import statement is deferred for that.)
LAZY_IMPORTS = {
    "worker": "the worker's side: the host loads worker modules (a NumPy reference, the inputs, the "
              "negative controls) without the GPU and compiler parts their functions reach",
    "compilekit": "the confined compiler process loads the Landlock confinement only once it is the "
                  "child, never in the process it compiles for",
}


def function_imports(path: Path) -> set[str]:
    """The cudaopt modules ``path`` imports inside a function."""
    found = set()
    for fn in ast.walk(ast.parse(path.read_text())):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("cudaopt")):
                    found.add("." * node.level + (node.module or ""))
                elif isinstance(node, ast.Import):
                    found |= {a.name for a in node.names if a.name.startswith("cudaopt")}
    return found


def test_function_local_imports_only_where_the_architecture_says_why():
    for module, path in MODULES.items():
        if unit_of(module) not in LAZY_IMPORTS:
            assert not function_imports(path), (f"{module} imports {sorted(function_imports(path))} inside a "
                                                "function: import at the top, or say why in LAZY_IMPORTS")


def test_the_command_line_starts_without_loading_the_core():
    """`cudaopt --help` parses flags only: the API's modules, and the core behind them, load when a
    command calls the API."""
    import subprocess
    import sys

    code = ("import sys; import cudaopt.cli; "
            "print(sorted(m for m in sys.modules if m.startswith('cudaopt.') and m.split('.')[1] not in "
            "('cli', 'api', 'errors')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC.parent)}).stdout.strip()
    assert out == "[]", out


def test_one_place_makes_each_object_a_concept_has():
    """A Trial is made only in trial.py; a run directory's file names are spelled only in
    record/rundir.py (a new file gets its name there)."""
    names = re.compile(r'"(?:summary|history|settings|lock|env|verify|replay|dispatch)\.json"|"best\.cu"'
                       r'|"best-launch\.json"|"report\.html"|"heatmap\.(?:svg|png)"|"run\.log"')
    for module, path in MODULES.items():
        text = path.read_text()
        calls = {n.func.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if module != "cudaopt.trial":
            assert "Trial" not in calls, f"{module} makes a Trial: use a maker of trial.py"
        if module != "cudaopt.record.rundir":
            assert not names.search(text), f"{module} spells a run directory's file name: {names.search(text).group()}"


def test_every_package_orders_its_modules():
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    assert packages == set(PACKAGE_LAYERS), f"PACKAGE_LAYERS: rank the modules of {sorted(packages - set(PACKAGE_LAYERS))}"


@pytest.mark.parametrize("package", sorted(PACKAGE_LAYERS))
def test_every_module_of_an_ordered_package_has_a_rank(package):
    listed = set().union(*PACKAGE_LAYERS[package])
    present = {m.split(".")[2] for m in MODULES if m.count(".") >= 2 and unit_of(m) == package}
    assert present == listed, (f"PACKAGE_LAYERS[{package!r}] (and docs/architecture.md): add "
                               f"{sorted(present - listed)}, remove {sorted(listed - present)}")


def inner_rank(module: str) -> tuple[str, int] | None:
    """(package, rank) of a module inside an ordered package, None outside one."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] not in PACKAGE_LAYERS:
        return None
    return parts[1], next(r for r, names in enumerate(PACKAGE_LAYERS[parts[1]]) if parts[2] in names)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if inner_rank(m)))
def test_inside_a_package_a_module_imports_only_lower_ranks(module):
    package, mine = inner_rank(module)
    same = [t for t in imports(MODULES[module]) if t in MODULES and inner_rank(t) and inner_rank(t)[0] == package]
    wrong = sorted(t for t in same if inner_rank(t)[1] >= mine)
    assert not wrong, f"{module} (rank {mine} in {package}/) imports its own rank or above: {wrong}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt, trail + [nxt])):
                return cycle
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module, [module])):
            return cycle
    return None


def test_no_import_cycles():
    graph = {m: {t for t in imports(p) if t in MODULES} for m, p in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_inside_a_package_is_found():
    graph = {"cudaopt.worker.gpu": {"cudaopt.worker.leftovers"}, "cudaopt.worker.runner": {"cudaopt.worker.gpu"},
             "cudaopt.worker.leftovers": {"cudaopt.worker.launcher"},
             "cudaopt.worker.launcher": {"cudaopt.worker.gpu", "cudaopt.wire.results"}}
    assert find_cycle(graph) == ["cudaopt.worker.gpu", "cudaopt.worker.leftovers", "cudaopt.worker.launcher",
                                 "cudaopt.worker.gpu"]
    assert find_cycle({**graph, "cudaopt.worker.launcher": {"cudaopt.wire.results"}}) is None


def test_modules_stay_small_or_say_why():
    for module, path in MODULES.items():
        lines = len(path.read_text().splitlines())
        if lines > 420:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "Long because" in doc, f"{module} has {lines} lines and no reason in its docstring"


def test_checks_are_given_what_experiment_read_and_read_nothing_themselves():
    """Loading runs one way: experiment.py reads each file (reading.py) and hands it to crosschecks.py;
    crosschecks.py opens no file but the header of a case's .npy input (check_npy)."""
    tree = ast.parse((SRC / "crosschecks.py").read_text())
    reads = {"open", "read_text", "read_bytes", "read_json_file", "read_model_file", "read_text_file", "load"}
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name != "check_npy"):
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            assert name not in reads, f"checks.{fn.name} reads a file ({name}): read it in experiment.py"
    assert "experiment" not in {m.rsplit(".", 1)[-1] for m in imports(SRC / "crosschecks.py")}


ROOT = SRC.parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"(?:[\w.-]+/)*[\w.-]+\.(?:py|cu|md)|(?:[\w-]+/)+")  # a file, or a folder written with its slash
NAME = re.compile(r"[A-Z][A-Za-z0-9]+|[A-Z][A-Z0-9_]+|[a-z][a-z0-9]*(?:_[a-z0-9]+)+")  # CamelCase, CONSTANT, snake_case
GLOB = re.compile(r"(?:[\w-]+/)*[\w*-]+\.py")
DOTTED = re.compile(r"(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*")


def _sources() -> dict[Path, str]:
    """The code a page may name: the package and its tests."""
    return {p: p.read_text() for base in (SRC, ROOT / "tests") for p in base.rglob("*")
            if p.suffix in (".py", ".cu") and "__pycache__" not in p.parts}


def _path_exists(text: str) -> bool:
    """A path as the page writes it: from the repository root, from src/cudaopt/, or (a module named
    inside a package the sentence is about) the end of some path under src/cudaopt/ or tests/."""
    text = text.rstrip("/")
    if "*" in text:  # a family of modules: cli/render_*.py
        return any(SRC.glob(text)) or any(ROOT.glob(text))
    if (ROOT / text).exists() or (SRC / text).exists():
        return True
    return any(p.as_posix().endswith("/" + text) for base in (SRC, ROOT / "tests") for p in base.rglob("*"))


def _named(word: str, sources: dict[Path, str]) -> bool:
    pattern = re.compile(rf"\b{re.escape(word)}\b")
    return any(pattern.search(text) for text in sources.values())


def test_every_path_and_identifier_architecture_md_names_exists():
    """A page that names a module or a function that moved sends a newcomer nowhere: every backticked
    path (``worker/gpu.py``, ``pool/``), identifier (``Trial``, ``prepare_trial``, ``STATUSES``) and
    dotted name (``Trial.request``, ``crosschecks.check_launch``) of docs/architecture.md exists."""
    sources = _sources()
    missing = []
    for token in re.findall(r"`([^`\n]+)`", ARCHITECTURE.read_text()):
        if PATH.fullmatch(token) and not DOTTED.fullmatch(token):
            if not _path_exists(token):
                missing.append(token)
        elif GLOB.fullmatch(token):
            if not _path_exists(token):
                missing.append(token)
        elif DOTTED.fullmatch(token):
            owner, _, attr = token.rpartition(".")
            owner = owner.rsplit(".", 1)[-1]  # a module (its file) or a class (the file defining it)
            files = [p for p in sources if p.stem == owner or (p.stem == "__init__" and p.parent.name == owner)
                     or re.search(rf"^class {owner}\b", sources[p], re.M)]
            if re.search(rf"^    {owner}: ", sources[SRC / "config.py"], re.M):  # a field of the user's files: tune.launch
                files.append(SRC / "config.py")
            if not files or not _named(attr, {p: sources[p] for p in files}):
                missing.append(token)
        elif NAME.fullmatch(token) and not _named(token, sources):
            missing.append(token)
    assert not missing, f"docs/architecture.md names what the code does not have: {missing}"


def _where_to_add() -> dict[str, str]:
    text = ARCHITECTURE.read_text().split("## Where to add", 1)[1]
    return {m.group(1): m.group(2) for m in re.finditer(r"^- \*\*(.+?)\*\*(.*?)(?=^- \*\*|\Z)", text, re.M | re.S)}


@pytest.mark.parametrize(("item", "file", "defines"), [
    ("A strategy", "strategies/base.py", "def register"),
    ("A strategy", "strategies/__init__.py", "import"),
    ("A trust check", "worker/runner.py", "def "),
    ("A trust check", "wire/results.py", "STATUSES"),
    ("A check before the GPU", "crosschecks.py", "def check_launch"),
    ("A check before the GPU", "preflight.py", "def preflight"),
    ("A check before the GPU", "api/arguments.py", "RANGES"),
    ("A vendor baseline kind", "worker/vendor.py", "def "),
    ("A vendor baseline kind", "wire/protocol.py", "class VendorSpec"),
    ("A vendor baseline kind", "crosschecks.py", "def check_vendor_function"),
    ("A command", "cli/app.py", "def command"),
    ("A command", "trial.py", "def prepare_trial"),
    ("An export target", "exporter/__init__.py", "TARGETS"),
    ("An export target", "exporter/source.py", "class ExportSource"),
])
def test_where_to_add_names_the_places_that_hold_it(item, file, defines):
    """Each entry of "Where to add" names the module where such a thing is made, and that module
    does make it."""
    entries = _where_to_add()
    assert item in entries, f"docs/architecture.md's Where to add has no entry for {item!r}"
    name = file.rsplit("/", 1)[-1]
    named = (f"`{file}`", f"`{name}`", f"`{name.removesuffix('.py')}.")  # the file, or a name in it: `trial.prepare_trial`
    assert any(n in entries[item] for n in named), f"{item}: {file} is not named"
    assert defines in (SRC / file).read_text(), f"{file} no longer holds {defines!r}"
