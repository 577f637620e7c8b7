"""An exported launch as code: its lets as named variables, its tier table as an if/elif chain.

What :func:`cudaopt.wire.launch.resolve_launch` decides per case, written out in Python (the
torch export's ``launch_config``) and in C (the CUDA export's launcher) with lower.py's
expressions, so the export needs no evaluator. A launch without tiers is one unconditional
branch, as it was always written.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..wire.protocol import Expr, LaunchSpec
from ..wire.tiers import Tier, rows
from .lower import entry_to_c, py_name, to_c, to_c_int, to_python


def _heads(branches: list[Tier], condition) -> list[tuple[str | None, str, str]]:
    """Each branch's keyword (``if``, ``elif``, ``else``; None: unconditional), its condition's
    code and what it is called in a comment."""
    heads = []
    for i, tier in enumerate(branches):
        said = f"tier {tier.name!r}" if tier.name else f"tiers[{i}]" if len(branches) > 1 else ""
        if tier.when is None:
            heads.append(("else" if i else None, "", said))
        else:
            heads.append(("if" if i == 0 else "elif", condition(tier.when), said))
    return heads


def python_launch_config(launch: LaunchSpec, names: set[str], default_entry: str, params: str) -> list[str]:
    """``def launch_config(params)``: the kernel, grid, block and shared bytes for the scalars, or
    ValueError (no tier holds, a dimension below 1) naming ``ENTRY``, the module's kernel."""
    lines = [f"def launch_config({params}):",
             '    """The kernel, grid, block and dynamic shared bytes for these scalars (the exported launch)."""']
    visible = set(names)
    for name, text in (launch.let or {}).items():
        lines.append(f"    {py_name(name)} = {to_python(text, visible)}")
        visible.add(name)
    branches = rows(launch)
    for (keyword, condition, said), tier in zip(_heads(branches, lambda w: to_python(w, visible)), branches,
                                                strict=True):
        indent = "    " if keyword is None else "        "
        if keyword is not None:
            lines.append(f"    {keyword}{' ' + condition if condition else ''}:{f'  # {said}' if said else ''}")
        if tier.grid is None:
            dims = [f'_cdiv(_as_int({to_python(s, visible)}, "size[{d}]"), _tile({to_python(t, visible)}, "tile[{d}]"))'
                    for d, (s, t) in enumerate(zip(launch.size or [], tier.tile, strict=True))]
        else:
            dims = [f'_as_int({to_python(g, visible)}, "grid[{d}]")' for d, g in enumerate(tier.grid)]
        blocks = [f'_as_int({to_python(b, visible)}, "block[{d}]")' for d, b in enumerate(tier.block)]
        entry = to_python(tier.entry, visible, entry=True) if tier.entry else repr(default_entry)
        lines += [f"{indent}_entry = {entry}", f"{indent}_grid = {_py_tuple(dims)}",
                  f"{indent}_block = {_py_tuple(blocks)}",
                  f'{indent}_shared = _as_int({to_python(tier.shared_bytes, visible)}, "shared_bytes")']
    if branches[-1].when is not None:
        lines += ["    else:", '        raise ValueError(f"{ENTRY}: no launch tier holds for these scalars")']
    return lines + ["    if min(_grid) < 1 or min(_block) < 1 or _shared < 0:",
                    '        raise ValueError(f"{ENTRY}: launch grid={_grid} block={_block} shared_bytes={_shared} is '
                    'not usable for these scalars")',
                    "    return _entry, _grid, _block, _shared"]


def _py_tuple(dims: list[str]) -> str:
    dims = dims + ["1"] * (3 - len(dims))
    return f"({', '.join(dims)})"


def c_launch(launch: LaunchSpec, types: Mapping[str, str], kernels: Mapping[str, str], default_entry: str,
             pointer: str) -> list[str]:
    """C statements setting ``grid_0..2``, ``block_0..2``, ``shared_bytes`` and ``kernel`` (declared
    as ``pointer``); anything the evaluator would refuse, or no tier holding, sets ``bad``. Lets
    are variables ``let_NAME``, so none can hide an argument of the launcher."""
    types, rename = dict(types), {}
    lines = []
    for name, text in (launch.let or {}).items():
        code, kind = to_c(text, types, rename=rename)
        lines.append(f"    {'long long' if kind == 'i' else 'double'} let_{name} = {code};")
        types[name], rename[name] = kind, f"let_{name}"
    lines += ["    long long grid_0 = 1, grid_1 = 1, grid_2 = 1, block_0 = 1, block_1 = 1, block_2 = 1;",
              "    long long shared_bytes = 0;", f"    {pointer} = 0;"]
    branches = rows(launch)

    def condition(when: Expr) -> str:
        code, kind = to_c(when, types, rename=rename)
        return f"({code} != 0.0)" if kind == "f" else f"({code} != 0)"

    for (keyword, cond, said), tier in zip(_heads(branches, condition), branches, strict=True):
        if keyword is not None:
            head = {"if": "if ", "elif": "else if ", "else": "else"}[keyword] + cond
            lines.append(f"    {head} {{{f'  // {said}' if said else ''}")
        indent = "    " if keyword is None else "        "
        if tier.grid is None:
            dims = [f"co_cdiv({to_c_int(s, types, rename=rename)}, co_tile({to_c_int(t, types, rename=rename)}, &bad), "
                    "&bad)" for s, t in zip(launch.size or [], tier.tile, strict=True)]
        else:
            dims = [to_c_int(g, types, rename=rename) for g in tier.grid]
        lines += [f"{indent}grid_{d} = {code};" for d, code in enumerate(dims)]
        lines += [f"{indent}block_{d} = {to_c_int(b, types, rename=rename)};" for d, b in enumerate(tier.block)]
        lines.append(f"{indent}shared_bytes = {to_c_int(tier.shared_bytes, types, rename=rename)};")
        chosen = entry_to_c(tier.entry, types, kernels, rename=rename) if tier.entry else default_entry
        lines.append(f"{indent}kernel = {chosen};")
        if keyword is not None:
            lines.append("    }")
    if branches[-1].when is not None:
        lines += ["    else {", "        bad = 1;  // no launch tier holds for these scalars", "    }"]
    return lines
