"""The softmax kernels' float32 arithmetic, replayed in NumPy in the kernels' own order (each
thread's sequential sums, the xor butterflies of the warp reductions, the merge of (max, sum)
pairs across warps and across the blocks of a cluster), checked against a float64 softmax with
the example's tolerances: the tolerances hold the kernels' rounding with room, and the
exponent formed by one FMA keeps rows of large magnitude accurate."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_softmax_example import _experiment

F = np.float32
LOG2E = F(1.4426950408889634)
NEG_INF = F(-np.inf)


def _exp2_fma(v, mL):
    """exp2f(fmaf(v, LOG2E, -mL)): the product is exact in float64, the FMA rounds once."""
    with np.errstate(invalid="ignore", over="ignore"):
        t = (np.asarray(v, np.float64) * np.float64(LOG2E) - np.asarray(mL, np.float64)).astype(F)
        return np.exp2(t)


def _merge(am, as_, bm, bs):
    m = np.maximum(am, bm)
    with np.errstate(invalid="ignore", over="ignore"):
        s = as_ * np.exp2(am - m) + bs * np.exp2(bm - m)
    return m, np.where(m == NEG_INF, F(0), s).astype(F)


def _butterfly(m, s, width=32):
    """An xor-shuffle reduction over the last axis (lanes), as group_max/warp_stat do it."""
    lanes = np.arange(m.shape[-1])
    off = width // 2
    while off:
        m, s = _merge(m, s, m[..., lanes ^ off], s[..., lanes ^ off])
        off //= 2
    return m, s


def _block(m, s):
    """block_stat: each warp's butterfly, then the warps' pairs (padded to 32) in one more."""
    warps = m.size // 32
    m, s = _butterfly(m.reshape(warps, 32), s.reshape(warps, 32))
    pad = lambda a, fill: np.concatenate([a[:, 0], np.full(32 - warps, fill, F)])  # noqa: E731
    m, s = _butterfly(pad(m, NEG_INF), pad(s, F(0)))
    return m[0], s[0]


def _per_thread(values, threads, vec):
    """values laid out as threads see them: [k, thread, 4] (float4 t + T*k) or [k, thread]
    (element t + T*k), padded with -inf."""
    width = 4 * threads if vec else threads
    padded = np.full(-(-values.size // width) * width, NEG_INF, F)
    padded[:values.size] = values
    return padded.reshape(-1, threads, 4) if vec else padded.reshape(-1, threads)


def _sequential_pairs(lay):
    """Each thread's maximum (times log2 e) and its sequential sum of exponentials over ``lay``."""
    m = lay.max(axis=(0, 2) if lay.ndim == 3 else 0)
    mL = (m * LOG2E).astype(F)
    s = np.zeros_like(mL)
    for k in range(lay.shape[0]):
        e = _exp2_fma(lay[k], mL[:, None] if lay.ndim == 3 else mL)
        step = (e[:, 0] + e[:, 1]) + (e[:, 2] + e[:, 3]) if lay.ndim == 3 else e
        s = (s + np.where(np.isnan(step), F(0), step)).astype(F)
    return mL, np.where(m == NEG_INF, F(0), s).astype(F)


def _thread_pairs(lay, phases=4):
    """load_part: each thread's pair per phase (a quarter of its items, in order), merged in order."""
    span = -(-lay.shape[0] // phases)
    pair = (np.full(lay.shape[1], NEG_INF, F), np.zeros(lay.shape[1], F))
    for p in range(phases):
        chunk = lay[p * span:(p + 1) * span]
        if chunk.shape[0]:
            pair = _merge(*pair, *_sequential_pairs(chunk))
    return pair


def cluster_row(row, cl, threads, vec):
    """softmax_rows_cluster on one row: each block's part in shared memory, pairs merged by rank."""
    part = 4 * -(-row.size // (4 * cl))
    total = (NEG_INF, F(0))
    for rank in range(cl):
        mL, s = _thread_pairs(_per_thread(row[rank * part:(rank + 1) * part], threads, vec))
        total = _merge(*total, *_block(mL, s))
    ML, S = total
    return (_exp2_fma(row, ML) * (F(1) / S)).astype(F)


def tile_row(row, lanes, vec, group=None):
    """The register-held rows (group_rows, block_row): the maximum first, then each thread's sum
    of its float4 slots, reduced over a group of lanes or over the block."""
    lay = _per_thread(row, lanes, vec)
    m = lay.max(axis=(0, 2) if vec else 0)
    if group:
        mL = (_butterfly(m, np.zeros_like(m), group)[0][0] * LOG2E).astype(F)
    else:
        mL = (_block(m, np.zeros_like(m))[0] * LOG2E).astype(F)
    e = np.nan_to_num(_exp2_fma(lay, mL), nan=0.0).astype(F)
    s = np.zeros(lanes, F)
    for k in range(lay.shape[0]):
        s = (s + ((e[k, :, 0] + e[k, :, 1]) + (e[k, :, 2] + e[k, :, 3]) if vec else e[k])).astype(F)
    if group:
        lanes_ = np.arange(lanes)
        off = group // 2
        while off:
            s = (s + s[lanes_ ^ off]).astype(F)
            off //= 2
        total = s[0]
    else:
        warps = s.reshape(-1, 32)
        for off in (16, 8, 4, 2, 1):
            warps = (warps + warps[:, np.arange(32) ^ off]).astype(F)
        total = np.concatenate([warps[:, 0], np.zeros(32 - warps.shape[0], F)])
        for off in (16, 8, 4, 2, 1):
            total = (total + total[np.arange(32) ^ off]).astype(F)
        total = total[0]
    return (_exp2_fma(row, mL) * (F(1) / total)).astype(F)


def _softmax64(row):
    e = np.exp(row.astype(np.float64) - row.max())
    return e / e.sum()


def _within(out, row, case):
    tol = _experiment().case_specs[[c.name for c in _experiment().case_specs].index(case)].outputs["y"]
    ref = _softmax64(row)
    excess = np.abs(out - ref) / (tol.atol + tol.rtol * np.abs(ref))
    return float(excess.max())


@pytest.mark.parametrize("threads", [512, 1024])
def test_the_cluster_kernel_on_a_kernelbench_row(threads):
    row = np.random.default_rng(1).standard_normal(393216, dtype=F)
    for vec in (True, False):
        assert _within(cluster_row(row, 8, threads, vec), row, "kernelbench-4096x393216") < 0.5


@pytest.mark.parametrize("case, mean, std, low, high", [
    ("wide-range-5x1000", None, None, -100, 100), ("shifted-up-4x1536", 80, 5, None, None),
    ("shifted-down-6x700", -110, 4, None, None), ("rows1024-16384x1024", 0, 1, None, None),
    ("rows32-65536x32", 0, 1, None, None), ("rows4096-8192x4096", 0, 1, None, None)])
def test_the_register_held_kernels_and_the_cluster_on_hard_rows(case, mean, std, low, high):
    rng = np.random.default_rng(2)
    cols = _experiment().case_specs[[c.name for c in _experiment().case_specs].index(case)].scalars["cols"]
    for _ in range(3):
        row = (rng.uniform(low, high, cols) if low is not None else rng.normal(mean, std, cols)).astype(F)
        lanes = 8 if cols <= 32 else (16 if cols <= 64 else 32)
        outs = [cluster_row(row, 8, 128, True)]
        if cols <= 512:  # the warp kernel's register-held path
            outs.append(tile_row(row, lanes, True, group=lanes))
            outs.append(tile_row(row, lanes, False, group=lanes))
        if cols > 512:  # the block kernel's
            outs.append(tile_row(row, 32 * -(-cols // (32 * 16)), True))
        for out in outs:
            assert _within(out, row, case) < 0.5, case
