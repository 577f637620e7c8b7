"""Tuning without a GPU: the space, exhaustive and sampled search, the cache, agent+tune, ablation."""

from __future__ import annotations

import functools
import json
import math
import shutil

import pytest

from cudaopt.agent.model import ModelSettings
from cudaopt.config import SpaceError, TuneSpace
from cudaopt.config import space_in_source as from_source
from cudaopt.errors import ExperimentError
from cudaopt.optimize import Options, start_or_resume
from cudaopt.record.runs import Budget, ExperimentArgs
from cudaopt.record.files import History
from cudaopt.wire.protocol import EvalRequest
from tests.conftest import SGEMM
from tests.fake_openai import FakeOpenAI
from tests.scripted import ScriptedEvaluator, answer

SMALL = {"BM": [16, 32], "BN": [16, 32], "FAIL": [0, 1]}


@pytest.fixture
def experiment(tmp_path):
    """A copy of the sgemm example whose tune space is given per test."""
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)

    def with_space(tunables, restrictions=()):
        config = json.loads((folder / "experiment.json").read_text())
        config["tune"]["tunables"] = tunables
        config["tune"]["restrictions"] = list(restrictions)
        config["tune"]["launch"] = {"grid": ["cdiv(n, BN)", "cdiv(m, BM)"], "block": [256]}
        (folder / "experiment.json").write_text(json.dumps(config))
        return ExperimentArgs(config=str(folder / "experiment.json"))

    return with_space


def tune(tmp_path, args, evaluator=None, **kwargs):
    evaluator = evaluator or ScriptedEvaluator()
    run, summary = start_or_resume(args, ModelSettings(), Budget(), tmp_path / "results", evaluator,
                                   Options(strategy="tune", **kwargs))
    return run, summary, evaluator


def attempts(run):
    return History.model_validate(run.read_json("history.json")).attempts


def test_space_enumeration_with_restrictions():
    space = TuneSpace(tunables={"X": [16, 32, 64], "Y": [1, 2, 4, 8, 16, 32], "T": [1, 2, 4, 8]},
                      restrictions=["X == Y * T"])
    configs = space.configurations()
    assert all(c["X"] == c["Y"] * c["T"] for c in configs)
    assert len(configs) == 11 and math.prod(len(v) for v in space.tunables.values()) == 72
    assert TuneSpace(tunables={"A": [0, 1]}, restrictions=["4 // A > 1"]).configurations() == [{"A": 1}]


def test_the_example_space():
    from cudaopt.experiment import load_experiment

    space = load_experiment(SGEMM / "experiment.json").tuning.space
    configs = space.configurations()
    assert 8 <= len(configs) <= 40 and len(configs) < math.prod(len(v) for v in space.tunables.values())  # exhaustive by default
    assert all(128 <= (c["BM"] // c["TM"]) * (c["BN"] // c["TN"]) <= 256 for c in configs)
    assert {c["ST"] for c in configs} == {16} and {c["SK"] for c in configs} == {32, 64}


@pytest.mark.parametrize("m, n, k, sms, tier", [
    (4096, 4096, 4096, 132, "large"),  # 512 tiles of 128 x 256: every SM busy
    (1024, 1024, 1024, 132, "splitk2r"),  # 32 large tiles would leave most SMs idle; 64 of 128 x 128, two blocks each
    (8192, 128, 4096, 132, "splitk2r"),
    (1024, 832, 512, 132, "splitk2r"),  # 56 tiles of 128 x 128: 0.42 per SM
    (1024, 768, 4096, 132, "splitk2"),  # 48 tiles of 128 x 128, under 0.4 per SM; 192 of 64 x 64, two blocks each
    (1024, 1024, 256, 132, "medium"),  # k too shallow to split
    (1536, 1536, 512, 132, "medium"),  # 72 large tiles: too few; 576 of 64 x 64: no split
    (2048, 2048, 64, 132, "large"),  # 128 tiles of 128 x 256: at least 7/8 of the SMs busy
    (515, 261, 1000, 132, "splitk8"),  # 45 tiles of 64 x 64: fewer than half the SMs, 8 blocks each
    (515, 261, 400, 132, "small"),  # the same tiles, k too shallow to split
    (256, 256, 16384, 132, "spread"),  # 4 tiles of 128 x 128, k deep: 16 clusters of 2 per tile
    (256, 256, 32768, 132, "spread"),
    (200, 200, 20000, 132, "splitk8sg"),  # 128 x 128 tiles would be 39% padding: 8 blocks per 32 x 32 tile, 2 groups
    (256, 256, 2048, 132, "splitk8s"),  # 16 tiles: fewer than a quarter of the SMs, 8 blocks per 32 x 32
    (256, 256, 16384, 16, "spread"),  # ... on a GPU of 16 SMs: 2 clusters of 2 per tile
    (256, 256, 1024, 16, "splitk4"),  # ... k too shallow for 2 clusters: 4 blocks per 64 x 64 tile
    (384, 256, 320, 132, "tiny"),  # 96 tiles of 32 x 32: too few
    (1024, 1024, 1024, 16, "large"),  # a GPU with 16 SMs: the large tiles already fill it
    (32768, 8, 4096, 132, "tiny"),  # enough tiles of every size, but 8 columns fill no half of one
    (16384, 64, 1024, 132, "splitk2"),  # a 256-column tile would be 75% padding; 256 of 64 x 64
    (8, 32768, 4096, 132, "tiny"),
    (16, 16, 16, 132, "direct"),  # at most 65536 multiply-adds: a launch costs more than the work
    (33, 65, 17, 132, "direct"),
    (64, 64, 64, 132, "tiny"),
    (1, 1, 65537, 132, "tiny"),  # deep, but a 64 x 64 tile would be almost all padding
    (96, 96, 9000, 132, "splitk8sg"),
    (300, 300, 4096, 132, "splitk8s"),  # 25 tiles: more than an eighth of the SMs
    (512, 512, 8192, 132, "spread"),  # 16 tiles of 128 x 128: 4 clusters of 2 each
    (512, 512, 2048, 132, "splitk2g"),  # k too shallow for 4: 64 tiles of 64 x 64, 2 blocks of 4 groups each
    (4096, 64, 2048, 132, "splitk2g"),
    (4096, 64, 1024, 132, "splitk8"),  # the same tiles, k under 2048
    (384, 384, 8192, 132, "spread"),  # 9 tiles of 128 x 128: 7 clusters of 2 each
    (384, 384, 4096, 132, "splitk8"),  # k too shallow for 7: 36 tiles of 64 x 64, 8 blocks each
    (256, 768, 4096, 132, "spread"),  # 12 whole tiles of 128 x 128: 5 clusters of 2 each from k = 768 * 5
    (640, 640, 8192, 132, "splitk8"),  # 25 tiles, 2 clusters each: 100 blocks leave a quarter of the SMs idle
    (256, 1152, 2048, 132, "splitk8"),  # 72 tiles of 64 x 64, k >= 1536: 8 blocks each
    (320, 1024, 1024, 132, "splitk4"),  # 80 tiles, k under 1536: 4 blocks each
    (768, 768, 12288, 132, "splitk8"),  # 144 tiles: 2 blocks each would give some SMs 3, most 2
    (896, 896, 4096, 132, "splitk2"),  # 196 tiles: 392 blocks, 3 on nearly every SM
    (1280, 1280, 4096, 132, "splitk8"),  # 400 tiles: unsplit or 2 each, the SMs' shares uneven
    (1152, 1152, 4096, 132, "splitk2"),  # 324 tiles: 648 blocks spread evenly
    (1024, 1536, 4096, 132, "medium"),  # 384 tiles: 3 per SM less 12, even enough unsplit
    (1280, 1280, 2048, 132, "medium"),  # the same tiles, k under 4096: no split
    (96, 3072, 1536, 132, "splitk8s"),  # 64-row tiles would be a third padding
    (512, 512, 256, 132, "small"),  # k too shallow to split
    (401, 333, 1501, 132, "splitk8"),  # 42 tiles of 64 x 64
    (100, 100, 1000, 132, "splitk8s"),  # 4 tiles of 64 x 64: 8 blocks per 32 x 32 tile
    (100, 100, 500, 132, "tiny"),  # k too shallow to split
])
def test_the_example_dispatches_by_waves_of_the_gpus_sms(m, n, k, sms, tier):
    """The tunable kernel's launch picks its tier, the kernel of that tier, from num_sms."""
    launch = _example_launch(m, n, k, sms, {"BM": 128, "BN": 256, "TM": 8, "TN": 16, "ST": 16})
    rows, cols, threads = {"large": (128, 256, 256), "medium": (64, 64, 128), "small": (32, 32, 64),
                           "tiny": (16, 16, 64), "direct": (16, 16, 256), "splitk2": (64, 64, 128),
                           "splitk4": (64, 64, 128), "splitk8": (64, 64, 128), "splitk8s": (32, 32, 64),
                           "splitk8sg": (32, 32, 128), "splitk2g": (64, 64, 256), "splitk2r": (128, 128, 256),
                           "spread": (128, 128, 256)}[tier]
    assert launch.entry == {"large": "matmul_f32", "spread": "matmul_f32_splitk2r"}.get(tier, f"matmul_f32_{tier}")
    split = {"splitk2": 2, "splitk4": 4, "splitk8": 8, "splitk8s": 8, "splitk8sg": 8, "splitk2g": 2,
             "splitk2r": 2}.get(tier, 1)  # blocks per tile along z, one cluster
    if tier == "spread":  # 2 blocks per cluster, as many clusters per tile as fill the SMs at one block each
        split = 2 * (sms // (2 * -(-m // 128) * -(-n // 128)))
    assert launch.grid == (-(-n // cols), -(-m // rows), split) and launch.block == (threads, 1, 1)


@functools.cache
def _example_tuning():
    from cudaopt.experiment import load_experiment

    return load_experiment(SGEMM / "experiment.json").tuning


def _example_launch(m, n, k, sms, config):
    from cudaopt.wire.launch import candidate_names, resolve_launch

    config = {"BK": 8, "MINB": 1, "SK": 32, **config}
    return resolve_launch(_example_tuning().launch, candidate_names({"m": m, "n": n, "k": k}, config,
                                                                    {"num_sms": sms}))


def test_each_kernel_the_example_launches_gets_the_grid_and_block_of_its_tier():
    """experiment.json picks one of tunable.cu's kernels per shape and sizes grid and block for
    it: on every shape and configuration the grid must cover C with that kernel's tile and the
    block must be its thread count, within its launch bounds. The tiles, thread counts and bounds
    are read from the source, so a change to either file that breaks the pairing fails here."""
    import random
    import re

    from cudaopt.wire.expr import evaluate

    source = (SGEMM / "tunable.cu").read_text()
    tiers = {name: (kind, re.findall(r"[^,<>]+", args)) for name, kind, args in
             re.findall(r"using (\w+) = (\w+)Tier<([^;]*)>;", source)}
    tiers["Split"] = tiers[re.search(r"using Split = (\w+);", source).group(1)]
    kernels = {name: (bound, tier, int(groups or 1)) for bound, name, tier, groups, spreads in re.findall(
        r'extern "C" __global__ void __launch_bounds__\((\d+)[^)]*\)\s*(\w+)\([^)]*\)\s*\{'
        r'.*?(?:staged|async|direct|splitk)_gemm<(\w+)(?:, \d+(?:, (\d+)(, true)?)?)?>',
        source, re.DOTALL)}  # groups: of the tier's threads, each summing its own share of k
    spreading = set(re.findall(r'(\w+)\([^)]*\)\s*\{[^{}]*splitk_gemm<[^>]*, true>', source))
    workspace = int(re.search(r"constexpr int SPREAD_FLOATS = 1 << (\d+);", source).group(1))
    workspace, counters = 1 << workspace, int(re.search(r"constexpr int SPREAD_COUNTERS = (\d+);", source).group(1))
    assert spreading == {"matmul_f32_splitk2r"}
    clusters = {name: int(z) for name, z in re.findall(r'(\w+)\([^)]*\) __cluster_dims__\(1, 1, (\d+)\);', source)}
    assert sorted(kernels) == ["matmul_f32", "matmul_f32_direct", "matmul_f32_medium", "matmul_f32_small",
                               "matmul_f32_splitk2", "matmul_f32_splitk2g", "matmul_f32_splitk2r", "matmul_f32_splitk4",
                               "matmul_f32_splitk8",
                               "matmul_f32_splitk8s", "matmul_f32_splitk8sg", "matmul_f32_tiny"]

    def tile(tier, config):  # rows, cols and threads of a tier: TM x TN outputs per thread, or one
        kind, args = tiers[tier]
        if kind == "Direct":
            rows, cols = (int(evaluate(a.strip(), config)) for a in args)
            return rows, cols, rows * cols
        rows, cols, _, tm, tn = (int(evaluate(a.strip(), config)) for a in args[:5])
        return rows, cols, (rows // tm) * (cols // tn)

    rng = random.Random(7)
    shapes = [(rng.choice([1, 8, 31, 64, 100, 512, 777, 2048, 5000, 32768]), rng.randint(1, 9000),
               rng.choice([1, 7, 64, 1000, 4096])) for _ in range(300)]
    shapes += [(401, 333, 1501), (384, 384, 2048), (96, 96, 9000), (512, 512, 4096),
               (1024, 1024, 1024)]  # the split-K tiers' narrow ranges
    configs = _example_tuning().space.configurations()
    seen = set()
    for config in (configs[0], configs[-1]):
        for sms in (16, 108, 132):
            for m, n, k in shapes + [(n, m, k) for m, n, k in shapes]:
                launch = _example_launch(m, n, k, sms, config)
                bound, tier, groups = kernels[launch.entry]
                rows, cols, threads = tile(tier, config)
                threads *= groups
                assert launch.grid[:2] == (-(-n // cols), -(-m // rows)), (m, n, sms, config)
                cluster, ways = clusters.get(launch.entry, 1), launch.grid[2] // clusters.get(launch.entry, 1)
                assert launch.grid[2] == cluster * ways and ways >= 1, (m, n, k, sms, config)  # whole clusters
                if ways > 1:  # a tile spread over several clusters: within the workspace
                    tiles = launch.grid[0] * launch.grid[1]
                    assert launch.entry in spreading, (m, n, k, sms, config)
                    assert ways * tiles * rows * cols <= workspace and tiles * cluster <= counters, (m, n, k, sms)
                assert launch.block == (threads, 1, 1) and threads <= int(bound), (m, n, sms, config)
                seen.add(launch.entry)
    assert seen == set(kernels)


def test_space_from_a_kernel_comment_block():
    source = '/* cudaopt-tune {"tunables": {"B": [64, 128]}, "launch": {"grid": ["cdiv(n, B)"], "block": ["B"]}} */\n'
    space = from_source(source + 'extern "C" __global__ void f(float* x, int n) {}')
    assert space.configurations() == [{"B": 64}, {"B": 128}] and space.launch.block == ["B"]
    assert from_source("no block here") is None
    with pytest.raises(SpaceError, match="not valid JSON"):
        from_source("/* cudaopt-tune {nope} */")
    with pytest.raises(SpaceError, match="tunables"):
        from_source('/* cudaopt-tune {"tunables": {"B": []}} */')


def test_exhaustive_tuning_leaves_the_run_directory(tmp_path, experiment):
    run, summary, evaluator = tune(tmp_path, experiment(SMALL), max_evals=100)
    tuned = [a for a in attempts(run) if a.kind == "tune"]
    assert len(tuned) == 8 and summary.stop_reason == "search space exhausted"
    failed = [a for a in tuned if a.defines["FAIL"] == 1]
    assert all(a.status == "compile_error" and a.score_us is None for a in failed)  # never timed as zero
    assert summary.strategy == "tune" and summary.model == {"model": None}
    assert summary.best_defines == {"BM": 32, "BN": 32, "FAIL": 0}
    best = run.file("best.cu").read_text()
    assert best.startswith("// tuned values") and "#define BM 32\n" in best and "#define FAIL 0\n" in best
    assert run.read_json("best-launch.json")["grid"] == ["cdiv(n, 32)", "cdiv(m, 32)"]
    request = EvalRequest.model_validate(run.read_json("best-case-1.json"))
    assert request.kernel.defines == {"BM": 32, "BN": 32, "FAIL": 0}
    assert summary.speedup > 1
    assert run.file("heatmap.png").is_file()


def test_an_exhaustive_sweep_asks_to_compile_its_uncached_configurations_up_front(tmp_path, experiment):
    class Prefetching(ScriptedEvaluator):
        def prefetch(self, kernels):
            self.measured_before.append([r.kernel.defines for r in self.attempts])
            super().prefetch(kernels)

    args = experiment(SMALL)
    first, again = Prefetching(), Prefetching()
    first.measured_before, again.measured_before = [], []
    tune(tmp_path, args, first, max_evals=100)
    # the sweep's 8, asked before the baseline is measured (they compile beside it), and again with their
    # batch (the worker compiles each once); the winner's finalists' rounds, one request each, compile as they go
    assert [len(kernels) for kernels in first.prefetched] == [8, 8] and first.measured_before[0] == []
    assert first.prefetched[0] == first.prefetched[1]
    tune(tmp_path, args, again, max_evals=100)  # all cached now: nothing to compile ahead
    assert again.attempts == [] and again.prefetched == []
    assert [r.id for r in again.requests][:3] == [f"finalist-{again.requests[0].id.split('-')[1]}-{i}" for i in range(3)]


def test_large_spaces_are_sampled_within_the_budget_and_repeatably(tmp_path, experiment):
    space = {"BM": [16, 32, 64, 128], "BN": [16, 32, 64, 128], "BK": [8, 16, 32]}
    args = experiment(space, ["BM * BN <= 8192"])
    first, summary, _ = tune(tmp_path / "a", args, max_evals=10, seed=3, use_cache=False)
    second, _, _ = tune(tmp_path / "b", args, max_evals=10, seed=3, use_cache=False)
    picked = [a.defines for a in attempts(first) if a.kind == "tune"]
    assert len(picked) == 10 and len({tuple(sorted(d.items())) for d in picked}) == 10
    assert all(d["BM"] * d["BN"] <= 8192 for d in picked)
    assert picked == [a.defines for a in attempts(second) if a.kind == "tune"]
    assert summary.stop_reason == "evaluation budget exhausted"


def test_identical_configurations_are_never_measured_twice(tmp_path, experiment):
    args = experiment(SMALL)
    tune(tmp_path, args, max_evals=100)
    run, summary, evaluator = tune(tmp_path, args, max_evals=100)  # same results/cache
    assert evaluator.attempts == []  # measured again only to crown the winner
    assert {r.id.split("-")[0] for r in evaluator.requests} == {"finalist", "audit"}
    assert all(a.cached and a.eval_seconds == 0 for a in attempts(run))
    assert summary.totals.gpu_seconds == 0


def test_tune_needs_a_tunable_kernel(tmp_path):
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    config = json.loads((folder / "experiment.json").read_text())
    del config["tune"]
    (folder / "experiment.json").write_text(json.dumps(config))
    with pytest.raises(ExperimentError, match="tune: the experiment declares no tunable kernel"):
        tune(tmp_path, ExperimentArgs(config=str(folder / "experiment.json")))


def tunable_answer(tunables: dict) -> str:
    text = answer("ok 0.8", "tile sizes to sweep", launch={"grid": ["cdiv(n, BN)", "cdiv(m, BM)"], "block": [256]})
    return text.replace('"rationale"', f'"tunables": {json.dumps(tunables)}, "rationale"')


def test_agent_plus_tune_sweeps_the_tunables_a_proposal_declares(tmp_path, experiment, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    args = experiment(SMALL)
    with FakeOpenAI([tunable_answer({"BM": [16, 32], "BN": [32, 64]})]) as server:
        settings = ModelSettings(base_url=server.url)
        run, summary = start_or_resume(args, settings, Budget(max_iterations=1), tmp_path / "results",
                                       ScriptedEvaluator(), Options(strategy="agent+tune"))
    history = attempts(run)
    assert [a.kind for a in history] == ["baseline", "proposal", "tune", "tune", "tune"]
    assert all(a.parent == 1 for a in history[2:])
    assert summary.best_defines == {"BM": 32, "BN": 64}
    assert "tunables" in server.requests[0]["messages"][0]["content"]  # the system prompt offers them


def test_agent_alone_rejects_tunables(tmp_path, experiment, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    with FakeOpenAI([tunable_answer({"BM": [16, 32]})]) as server:
        run, _ = start_or_resume(experiment(SMALL), ModelSettings(base_url=server.url), Budget(max_iterations=1),
                                 tmp_path / "results", ScriptedEvaluator(), Options(strategy="agent"))
    assert "only swept with --strategy agent+tune" in attempts(run)[1].reason


def test_ablation_reports_what_the_agent_added_beyond_tuning(tmp_path, experiment, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    with FakeOpenAI([answer("ok 0.1", "a much better idea")]) as server:
        run, summary = start_or_resume(experiment(SMALL), ModelSettings(base_url=server.url), Budget(max_iterations=1),
                                       tmp_path / "results", ScriptedEvaluator(),
                                       Options(strategy="agent", ablation=True, max_evals=100))
    ablation = summary.ablation
    assert ablation["run"] == "ablation" and run.file("ablation/history.json").is_file()
    assert ablation["tune_only_best_defines"] == {"BM": 32, "BN": 32, "FAIL": 0}
    assert ablation["agent_gain_over_tuning"] == pytest.approx(ablation["tune_only_best_score_us"]
                                                               / ablation["final_best_score_us"])
    assert ablation["agent_gain_over_tuning"] > 1


def test_a_baked_launch_takes_the_same_decisions_with_the_tunables_written_in():
    """best-launch.json is the tune launch with the winner's values written in: it must pick the
    same kernel, grid and block on every shape, and leave quoted kernel names alone."""
    from cudaopt.record.bake import bake_launch
    from cudaopt.wire.launch import resolve_launch
    from cudaopt.wire.protocol import LaunchSpec

    assert bake_launch({"entry": "'B' if B > 1 else 'small_B'", "grid": ["cdiv(n, B)"], "block": [16]}, {"B": 64}) == {
        "entry": "'B' if 64 > 1 else 'small_B'", "grid": ["cdiv(n, 64)"], "block": [16]}
    tuning = _example_tuning()
    config = tuning.space.configurations()[-1]
    baked = LaunchSpec(**bake_launch(tuning.launch.to_data(), config))
    for m, n in [(4096, 4096), (1024, 1024), (515, 261), (256, 256), (8, 32768)]:
        names = {"m": m, "n": n, "k": 64, "num_sms": 132}
        assert resolve_launch(baked, names) == _example_launch(m, n, 64, 132, config)


def test_the_example_launch_splits_k_where_its_tiles_cannot_fill_the_gpu():
    """Shapes (k >= 512) whose 64 x 64 output tiles number at most twice the SMs go to split-K:
    2, 4 or 8 blocks per tile as the tiles are fewer (grid z, one cluster per tile), 8 per 32 x 32
    tile where 64 x 64 tiles are very few or mostly padding; shallow k or tiles enough keep their
    tier. The GPU test (tests/gpu/test_splitk_gpu.py) checks the same shapes' outputs."""
    from tests.gpu.test_splitk_gpu import SHAPES

    for config in (_example_tuning().space.configurations()[0], _example_tuning().space.configurations()[-1]):
        for (m, n, k), entry in SHAPES.items():
            launch = _example_launch(m, n, k, 132, config)
            assert launch.entry == entry, (m, n, k, config)
        assert _example_launch(512, 512, 256, 132, config).entry == "matmul_f32_small"  # k too shallow to split
        assert _example_launch(4096, 4096, 4096, 132, config).entry == "matmul_f32"
        assert _example_launch(1024, 1024, 4096, 132, config).entry in ("matmul_f32", "matmul_f32_splitk2r")
        assert _example_launch(4096, 4096, 4096, 16, config).entry == "matmul_f32"  # a GPU that large tiles fill
        assert _example_launch(1, 4096, 4096, 132, config).entry == "matmul_f32_tiny"  # under half a tile: padding
        assert _example_launch(16, 16, 16384, 132, config).entry == "matmul_f32_tiny"
