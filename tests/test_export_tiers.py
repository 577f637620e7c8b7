"""A tier table exported: its lets as named variables and its tiers as an if/elif chain, in
Python and in C, deciding what resolve_launch decides on hundreds of scalars."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess

import pytest

from cudaopt.exporter.launch_code import c_launch, python_launch_config
from cudaopt.exporter.lower import PY_HELPERS, c_helpers
from cudaopt.wire.launch import LaunchError, resolve_launch
from cudaopt.wire.protocol import LaunchSpec
from cudaopt.record.bake import bake_launch
from tests.conftest import SGEMM

KERNELS = ["matmul_f32", "matmul_f32_medium", "matmul_f32_small", "matmul_f32_tiny", "matmul_f32_direct",
           "matmul_f32_splitk2", "matmul_f32_splitk4", "matmul_f32_splitk8", "matmul_f32_splitk8s",
           "matmul_f32_splitk8sg", "matmul_f32_splitk2g", "matmul_f32_splitk2r", "k_other"]
# a table with what the example lacks: a tier's own grid and shared bytes, a let over a let, a
# float let, and no default (some scalars match no tier)
OTHER = {
    "let": {"area": "m * n", "ratio": "m / (n + 1)", "wide": "ratio < 0.25 and area > 4096"},
    "size": ["n", "m"],
    "entry": "k_other",
    "shared_bytes": "k * 4",
    "tiers": [
        {"name": "wide", "when": "wide", "entry": "'matmul_f32' if k > 64 else 'matmul_f32_tiny'", "block": [128],
         "grid": ["cdiv(n, 128)", "m"], "shared_bytes": 0},
        {"when": "area > 0 and k % 3 != 1", "block": [32, 4], "tile": [32, "4 + k % 3"]},
    ],
}


def _launches() -> list[LaunchSpec]:
    config = json.loads((SGEMM / "experiment.json").read_text())["tune"]
    baked = [LaunchSpec(**bake_launch(config["launch"], {name: choices[min(i, len(choices) - 1)]
                                                         for name, choices in config["tunables"].items()}))
             for i in (0, 1)]
    return [*baked, LaunchSpec(**OTHER)]


def _draws(count: int = 500) -> list[dict]:
    rng = random.Random(31)
    sizes = [0, 1, 2, 7, 16, 31, 64, 100, 128, 256, 512, 777, 1024, 2048, 4096, 5000, 32768]
    pick = lambda: rng.choice(sizes) if rng.random() < 0.6 else rng.randint(0, 9000)
    return [{"m": pick(), "n": pick(), "k": pick(), "num_sms": rng.choice([16, 108, 132])} for _ in range(count)]


def _want(launch: LaunchSpec, names: dict):
    try:
        got = resolve_launch(launch, names)
    except LaunchError:
        return "error"
    return got.entry or "matmul_f32", got.grid, got.block, got.shared_bytes


def test_the_exported_python_takes_the_tier_resolve_launch_takes():
    for launch in _launches():
        code = "\n".join(python_launch_config(launch, {"m", "n", "k", "num_sms"}, "matmul_f32", "m, n, k, num_sms"))
        assert "if " in code and "elif " in code and "cudaopt" not in code
        scope = {"_math": math, "ENTRY": "matmul_f32"}
        exec(PY_HELPERS + "\n" + code, scope)
        outcomes = set()
        for names in _draws():
            try:
                got = scope["launch_config"](**names)
            except ValueError:
                got = "error"
            want = _want(launch, names)
            assert got == want, (launch.to_data(), names)
            outcomes.add(got if got == "error" else got[0])
        assert len(outcomes) >= 3


def test_the_example_exports_with_its_lets_named():
    launch = _launches()[0]
    code = "\n".join(python_launch_config(launch, {"m", "n", "k", "num_sms"}, "matmul_f32", "m, n, k, num_sms"))
    assert "    fills_64 = " in code and "    elif fills_64:  # tier 'medium'" in code and "    else:  # tier 'tiny'" in code
    c = "\n".join(c_launch(launch, {"m": "i", "n": "i", "k": "i", "num_sms": "i"}, {k: k for k in KERNELS},
                           "matmul_f32", "void (*kernel)(void)"))
    assert "long long let_fills_64 = " in c and "else if (((long long)let_fills_64) != 0) {  // tier 'medium'" in c


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_the_exported_c_takes_the_tier_resolve_launch_takes(tmp_path):
    types = {"m": "i", "n": "i", "k": "i", "num_sms": "i"}
    kernels = {name: f"{i + 1}" for i, name in enumerate(KERNELS)}
    draws = _draws()
    stdin = "".join(f"{d['m']} {d['n']} {d['k']} {d['num_sms']}\n" for d in draws)
    for i, launch in enumerate(_launches()):
        body = c_launch(launch, types, kernels, "1", "long long kernel")
        program = "\n".join(["#include <math.h>", "#include <stdio.h>", "#include <stdlib.h>", c_helpers("\n".join(body)),
                             "int main(void) {", "    long long m, n, k, num_sms;",
                             '    while (scanf("%lld %lld %lld %lld", &m, &n, &k, &num_sms) == 4) {',
                             "    int bad = 0;", *[f"    {line}" for line in body],
                             '    if (bad || grid_0 < 1 || grid_1 < 1 || grid_2 < 1 || block_0 < 1 || block_1 < 1 '
                             '|| block_2 < 1 || shared_bytes < 0) printf("error\\n");',
                             '    else printf("%lld %lld %lld %lld %lld %lld %lld %lld\\n", kernel, grid_0, grid_1, '
                             'grid_2, block_0, block_1, block_2, shared_bytes);', "    }", "    return 0;", "}"])
        (tmp_path / f"launch{i}.c").write_text(program)
        exe = tmp_path / f"launch{i}"
        subprocess.run(["gcc", "-O1", "-Wall", "-Werror", "-Wno-unused-variable", "-o", str(exe),
                        str(tmp_path / f"launch{i}.c"), "-lm"], check=True)
        out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout.splitlines()
        for names, line in zip(draws, out, strict=True):
            want = _want(launch, names)
            if want == "error":
                assert line == "error", (launch.to_data(), names, line)
            else:
                kernel, *dims = (int(v) for v in line.split())
                assert (KERNELS[kernel - 1], tuple(dims[:3]), tuple(dims[3:6]), dims[6]) == want, (names, line)
