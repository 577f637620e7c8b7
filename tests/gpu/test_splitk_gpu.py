"""The example SGEMM's split-K tier on the GPU: on deep-k shapes whose 64 x 64 output tiles cannot
fill it twice, the launch sends the case to a split-K kernel (a cluster of 2, 4 or 8 blocks per
64 x 64 tile, 8 per 32 x 32 tile or 2 per 128 x 128 tile; grid z = the cluster size, or for the
deepest k on the fewest 128 x 128 tiles several clusters per tile through the workspace; in splitk8sg,
splitk2g and splitk2r each block's k split again among groups of threads) and every output passes the reference's check, on
vectorised and element-wise paths, whole and partial tiles, and runs of k that end early; a shape with tiles enough stays on its tier. Each shape is made from the example's
template case the way `verify --shapes` makes them (the same tolerances)."""

from __future__ import annotations

import json

import pytest

from cudaopt.winner.shapes import load_shapes
from tests.gpu.conftest import FAST

pytestmark = pytest.mark.gpu

SHAPES = {  # (m, n, k): the kernel the launch must pick on an H200 (132 SMs)
    (256, 256, 16384): "matmul_f32_splitk2r",   # 4 tiles of 128 x 128, k deep: 16 clusters of 2 per tile
    (200, 200, 20000): "matmul_f32_splitk8sg",  # 128-row tiles 39% padding: 8 blocks of 2 groups per 32 x 32
    (96, 96, 9001): "matmul_f32_splitk8sg",     # k % 4 != 0; partial tiles
    (40, 72, 4100): "matmul_f32_splitk8sg",     # runs of 288: group 14 of 16 short, group 15 empty
    (256, 256, 2048): "matmul_f32_splitk8s",    # the same tiles, k under 4096
    (96, 3072, 1536): "matmul_f32_splitk8s",    # 96 rows: 64-row tiles would be a third padding
    (40, 72, 1025): "matmul_f32_splitk8s",      # runs of 160 (whole 32-deep slices): rank 6 short, rank 7 empty
    (384, 384, 2048): "matmul_f32_splitk8",    # 36 tiles of 64 x 64
    (401, 333, 1501): "matmul_f32_splitk8",    # k % 4 != 0: element-wise loads; partial tiles
    (515, 261, 1031): "matmul_f32_splitk8",    # the example's holdout; runs of 144: rank 7 short (23)
    (512, 512, 8192): "matmul_f32_splitk2r",   # 16 tiles of 128 x 128: 4 clusters of 2 each
    (384, 384, 8192): "matmul_f32_splitk2r",   # 9 tiles: 7 clusters of 2 each, 126 blocks
    (512, 512, 2048): "matmul_f32_splitk2g",   # 64 tiles of 64 x 64: 2 blocks of 4 groups each
    (64, 4096, 2048): "matmul_f32_splitk2g",   # skinny: the same
    (450, 500, 2051): "matmul_f32_splitk2g",   # k % 4 != 0: element-wise loads; partial tiles
    (777, 333, 555): "matmul_f32_splitk4",     # 78 tiles, k too shallow for 8 runs of 128
    (128, 8192, 4096): "matmul_f32_splitk2r",  # 64 tiles of 128 x 128: 2 blocks of 2 groups each
    (1000, 1000, 1003): "matmul_f32_splitk2r",  # k % 4 != 0; partial tiles; runs of 256: group 3 short (235)
    (1024, 768, 1024): "matmul_f32_splitk2",   # 48 tiles of 128 x 128, 192 of 64 x 64: 2 blocks each
    (1024, 1536, 512): "matmul_f32_medium",    # 384 tiles: enough without splitting k
}
WAYS = {(256, 256, 16384): 16, (512, 512, 8192): 4, (384, 384, 8192): 7}  # clusters per tile (spread)
SPLIT = {"matmul_f32_splitk2": 2, "matmul_f32_splitk4": 4, "matmul_f32_splitk8": 8, "matmul_f32_splitk8s": 8,
         "matmul_f32_splitk8sg": 8, "matmul_f32_splitk2g": 2, "matmul_f32_splitk2r": 2}


@pytest.fixture
def deep_cases(sgemm, tmp_path):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({"template": "square-4096",
                                "shapes": [{"m": m, "n": n, "k": k} for m, n, k in SHAPES]}))
    return load_shapes(path, sgemm)


@pytest.mark.parametrize("which", [0, -1])
def test_split_k_is_picked_and_passes_on_deep_and_skinny_shapes(supervisor, sgemm, deep_cases, which):
    tuning = sgemm.tuning
    config = tuning.space.configurations()[which]
    request = sgemm.request(tuning.source, launch=tuning.launch, defines=config, protocol=FAST)
    request.cases = [c.model_copy(update={"role": "performance"}) for c in deep_cases]  # timed, not only checked
    result = supervisor.evaluate(request)
    failures = [(c.name, c.status, c.reason[:300]) for c in result.cases if c.status != "ok"]
    assert result.status == "ok", (config, failures)
    if result.device.sm_count != 132:
        pytest.skip(f"the expected tiers are for 132 SMs, this GPU has {result.device.sm_count}")
    for (m, n, k), entry in SHAPES.items():
        case = result.case(f"m={m},n={n},k={k}")
        assert case.launch.entry == entry, (m, n, k, case.launch)
        z = SPLIT.get(entry, 1) * WAYS.get((m, n, k), 1)
        tile = 32 if entry in ("matmul_f32_small", "matmul_f32_splitk8s", "matmul_f32_splitk8sg") else \
            128 if entry == "matmul_f32_splitk2r" else 64
        assert case.launch.grid == (-(-n // tile), -(-m // tile), z), (m, n, k, case.launch)
        assert case.timing is not None
    print(config, {c.name: round(c.timing.median_us, 1) for c in result.cases})
    info = result.compile.entries
    for name in SPLIT:
        assert info[name].spill_stores == 0 and info[name].local_bytes == 0, (name, info[name])



SPREAD = [  # (entry, tile, m, n, k, W): W clusters of 2 blocks per tile, the partials added through the workspace
    ("matmul_f32_splitk2r", 128, 256, 256, 32768, 16),  # 4 tiles, 64 runs of 512
    ("matmul_f32_splitk2r", 128, 300, 200, 9001, 5),    # k % 4 != 0, partial tiles, an odd W
    ("matmul_f32_splitk2r", 128, 130, 129, 600, 13),    # runs of 16: the last groups empty
]


def test_a_tile_spread_over_several_clusters_passes_on_every_launch(supervisor, sgemm, tmp_path):
    """splitk2r and splitk2g with W clusters per tile (grid z = 2W): each cluster's partial goes
    to the module's workspace and the last of the W to arrive adds them. Every check and every
    timed launch must pass, so the arrival counters are back at zero after each launch (the
    launches of one request share the module), whatever W the previous shape used."""
    from cudaopt.wire.protocol import LaunchSpec

    path = tmp_path / "spread.json"
    path.write_text(json.dumps({"template": "square-4096", "shapes": [{"m": m, "n": n, "k": k} for m, n, k in
                                                                    dict.fromkeys(s[2:5] for s in SPREAD)]}))
    cases = [c.model_copy(update={"role": "performance"}) for c in load_shapes(path, sgemm)]
    tuning = sgemm.tuning
    for entry, tile, m, n, k, ways in SPREAD:
        launch = LaunchSpec.model_validate({"entry": entry, "block": [256], "grid": [
            f"cdiv(n, {tile})", f"cdiv(m, {tile})", 2 * ways], "shared_bytes": 65536 if tile == 128 else 0})
        request = sgemm.request(tuning.source, launch=launch, defines=tuning.space.configurations()[0], protocol=FAST)
        request.cases = cases  # every shape with this W: the counters of one shape's launch meet the next's
        result = supervisor.evaluate(request)
        failures = [(c.name, c.status, c.reason[:300]) for c in result.cases if c.status != "ok"]
        assert result.status == "ok", (entry, ways, failures)


def test_a_launch_the_workspace_cannot_hold_fails_loudly(supervisor, sgemm, tmp_path):
    """More clusters per tile than the workspace holds: the kernel traps (an error, never a
    partial sum read from another tile's slots)."""
    from cudaopt.wire.protocol import LaunchSpec

    path = tmp_path / "big.json"
    path.write_text(json.dumps({"template": "square-4096", "shapes": [{"m": 2048, "n": 2048, "k": 2048}]}))
    cases = [c.model_copy(update={"role": "performance"}) for c in load_shapes(path, sgemm)]
    launch = LaunchSpec.model_validate({"entry": "matmul_f32_splitk2r", "block": [256],
                                        "grid": ["cdiv(n, 128)", "cdiv(m, 128)", 2 * 16], "shared_bytes": 65536})
    tuning = sgemm.tuning
    request = sgemm.request(tuning.source, launch=launch, defines=tuning.space.configurations()[0], protocol=FAST)
    request.cases = cases
    result = supervisor.evaluate(request)
    assert result.status != "ok" and result.cases[0].status in ("launch_error", "crashed"), result.cases[0]
