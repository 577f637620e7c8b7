"""The exported launch arithmetic computes what the expression evaluator computes: the generated
Python and the generated C, on hundreds of random scalars, the example's tier conditionals included."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from cudaopt.exporter.lower import PY_HELPERS, LowerError, c_helpers, entry_to_c, to_c, to_python
from cudaopt.wire import expr
from cudaopt.record.bake import bake_launch
from tests.conftest import SGEMM

FIXTURES = Path(__file__).parent / "fixtures"

NAMES = {"m", "n", "k", "num_sms"}
TYPES = {"m": "i", "n": "i", "k": "i", "num_sms": "i", "x": "f"}
HANDWRITTEN = [
    "m // 7", "-m // 7", "m % 7", "(m - 50) % 7", "(m - 50) // -3", "m % -3", "m / 4", "cdiv(m, 16)",
    "cdiv(m - 50, 16)", "round_up(n, 32)", "min(m, n, 64)", "max(m, 2.5)", "min(m, 2.5)", "abs(m - n)",
    "int(m / 3)", "ceil(m / 3)", "floor(m / 3)", "log2(m + 1)", "sqrt(m * n)", "2 ** (k % 5)", "m * n * k <= 65536",
    "1 if m < n < k else 2", "m < 256 and n < 256", "m > 512 or not n > 3", "(m if k > 3 else n) // 2",
    "x * 2", "x // 0.5", "x % 0.75", "min(x, m)", "cdiv(x, 3)", "m / (k - k)", "m // (n - n)", "log2(m - m)",
    "sqrt(x - 100)", "1.5 if m > n else 2", "cdiv(n, 16) if m * n * k <= 65536 else cdiv(n, 128)", "(m // 8) * 8.0",
]


def _example_launch() -> dict:
    """An earlier form of the example's launch, as nested conditionals over its tunables (written
    so before tier tables): long expressions that lower.py must still carry."""
    config = json.loads((SGEMM / "experiment.json").read_text())["tune"]
    values = {name: choices[-1] for name, choices in config["tunables"].items()}
    return bake_launch(json.loads((FIXTURES / "long_launch_expressions.json").read_text()), values)


def _exprs() -> list[str]:
    launch = _example_launch()
    return [*HANDWRITTEN, *launch["grid"], *launch["block"]]


def _draws(count: int = 400) -> list[dict]:
    rng = random.Random(29)
    sizes = [0, 1, 2, 7, 8, 16, 31, 64, 100, 127, 128, 255, 256, 512, 777, 1024, 2048, 4096, 5000, 32768]
    draws = []
    for _ in range(count):
        pick = lambda: rng.choice(sizes) if rng.random() < 0.6 else rng.randint(0, 9000)
        draws.append({"m": pick(), "n": pick(), "k": pick(), "num_sms": rng.choice([16, 108, 132, 144]),
                      "x": round(rng.uniform(-50, 300), 3)})
    return draws


def _evaluate(text: str, names: dict):
    try:
        return expr.evaluate(text, names)
    except expr.ExprError:
        return "error"


def _python(code: str, names: dict):
    scope = {"_math": math}
    exec(PY_HELPERS, scope)
    try:
        return eval(code, scope, dict(names))
    except (ValueError, ZeroDivisionError):
        return "error"


def test_the_generated_python_computes_what_the_evaluator_computes():
    exprs = _exprs()
    codes = [to_python(text, NAMES | {"x"}) for text in exprs]
    compared = 0
    for names in _draws():
        for text, code in zip(exprs, codes, strict=True):
            want, got = _evaluate(text, names), _python(code, names)
            assert got == want and type(got) is type(want), (text, names, want, got)
            compared += 1
    assert compared > 10_000


def test_the_generated_entry_choice_matches_the_evaluator_on_every_tier():
    entry = _example_launch()["entry"]
    code = to_python(entry, NAMES, entry=True)
    seen = set()
    for names in _draws():
        want = expr.evaluate_name(entry, names)
        assert _python(code, names) == want
        seen.add(want)
    assert seen == {"matmul_f32", "matmul_f32_medium", "matmul_f32_small", "matmul_f32_tiny", "matmul_f32_direct",
                    "matmul_f32_splitk4", "matmul_f32_splitk8"}


def test_a_name_nothing_provides_is_refused_with_the_names_there_are():
    with pytest.raises(LowerError, match="'BM'.*k, m, n, num_sms"):
        to_python("cdiv(n, BM)", NAMES)
    with pytest.raises(LowerError, match="'BM'"):
        to_c("cdiv(n, BM)", TYPES)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_the_generated_c_computes_what_the_evaluator_computes(tmp_path):
    exprs = _exprs()
    entry = _example_launch()["entry"]
    kernels = {name: f"{i + 1}" for i, name in enumerate(
        ["matmul_f32", "matmul_f32_medium", "matmul_f32_small", "matmul_f32_tiny", "matmul_f32_direct",
         "matmul_f32_splitk4", "matmul_f32_splitk8"])}
    body = []
    for i, text in enumerate(exprs):
        code, kind = to_c(text, TYPES)
        fmt = '"%lld\\n"' if kind == "i" else '"%.17g\\n"'
        body.append(f'    bad = 0; {{ {"long long" if kind == "i" else "double"} v = {code}; '
                    f'if (bad) printf("error\\n"); else printf({fmt}, v); }}')
    body.append(f"    bad = 0; {{ long long v = {entry_to_c(entry, TYPES, kernels)}; printf(\"%lld\\n\", v); }}")
    program = "\n".join(["#include <math.h>", "#include <stdio.h>", "#include <stdlib.h>",
                         c_helpers("\n".join(body)),
                         "int main(void) {", "    long long m, n, k, num_sms; double x; int bad;",
                         '    while (scanf("%lld %lld %lld %lld %lf", &m, &n, &k, &num_sms, &x) == 5) {',
                         *body, "    }", "    return 0;", "}"])
    (tmp_path / "exprs.c").write_text(program)
    subprocess.run(["gcc", "-O1", "-o", str(tmp_path / "exprs"), str(tmp_path / "exprs.c"), "-lm"], check=True)
    draws = _draws()
    stdin = "".join(f"{d['m']} {d['n']} {d['k']} {d['num_sms']} {d['x']!r}\n" for d in draws)
    out = subprocess.run([str(tmp_path / "exprs")], input=stdin, capture_output=True, text=True, check=True)
    lines = iter(out.stdout.splitlines())
    names_of = {v: k for k, v in kernels.items()}
    for names in draws:
        for text in exprs:
            want, got = _evaluate(text, names), next(lines)
            if want == "error":
                assert got == "error", (text, names, got)
            else:
                assert got != "error" and float(got) == pytest.approx(float(want), rel=1e-12), (text, names, got)
        assert names_of[next(lines)] == expr.evaluate_name(entry, names)
