"""Launch tier tables: the schema, resolution, the checks and the examples written with them.

The examples' launches were written once as nested conditionals; the tier tables that replace
them must take the same decisions on every case, configuration and GPU, so the old form is
kept here (tests/fixtures/*_nested_launch.json) and compared against. The SGEMM one was written
again, over its table's lets, when the table's split-K rules changed; the softmax one's warp limit
went from 1024 to 512 columns with its table's, its warp tier's rows per warp from a tunable to
one round of registers by columns, and rows of at most 128 columns, a multiple of 4, went to the
warp kernel's float4-only build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudaopt.errors import ExperimentError
from cudaopt.wire.launch import LaunchError, candidate_names, resolve_launch
from cudaopt.wire.protocol import CaseSpec, LaunchSpec

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


def _tuning(example: str):
    from cudaopt.experiment import load_experiment

    return load_experiment(ROOT / "examples" / example / "experiment.json").tuning


def _plain(launch):
    return launch.grid, launch.block, launch.shared_bytes, launch.entry


def _sgemm_shapes() -> list[dict]:
    cases = json.loads((ROOT / "examples/sgemm/input_cases.json").read_text())["cases"]
    shapes = [c["scalars"] for c in cases]
    assert {c["role"] for c in cases} >= {"correctness", "performance", "holdout"}
    for name in ("sgemm_shapes.json", "sgemm_shapes_extra.json", "sgemm_shapes_splitk.json"):
        shapes += json.loads((ROOT / "benchmarks" / name).read_text())["shapes"]
    from tests.gpu.test_splitk_gpu import SHAPES  # each split-K tier's shapes, edges included

    return shapes + [{"m": m, "n": n, "k": k} for m, n, k in SHAPES]


@pytest.mark.parametrize("example", ["sgemm", "softmax"])
def test_the_tier_table_takes_the_nested_conditionals_decisions(example):
    """Every configuration of the tune space, every shape the example and its benchmarks run, on
    three GPUs: the same kernel, grid, block and shared bytes as the nested form."""
    tuning = _tuning(example)
    assert tuning.launch.tiers, "the example's launch is a tier table"
    old = LaunchSpec(**json.loads((FIXTURES / f"{example}_nested_launch.json").read_text()))
    if example == "sgemm":
        shapes = _sgemm_shapes()
    else:
        cases = json.loads((ROOT / "examples/softmax/input_cases.json").read_text())["cases"]
        edges = [32, 1024, 4096, 57344, 131072]
        cols = sorted({c for e in edges for f in (1, 2, 4, 8, 16) for c in (e * f - 1, e * f, e * f + 1)} | {1, 33})
        shapes = [c["scalars"] for c in cases] + [{"rows": r, "cols": c} for r in (1, 7, 4096) for c in cols]
    configs = tuning.space.configurations()
    assert len(configs) > 1 and len(shapes) > 20
    tiers = set()
    for sms in (108, 114, 132):
        for config in configs:
            for scalars in shapes:
                names = candidate_names(scalars, config, {"num_sms": sms})
                new = resolve_launch(tuning.launch, names)
                assert _plain(new) == _plain(resolve_launch(old, names)), (scalars, config, sms)
                tiers.add(new.tier)
    assert tiers == {t.name for t in tuning.launch.tiers}, "every tier is taken on some shape"


def test_no_expression_in_the_examples_is_longer_than_a_line():
    """A user reads the examples to learn the format: each expression fits in about 100 characters
    (the description and the signature, a C declaration, are prose and code, not expressions)."""
    def strings(value, where):
        if isinstance(value, str):
            yield where, value
        elif isinstance(value, dict):
            for key, item in value.items():
                yield from strings(item, f"{where}.{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                yield from strings(item, f"{where}[{i}]")

    files = sorted((ROOT / "examples").glob("**/*.json"))
    assert len(files) >= 4
    for file in files:
        data = json.loads(file.read_text())
        for where, text in strings(data, ""):
            if where not in (".description", ".signature") and not where.startswith(".vendor"):
                assert len(text) <= 100, f"{file.relative_to(ROOT)}{where}: {len(text)} characters"


def test_the_tier_table_in_the_docs_is_the_examples():
    """docs/experiments.md shows the SGEMM example's tune section; a rule changed in one and not the
    other would teach a reader rules the example no longer has."""
    text = (ROOT / "docs" / "experiments.md").read_text()
    start = text.index('```json\n"tune": {') + len("```json\n")
    shown = json.loads("{" + text[start:text.index("```", start)] + "}")["tune"]
    tune = json.loads((ROOT / "examples" / "sgemm" / "experiment.json").read_text())["tune"]
    assert shown == tune


TABLE = {
    "let": {"area": "m * n", "big": "area >= 4096 * num_sms"},
    "size": ["n", "m"],
    "tiers": [
        {"name": "large", "when": "big", "entry": "k_large", "block": ["T * 2"], "tile": ["T", 64]},
        {"name": "skinny", "when": "n < 32", "entry": "k_skinny", "block": [32], "grid": ["m"], "shared_bytes": "n * 4"},
        {"entry": "k_small", "block": [128], "tile": [32, 32]},
    ],
    "shared_bytes": 16,
}


def test_resolution_takes_the_first_tier_that_holds():
    launch = LaunchSpec(**TABLE)
    names = {"m": 4096, "n": 4096, "num_sms": 132, "T": 128}
    assert resolve_launch(launch, names).model_dump() == {
        "grid": (32, 64, 1), "block": (256, 1, 1), "shared_bytes": 16, "entry": "k_large", "tier": "large"}
    skinny = resolve_launch(launch, {**names, "m": 100, "n": 8})
    assert (skinny.grid, skinny.block, skinny.shared_bytes, skinny.entry) == ((100, 1, 1), (32, 1, 1), 32, "k_skinny")
    small = resolve_launch(launch, {**names, "m": 65, "n": 33})
    assert (small.grid, small.entry, small.tier, small.shared_bytes) == ((2, 3, 1), "k_small", None, 16)
    assert "tier" not in small.to_data()  # an unnamed tier: written as a launch always was


def test_resolution_errors_name_the_tier_and_field():
    launch = LaunchSpec(**TABLE)
    with pytest.raises(LaunchError) as err:
        resolve_launch(launch, {"m": 4096, "n": 4096, "num_sms": 132, "T": 0})
    assert err.value.field == "tiers[0].tile[0]" and str(err.value).startswith("tier 'large': ")
    with pytest.raises(LaunchError) as err:
        resolve_launch(launch, {"m": 4096, "n": 4096, "num_sms": 132})
    assert err.value.field == "tiers[0].tile[0]" and "unknown name 'T'" in str(err.value)
    with pytest.raises(LaunchError) as err:  # a let may not rename what the launch already sees
        resolve_launch(launch, {"m": 1, "n": 1, "num_sms": 132, "T": 8, "area": 5})
    assert err.value.field == "let.area" and "shadows" in str(err.value)
    no_default = LaunchSpec(size=["n"], tiers=[{"when": "n > 4", "block": [32], "tile": [32]}])
    with pytest.raises(LaunchError) as err:
        resolve_launch(no_default, {"n": 1})
    assert err.value.field == "tiers" and "no tier" in str(err.value)


@pytest.mark.parametrize("launch, said", [
    ({"size": ["n"], "tiers": [{"block": [1], "tile": [1]}, {"block": [1], "tile": [1]}]},
     "launch tier tiers[0].when: only the last tier may omit"),
    ({"size": ["n"], "tiers": [{"name": "a", "block": [1]}]}, "needs its tile"),
    ({"size": ["n"], "tiers": [{"name": "wide", "block": [1], "tile": [1, 2]}]},
     "launch tier 'wide' (tiers[0]).tile: 2 dimension(s), but size has 1"),
    ({"tiers": [{"block": [1], "tile": [1]}]}, "the launch gives no size"),
    ({"grid": [1], "block": [1], "size": ["n"], "tiers": [{"block": [1], "tile": [1]}]}, "not beside them"),
    ({"grid": [1], "block": [1], "size": ["n"]}, "give tiers, or drop size"),
    ({"size": ["n"]}, "Field required (or give tiers)"),
    ({"let": {"a": "b + 1", "b": "2"}, "grid": ["a"], "block": [1]}, "uses 'b', which let.b defines after it"),
    ({"let": {"cdiv": "2"}, "grid": [1], "block": [1]}, "shadows the expression function"),
    ({"let": {"x": "m.real"}, "grid": [1], "block": [1]}, "Attribute is not allowed"),
    ({"size": ["n"], "tiers": [{"when": "__import__('os')", "block": [1], "tile": [1]}]}, "unknown function"),
    ({"size": ["n"], "tiers": [{"block": ["'k'"], "tile": [1]}]}, "only numeric constants"),
    ({"size": ["n"], "tiers": [{"name": "t", "block": [1], "tile": [1]}, {"name": "t", "block": [1], "tile": [1]}]},
     "only the last tier"),
    ({"size": ["n"], "tiers": [{"when": "n > 1", "block": [1], "tile": [1]}] * 17}, "at most 16 items"),
    ({"let": {f"v{i}": i for i in range(33)}, "grid": [1], "block": [1]}, "at most 32 items"),
    ({"size": ["n"], "tiers": [{"name": "t", "when": "1", "block": [1], "tile": [1]},
                               {"name": "t", "block": [1], "tile": [1]}]}, "two tiers are named 't'"),
])
def test_a_bad_table_is_refused_when_read(launch, said):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as err:
        LaunchSpec(**launch)
    assert said in str(err.value)


def test_a_bad_table_in_an_experiment_is_one_line_naming_file_and_field(tmp_path):
    from cudaopt.experiment import load_experiment

    for name in ("input_cases.json", "reference.cu", "initial.cu", "tunable.cu"):
        (tmp_path / name).write_text((ROOT / "examples/sgemm" / name).read_text())
    config = json.loads((ROOT / "examples/sgemm/experiment.json").read_text())
    del config["vendor"]
    config["tune"]["launch"]["tiers"][2].pop("when")
    (tmp_path / "experiment.json").write_text(json.dumps(config))
    with pytest.raises(ExperimentError) as err:
        load_experiment(tmp_path / "experiment.json")
    message = str(err.value)
    assert "\n" not in message and "experiment.json" in message and "tune.launch" in message
    assert "launch tier 'splitk2r' (tiers[2]).when" in message


CASE = CaseSpec(name="sq", role="performance", scalars={"m": 4096, "n": 4096}, outputs={})


def test_check_launch_checks_the_names_of_tiers_no_case_takes():
    from cudaopt.crosschecks import check_launch

    table = json.loads(json.dumps(TABLE))
    check_launch(Path("e.json"), "tune.launch", LaunchSpec(**table), CASE, names={"T": 64})
    table["tiers"][1]["block"] = ["WARPS * 32"]  # the skinny tier: never taken by this case
    with pytest.raises(ExperimentError) as err:
        check_launch(Path("e.json"), "tune.launch", LaunchSpec(**table), CASE, names={"T": 64})
    assert err.value.field == "tune.launch.tiers[1].block[0]" and "unknown name 'WARPS'" in err.value.message
    table["tiers"][1]["block"] = [32]
    table["let"]["late"] = "later * 2"
    with pytest.raises(ExperimentError) as err:
        check_launch(Path("e.json"), "tune.launch", LaunchSpec(**table), CASE, names={"T": 64})
    assert err.value.field == "tune.launch.let.late"


def test_check_launch_names_the_tier_over_a_limit_and_every_tiers_kernel():
    from cudaopt.crosschecks import check_launch
    from cudaopt.wire.signature import parse_signature

    with pytest.raises(ExperimentError) as err:
        check_launch(Path("e.json"), "launch", LaunchSpec(**TABLE), CASE, names={"T": 1024})
    assert err.value.field == "launch.tiers[0].block[0]" and "'T * 2' gives 2048" in err.value.message
    sig = parse_signature('extern "C" __global__ void k_large(float* c, int m, int n)')
    source = "".join(f'extern "C" __global__ void {k}(float* c, int m, int n) {{}}\n' for k in ("k_large", "k_small"))
    with pytest.raises(ExperimentError) as err:  # k_skinny: no case here takes its tier, yet it must exist
        check_launch(Path("e.json"), "launch", LaunchSpec(**TABLE), CASE, names={"T": 64}, kernel=(source, sig))
    assert err.value.field == "launch.tiers[1].entry" and "k_skinny" in err.value.message


def test_the_nested_form_still_resolves_and_writes_as_before():
    plain = {"grid": ["cdiv(n, 16)", "cdiv(m, 16)"], "block": [16, 16], "shared_bytes": 0}
    assert LaunchSpec(**plain).to_data() == plain
    nested = LaunchSpec(entry="'a' if n > 4 else 'b'", grid=["n if n > 4 else 1"], block=[32])
    assert resolve_launch(nested, {"n": 8}).entry == "a" and resolve_launch(nested, {"n": 2}).grid == (1, 1, 1)


def _answer(launch: dict, tunables: dict | None = None) -> str:
    source = ('extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k) {}\n'
              'extern "C" __global__ void matmul_f32_wide(const float* a, const float* b, float* c, int m, int n, int k) {}\n')
    block = {"launch": launch, **({"tunables": tunables} if tunables else {})}
    return f"```cuda\n{source}```\n```json\n{json.dumps(block)}\n```"


def test_a_proposal_may_give_its_launch_as_a_tier_table(sgemm):
    from cudaopt.agent.proposal import ProposalError, parse

    table = {"let": {"wide": "n >= 4 * m"}, "size": ["n", "m"],
             "tiers": [{"name": "wide", "when": "wide", "entry": "matmul_f32_wide", "block": ["B"], "tile": ["B", 8]},
                       {"name": "square", "block": [16, 16], "tile": [16, 16]}]}
    proposal = parse(_answer(table, {"B": [64, 128]}), sgemm.signature, sgemm.cases(), allow_tunables=True)
    assert [t.name for t in proposal.launch.tiers] == ["wide", "square"] and len(proposal.configurations) == 2
    holdout = next(c for c in sgemm.cases() if c.name.startswith("holdout-96x3072"))
    launch = resolve_launch(proposal.launch, candidate_names(holdout.scalars, {"B": 64}, {"num_sms": 132}))
    assert (launch.entry, launch.grid, launch.block, launch.tier) == ("matmul_f32_wide", (48, 12, 1), (64, 1, 1), "wide")
    table["tiers"][0]["entry"] = "matmul_f32_gone"  # a kernel the source lacks, in a tier no case may take
    table["let"]["wide"] = "n >= 1000 * m"
    with pytest.raises(ProposalError, match=r"tiers\[0\]\.entry.*matmul_f32_gone"):
        parse(_answer(table, {"B": [64, 128]}), sgemm.signature, sgemm.cases(), allow_tunables=True)
    table["tiers"][0]["entry"] = "matmul_f32_wide"
    table["tiers"][1]["block"] = ["C * 16"]
    with pytest.raises(ProposalError, match=r"tiers\[1\]\.block\[0\].*unknown name 'C'"):
        parse(_answer(table, {"B": [64, 128]}), sgemm.signature, sgemm.cases(), allow_tunables=True)
    with pytest.raises(ProposalError, match=r"bad field 'launch'.*only the last tier may omit"):
        parse(_answer({"size": ["n"], "tiers": [{"block": [1], "tile": [1]}, {"block": [1], "tile": [1]}]}),
              sgemm.signature, sgemm.cases())
