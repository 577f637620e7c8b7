"""The BF16 linear example's kernels replayed lane by lane on the CPU (no GPU here to run them).

Each kernel's data movement is rebuilt from the expressions of ``examples/linear_bf16/tunable.cu``
itself (which rows and columns a thread loads, where it puts them in shared memory, which
registers each ``mma.sync`` and ``ldmatrix`` takes, where the partial sums go), parsed out of the
source and evaluated here, with the instructions modelled from the PTX ISA (tests/mma_model.py).
The replay sums the products exactly, so what it checks is the indexing: every product
x[i][c] * W[j][c] is summed exactly once into output (i, j), no load reads past the end of a row
or outside x and W, and every output is written exactly once, on every path (16-byte and element
loads, tails of k, rows and tokens, split-K runs that are short or empty).
"""

from __future__ import annotations

import functools
import re
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.mma_model import (IN_GROUP, GROUP, LANES, bf16_values, ldmatrix4, mma16816, wgmma,
                             wgmma_accumulator, words16)

SOURCE_PATH = ROOT / "examples" / "linear_bf16" / "tunable.cu"


@functools.cache
def source() -> str:
    return SOURCE_PATH.read_text()


def body(signature_start: str) -> str:
    """The text of the function (or struct) whose declaration starts with ``signature_start``."""
    text = source()
    start = text.index(signature_start)
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1:i]
    raise AssertionError(f"unbalanced braces after {signature_start!r}")


def c_to_python(expr: str) -> str:
    """An integer C expression of the kernel as Python over NumPy arrays of lanes (one ?: at most)."""
    expr = expr.replace("(size_t)", "").replace("(int)", "")
    ternary = re.fullmatch(r"(\w+) \? (.+?) : (.+)", expr)
    if ternary:
        expr = "({1}) if {0} else ({2})".format(*ternary.groups())
    expr = re.sub(r"\bmin\(", "np.minimum(", expr)
    expr = re.sub(r"\bmax\(", "np.maximum(", expr)
    return re.sub(r"(?<![/])/(?![/])", "//", expr)


def evaluate(expr: str, **names):
    return eval(c_to_python(expr), {"np": np}, names)  # noqa: S307 - expressions of the example's own source


def find(pattern: str, text: str | None = None, count: int | None = None):
    found = re.findall(pattern, source() if text is None else text, re.S)
    assert found and (count is None or len(found) == count), f"{pattern!r}: found {len(found)} in tunable.cu"
    return found


def mma_calls(text: str) -> list[list[str]]:
    """The argument lists (past the accumulator) of every mma16816(...) call in ``text``."""
    return [[a.strip() for a in args.split(",")][1:] for args in find(r"mma16816\(([^;]*)\);", text)]


@functools.cache
def entries() -> dict[str, dict]:
    """Each extern "C" kernel: which template it runs with which arguments, and its cluster size."""
    out = {}
    for name, call in re.findall(r'extern "C" __global__ void __launch_bounds__\([^)]*\)\s*(\w+)\([^)]*\)\s*\{\s*'
                                 r'(\w+<[^>]*>)\(x, W, b, y, m, n, k\);', source()):
        kind, args = re.match(r"(\w+)<([^>]*)>", call).groups()
        out[name] = {"kind": kind, "args": [a.strip() for a in args.split(",")], "cluster": 1}
    for name, size in re.findall(r"(\w+)\([^)]*\)\s*__cluster_dims__\(1, 1, (\d+)\);", source()):
        out[name]["cluster"] = int(size)
    return out


class Memory:
    """x and W as BF16 bit patterns, every read bounds-checked against its row and array."""

    def __init__(self, m: int, n: int, k: int, seed: int):
        rng = np.random.default_rng(seed)
        # small integers times powers of two: every product and sum is exact in float64
        self.x = (rng.integers(-8, 9, size=(m, k)).astype(np.float32) * 0.25).view(np.uint32) >> 16
        self.W = (rng.integers(-8, 9, size=(n, k)).astype(np.float32) * 0.5).view(np.uint32) >> 16
        self.m, self.n, self.k = m, n, k

    def product(self) -> np.ndarray:
        return bf16_values(self.x) @ bf16_values(self.W).T

    def load16(self, array: str, rows: np.ndarray, cols: np.ndarray, lanes: np.ndarray | None = None) -> np.ndarray:
        """A 16-byte load of columns cols .. cols + 7 of the given rows by each lane of ``lanes`` (all by
        default; the others get zeros): it must lie in the row."""
        data = getattr(self, array)
        rows, cols = np.broadcast_to(rows, (32,)), np.broadcast_to(cols, (32,))
        lanes = np.ones(32, dtype=bool) if lanes is None else lanes
        assert ((0 <= rows) & (rows < data.shape[0]))[lanes].all(), f"{array}: row out of range {rows}"
        assert ((0 <= cols) & (cols + 8 <= self.k))[lanes].all(), f"{array}: 16-byte load past the row's end {cols}"
        idx = np.where(lanes[:, None], cols[:, None] + np.arange(8), 0)
        return words16(np.where(lanes[:, None], data[np.where(lanes, rows, 0)[:, None], idx], 0))

    def load_elements(self, array: str, rows: np.ndarray, cols: np.ndarray, end: int) -> np.ndarray:
        """load_elements(): columns cols .. cols + 7 below ``end`` one at a time, zeros beyond."""
        data = getattr(self, array)
        rows, cols = np.broadcast_to(rows, (32,)), np.broadcast_to(cols, (32,))
        assert ((0 <= rows) & (rows < data.shape[0])).all() and end <= self.k
        idx = cols[:, None] + np.arange(8)
        inside = idx < end
        vals = np.where(inside, data[rows[:, None], np.where(inside, idx, 0)], 0)
        return words16(vals)


def uint4(words: np.ndarray) -> SimpleNamespace:
    return SimpleNamespace(x=words[:, 0], y=words[:, 1], z=words[:, 2], w=words[:, 3])


# ---- the stream kernels ---------------------------------------------------------------------------

def replay_stream(mem: Memory, nt: int, warps: int, unroll: int, vec: bool) -> tuple[np.ndarray, np.ndarray]:
    """Every block of linear_gelu_bf16_stream<8 nt> at the launch's grid (cdiv(n, 16)) and block (32
    warps): the sums of x W^T it stores and how often it stores each output."""
    m, n, k = mem.m, mem.n, mem.k
    rows_body = body("__device__ __forceinline__ void stream_rows(")
    group_body = body("struct Group {")
    chunk_calls = mma_calls(body("__device__ __forceinline__ void mma_chunk("))
    assert len(chunk_calls) == 2
    (lo_row,) = find(r"const bf16\* wlo = W \+ \(size_t\)(.*?) \* k;", rows_body, 1)
    (hi_row,) = find(r"const bf16\* whi = W \+ \(size_t\)(.*?) \* k;", rows_body, 1)
    (x_row,) = find(r"xs\[j\] = x \+ \(size_t\)(.*?) \* k;", rows_body, 1)
    (chunks_line,) = find(r"const int chunks = (.*?);", rows_body, 1)
    ((c0_expr, c1_expr),) = find(r"const int c0 = (min\(.*?\)), c1 = (min\(.*?\));", rows_body, 1)
    (lo_col,) = find(r"lo\[u\] = load_stream\(wlo \+ (.*?)\);", group_body, 1)
    (hi_col,) = find(r"hi\[u\] = load_stream\(whi \+ (.*?)\);", group_body, 1)
    (x_col,) = find(r"col\[u\]\[j\] = load_shared_input\(xs\[j\] \+ (.*?)\);", group_body, 1)
    (group_kk,) = find(r"now\.load\(wlo, whi, xs, (.*?)\);", rows_body, 1)
    (rest_kk,) = find(r"for \(; c < c1; \+\+c\) \{[^\n]*\n\s*const int kk = (.*?);", rows_body, 1)
    parts = find(r"mine\[(.*?)\] = acc\[j\]\[(\d)\];", rows_body, 4)
    (whole_line,) = find(r"const int whole = (.*?);", rows_body, 1)

    sums = np.zeros((m, n))
    writes = np.zeros((m, n), dtype=np.int64)
    g, t = GROUP, IN_GROUP
    for block in range(-(-n // 16)):
        row0 = block * 16
        part = np.full((warps, 8 * nt * 16), np.nan)
        for warp in range(warps):
            chunks = evaluate(chunks_line.split(",")[0], k=k)
            per = evaluate(chunks_line.split("per = ")[1], chunks=chunks, warps=warps)
            c0 = evaluate(c0_expr, chunks=chunks, warp=warp, per=per)
            c1 = evaluate(c1_expr, chunks=chunks, c0=c0, per=per)
            rows_lo = evaluate(lo_row, row0=row0, g=g, n=n)
            rows_hi = evaluate(hi_row, row0=row0, g=g, n=n)
            x_rows = [evaluate(x_row, g=g, j=j, m=m) for j in range(nt)]
            acc = [np.zeros((32, 4)) for _ in range(nt)]
            visited = []

            def chunk(lo, hi, cols):
                for j in range(nt):
                    for call in chunk_calls:
                        names = {"lo": lo, "hi": hi, "col": cols[j]}
                        regs = [eval(a, {}, names) for a in call]  # noqa: S307 - e.g. lo.x
                        mma16816(acc[j], regs[:4], regs[4:])

            c = c0
            if vec:
                whole = evaluate(whole_line, c1=c1, k=k)
                if c + unroll <= whole:
                    starts = [c]
                    c += unroll
                    while c + unroll <= whole:
                        starts.append(c)
                        c += unroll
                    for start in starts:  # the pipelined loop loads each group once, in order
                        kk = evaluate(group_kk, c=start, t=t)
                        for u in range(unroll):
                            lo = uint4(mem.load16("W", rows_lo, evaluate(lo_col, kk=kk, u=u)))
                            hi = uint4(mem.load16("W", rows_hi, evaluate(hi_col, kk=kk, u=u)))
                            cols = [uint4(mem.load16("x", x_rows[j], evaluate(x_col, kk=kk, u=u))) for j in range(nt)]
                            chunk(lo, hi, cols)
                            visited.append(start + u)
            while c < c1:
                kk = evaluate(rest_kk, c=c, t=t)
                if vec:  # lanes whose 8 columns start inside k load them (k % 8 == 0: all 8 inside), the others zeros
                    inside = kk < k
                    lo = uint4(mem.load16("W", rows_lo, kk, inside))
                    hi = uint4(mem.load16("W", rows_hi, kk, inside))
                    cols = [uint4(mem.load16("x", x_rows[j], kk, inside)) for j in range(nt)]
                else:
                    lo = uint4(mem.load_elements("W", rows_lo, kk, k))
                    hi = uint4(mem.load_elements("W", rows_hi, kk, k))
                    cols = [uint4(mem.load_elements("x", x_rows[j], kk, k)) for j in range(nt)]
                chunk(lo, hi, cols)
                visited.append(c)
                c += 1
            assert sorted(visited) == list(range(c0, c1)), (warp, c0, c1, visited)
            for j in range(nt):
                tok = 8 * j + 2 * t
                for index, which in parts:
                    where = evaluate(index, tok=tok, g=g)
                    assert np.isnan(part[warp, where]).all()  # each place written once
                    part[warp, where] = acc[j][:, int(which)]
        assert not np.isnan(part).any()
        for i in range(8 * nt * 16):  # the block's reduction, as the kernel's last loop does it
            tok, row = i >> 4, row0 + (i & 15)
            if tok < m and row < n:
                sums[tok, row] = part[:, i].sum()
                writes[tok, row] += 1
    return sums, writes


STREAM_SHAPES = [  # m, n, k: odd sizes, tails of k (k % 32 != 0, k % 8 != 0), k shorter than one chunk per warp
    (1, 33, 72), (3, 29, 37), (8, 16, 256), (5, 47, 1000), (13, 77, 1000), (16, 40, 136), (9, 17, 8), (2, 20, 520),
]


@pytest.mark.parametrize("m, n, k", STREAM_SHAPES)
@pytest.mark.parametrize("warps, unroll", [(4, 4), (8, 8), (2, 1)])
def test_the_stream_kernels_sum_every_product_once(m, n, k, warps, unroll):
    nt = 1 if m <= 8 else 2
    kernel = "linear_gelu_bf16_stream8" if nt == 1 else "linear_gelu_bf16_stream16"
    assert entries()[kernel] == {"kind": "stream_kernel", "args": [str(nt)], "cluster": 1}
    mem = Memory(m, n, k, seed=m * 1000 + n + k)
    for vec in (True, False) if k % 8 == 0 else (False,):
        sums, writes = replay_stream(mem, nt, warps, unroll, vec)
        assert (writes == 1).all(), (vec, np.argwhere(writes != 1)[:5])
        np.testing.assert_array_equal(sums, mem.product())


# ---- the tile kernels -------------------------------------------------------------------------------

def tile_shape(kernel: str) -> dict:
    """The mma.sync tile a kernel runs: its own (mma_tile_kernel) or, for a tile_entry, the one it
    falls back to where the target has no wgmma."""
    e = entries()[kernel]
    if e["kind"] == "tile_entry":
        bm, bn, _wgn, _stages, s, _fallback = e["args"]
        entry = body("__device__ __forceinline__ void tile_entry(")
        (call,) = find(r"mma_tile_kernel<BM, BN, (\d+), (\d+), FALLBACK, S>\(", entry, 1)
        wm, wn = call
    else:
        assert e["kind"] == "mma_tile_kernel"
        bm, bn, wm, wn, _stages, s = e["args"]
    assert int(s) == e["cluster"], f"{kernel}: template S {s} but __cluster_dims__ {e['cluster']}"
    return {"BM": int(bm), "BN": int(bn), "WM": int(wm), "WN": int(wn), "S": int(s)}


def wgmma_shape(kernel: str) -> dict:
    e = entries()[kernel]
    assert e["kind"] == "tile_entry"
    bm, bn, wgn, _stages, s, _fallback = e["args"]
    assert int(s) == e["cluster"], f"{kernel}: template S {s} but __cluster_dims__ {e['cluster']}"
    return {"BM": int(bm), "BN": int(bn), "WGN": int(wgn), "S": int(s)}


def k_runs(text: str, k: int, S: int) -> list[tuple[int, int]]:
    """Each cluster rank's [k0, k1), from the kernel's own expressions."""
    (run_line,) = find(r"const int run = (.*?);", text, 1)
    (k0_line,) = find(r"const int k0 = (.*?), k1", text, 1)
    (k1_line,) = find(r"k1 = (.*?);", text, 1)
    run = evaluate(run_line, k=k, S=S)
    runs = []
    for rank in range(S):
        k0 = evaluate(k0_line, k=k, rank=rank, run=run)
        runs.append((k0, evaluate(k1_line, k=k, k0=k0, run=run)))
    return runs


def fill(mem: Memory, stage: np.ndarray, written: np.ndarray, array: str, src: int, live: bool, col: int,
         k1: int, dst: int, vec: bool) -> None:
    """One thread's 16-byte copy of columns col .. col + 7 of a row (zeros where the kernel zero-fills)."""
    row = np.array([src if live else 0])
    if not live or (vec and col >= k1):
        data = np.zeros((1, 4), dtype=np.uint32)
    elif vec:
        data = mem.load16(array, row, np.array([col]))[:1]
    else:
        data = mem.load_elements(array, row, np.array([col]), k1)[:1]
    stage[dst:dst + 16] = data.view(np.uint8)[:16]
    written[dst // 16] += 1


def mma_tile_partials(mem: Memory, shape: dict, tok0: int, row0: int, vec: bool) -> list[list[tuple]]:
    """Each rank's warps of an mma.sync tile: (wm0, wn0, acc[mt][nt][lane][4]) from the kernel's
    loads, swizzle, ldmatrix addresses and MMA operands."""
    BM, BN, WM, WN, S = shape["BM"], shape["BN"], shape["WM"], shape["WN"], shape["S"]
    m, n, k = mem.m, mem.n, mem.k
    gemm = body("__device__ __forceinline__ void tile_gemm(")
    loader = body("struct Loader {")
    (swz,) = find(r"int swizzle\(int r, int q\)\s*\{\s*return (.*?);", None, 1)
    (a_off,) = find(r"a_off\[i\]\[h\] = (.*?);", gemm, 1)
    (b_off,) = find(r"b_off\[j\] = (.*?);", gemm, 1)
    (warp_line,) = find(r"const int wm0 = (.*?);", gemm, 1)
    (rq_line,) = find(r"const int c = threadIdx\.x \+ i \* T::threads, (.*?);", loader, 1)
    (src_line,) = find(r"const int src = (.*?);", loader, 1)
    assert rq_line == "r = c >> 2, q = c & 3"
    calls = mma_calls(gemm)
    assert len(calls) == 1

    def swizzle(r, q):
        return evaluate(swz, r=r, q=q)

    threads = 32 * WM * WN
    copies = (BM + BN) * 4 // threads
    stage_bytes = (BM + BN) * 64
    mt, nt = BM // WM // 16, BN // WN // 8
    ranks = []
    for k0, k1 in k_runs(gemm, k, S):
        acc = np.zeros((WM * WN, mt, nt, 32, 4))
        for s in range(-(-(k1 - k0) // 32)):
            kk = k0 + 32 * s
            stage = np.zeros(stage_bytes, dtype=np.uint8)
            written = np.zeros(stage_bytes // 16, dtype=np.int64)
            for tid in range(threads):
                for i in range(copies):
                    c = tid + i * threads
                    r, q = c >> 2, c & 3
                    is_x = r < BM
                    src = evaluate(src_line.replace("T::bm", str(BM)), is_x=is_x, tok0=tok0, r=r, row0=row0)
                    fill(mem, stage, written, "x" if is_x else "W", src, src < (m if is_x else n), kk + 8 * q, k1,
                         swizzle(r, q), vec)
            assert (written == 1).all(), "a 16-byte slot of the stage written twice or never"
            for warp in range(WM * WN):
                wm0 = evaluate(warp_line.split(",")[0], warp=warp, WN=WN, BM=BM, WM=WM)
                wn0 = evaluate(warp_line.split("wn0 = ")[1], warp=warp, WN=WN, BN=BN)
                a = [[ldmatrix4(stage, evaluate(a_off.replace("swizzle(", "sw("), wm0=wm0, i=i, lane=LANES, h=h,
                                                sw=swizzle)) for h in range(2)] for i in range(mt)]
                w = [ldmatrix4(stage, evaluate(b_off.replace("swizzle(", "sw("), BM=BM, wn0=wn0, j=j,
                                               lane=LANES, sw=swizzle)) for j in range(nt)]
                for h in range(2):
                    for i in range(mt):
                        for j in range(nt):
                            regs = [eval(c_to_python(arg), {}, {"a": a, "w": w, "i": i, "j": j, "h": h})
                                    for arg in calls[0]]  # noqa: S307
                            mma16816(acc[warp, i, j], regs[:4], regs[4:])
        ranks.append([((w // WN) * (BM // WM), (w % WN) * (BN // WN), acc[w]) for w in range(WM * WN)])
    return ranks


def wgmma_tile_partials(mem: Memory, shape: dict, tok0: int, row0: int, vec: bool) -> list[list[tuple]]:
    """Each rank's warps of a wgmma tile: (wm0, wn0, acc[1][nt][lane][4]) from the kernel's loads
    (load_rows), its descriptors and their offsets along k, and where store_tile is told each
    warp's results lie."""
    BM, BN, WGN, S = shape["BM"], shape["BN"], shape["WGN"], shape["S"]
    m, n, k = mem.m, mem.n, mem.k
    gemm = body("__device__ __forceinline__ void wgmma_gemm(")
    rows = body("__device__ __forceinline__ void load_rows(")
    (desc_expr,) = find(r"uint64_t smem_desc\(unsigned addr\)\s*\{\s*return (.*?);", None, 1)
    ((da_expr, db_expr),) = find(r"const uint64_t da = smem_desc\(stage \+ (.*?)\), db = smem_desc\(stage \+ (.*?)\);",
                                 gemm, 1)
    ((a_step, b_step),) = find(r"wgmma<WNR>\(acc\[0\], da \+ (.*?), db \+ (.*?)\);", gemm, 1)
    (kk_count,) = find(r"for \(int kk = 0; kk < (\d+); \+\+kk\)", gemm, 1)
    ((wm0_expr, wn0_expr),) = find(r"store_tile<[^>]*>\(acc, (.*?), (.*?), tok0", gemm, 1)
    (wg_line,) = find(r"const int wgm = (.*?);", gemm, 1)
    loads = find(r"load_rows<(\w+), THREADS, VEC>\(stage, (.*?), (\w+), (\w+), (\w+), k, (.*?), k1\);", gemm, 2)
    (rq_line,) = find(r"const int c = threadIdx\.x \+ i \* THREADS, (.*?);", rows, 1)
    (in_line,) = find(r"const bool in = (.*?);", rows, 1)
    ((col_expr, dst_expr),) = find(r"const int col = (.*?), dst = (.*?);", rows, 1)
    assert rq_line == "r = c >> 3, q = c & 7"

    def desc(addr: int) -> int:
        return eval(desc_expr.replace("(uint64_t)", ""), {}, {"addr": addr})  # noqa: S307

    wn = BN // WGN
    threads = 128 * (BM // 64) * WGN
    stage_bytes = (BM + BN) * 128
    names = {"BM": BM, "BN": BN, "x": "x", "W": "W", "tok0": tok0, "row0": row0, "m": m, "n": n}
    ranks = []
    for k0, k1 in k_runs(gemm, k, S):
        results = np.zeros((BM // 64 * WGN, 64, wn))
        for s in range(-(-(k1 - k0) // 64)):
            stage = np.zeros(stage_bytes, dtype=np.uint8)  # at a 1024-aligned address: 0 for the swizzle
            written = np.zeros(stage_bytes // 16, dtype=np.int64)
            for count, at, array, first, live, kk_expr in loads:
                count, at = names[count], evaluate(at, BM=BM)
                first, live, kk = names[first], names[live], evaluate(kk_expr, k0=k0, s=s)
                for tid in range(threads):
                    for i in range(count * 8 // threads):
                        c = tid + i * threads
                        r, q = c >> 3, c & 7
                        inside = evaluate(in_line.replace(" < live", " < lv"), first=first, r=r, lv=live)
                        fill(mem, stage, written, names[array], first + r, inside, evaluate(col_expr, kk=kk, q=q), k1,
                             at + evaluate(dst_expr, r=r, q=q), vec)
            assert (written == 1).all(), "a 16-byte slot of the stage written twice or never"
            for wg in range(BM // 64 * WGN):
                wgm = evaluate(wg_line.split(",")[0], wg=wg, WGN=WGN)
                wgn = evaluate(wg_line.split("wgn = ")[1], wg=wg, WGN=WGN)
                da = desc(evaluate(da_expr, wgm=wgm))
                db = desc(evaluate(db_expr, BM=BM, wgn=wgn, WNR=wn))
                for kk in range(int(kk_count)):
                    wgmma(results[wg], stage, da + evaluate(a_step, kk=kk), db + evaluate(b_step, kk=kk))
        warps = []
        for wg in range(BM // 64 * WGN):
            wgm = evaluate(wg_line.split(",")[0], wg=wg, WGN=WGN)
            wgn = evaluate(wg_line.split("wgn = ")[1], wg=wg, WGN=WGN)
            for warp in range(4):
                acc = np.zeros((1, wn // 8, 32, 4))
                for j in range(wn // 8):
                    for e in range(4):
                        acc[0, j, :, e] = results[wg][wgmma_accumulator(warp, j, e)]
                warps.append((evaluate(wm0_expr, wgm=wgm, warp=warp), evaluate(wn0_expr, wgn=wgn, WNR=wn), acc))
        ranks.append(warps)
    return ranks


def replay_tile(mem: Memory, kernel: str, vec: bool, path: str = "mma.sync") -> tuple[np.ndarray, np.ndarray]:
    """Every block (every cluster rank) of a tile kernel at the grid the launch gives it, on one of
    its paths (mma.sync, or wgmma for a tile_entry), then store_tile's epilogue."""
    shape = wgmma_shape(kernel) if path == "wgmma" else tile_shape(kernel)
    partials_of = wgmma_tile_partials if path == "wgmma" else mma_tile_partials
    BM, BN, S = shape["BM"], shape["BN"], shape["S"]
    m, n = mem.m, mem.n
    store = body("__device__ __forceinline__ void store_tile(")
    (row_expr,) = find(r"const int row = (row0 \+ wn0 .*?);", store, 1)
    (tok_expr,) = find(r"const int tok = (tok0 \+ wm0 .*?);", store, 1)
    (part_expr,) = find(r"reinterpret_cast<float2\*>\(part \+ (.*?)\)\s*=", store, 1)
    (stride_arg,) = find(r"constexpr int PART = part_stride\((\w+)\);", store, 1)
    assert stride_arg == "BN", f"store_tile's partial rows are part_stride({stride_arg}), not of the tile's width BN"
    (stride_expr,) = find(r"return (.*?);", body("__host__ __device__ constexpr int part_stride("), 1)
    ((band_tl, band_rl),) = find(r"const int tl = (.*?), rl = (.*?);", store, 1)
    stride = evaluate(stride_expr, bn=BN)
    sums = np.zeros((m, n))
    writes = np.zeros((m, n), dtype=np.int64)
    for bx in range(-(-m // BM)):
        for by in range(-(-n // BN)):
            tok0, row0 = bx * BM, by * BN
            ranks = partials_of(mem, shape, tok0, row0, vec)
            # the epilogue: where the kernel puts acc[i][j][e] of each lane (S == 1: its output; S > 1:
            # its place in the partial tile), from the kernel's own expressions; the partials in rank order
            tile = np.zeros((BM, BN))
            placed = np.zeros((BM, BN), dtype=np.int64)
            for w, (wm0, wn0, acc) in enumerate(ranks[0]):
                mt, nt = acc.shape[:2]
                for i in range(mt):
                    for j in range(nt):
                        for e in range(4):
                            h, g, t = e >> 1, GROUP, IN_GROUP
                            if S == 1:
                                tl = evaluate(tok_expr, tok0=0, wm0=wm0, i=i, g=g, h=h)
                                rl = evaluate(row_expr, row0=0, wn0=wn0, j=j, t=t) + (e & 1)
                            else:
                                where = evaluate(part_expr.replace("PART", str(stride)), wm0=wm0, i=i, g=g, h=h,
                                                 wn0=wn0, j=j, t=t) + (e & 1)
                                tl, rl = where // stride, where % stride
                            np.add.at(placed, (tl, rl), 1)
                            tile[tl, rl] = sum(rank[w][2][i, j, :, e] for rank in ranks)
            assert (placed == 1).all()
            if S == 1:
                toks, rows = np.meshgrid(np.arange(BM) + tok0, np.arange(BN) + row0, indexing="ij")
                keep = (toks < m) & (rows < n)
                sums[toks[keep], rows[keep]] = tile[keep]
                np.add.at(writes, (toks[keep], rows[keep]), 1)
            else:
                band, quads = BM // S, BN // 4
                for rank in range(S):
                    for e in range(band * quads):
                        tl = evaluate(band_tl.replace("BAND", str(band)).replace("QUADS", str(quads)), rank=rank, e=e)
                        rl = evaluate(band_rl.replace("QUADS", str(quads)), e=e)
                        tok, row = tok0 + tl, row0 + rl
                        if tok >= m or row >= n:
                            continue
                        for r in range(4):
                            if row + r < n:
                                sums[tok, row + r] = tile[tl, rl + r]
                                writes[tok, row + r] += 1
    return sums, writes


TILE_SHAPES = {  # kernel: shapes (m, n, k), odd sizes, k tails, split runs short or empty (k = 40 over 4)
    "linear_gelu_bf16_split4": [(45, 130, 77), (64, 200, 264), (20, 140, 40), (3, 9, 1)],
    "linear_gelu_bf16_split2": [(40, 129, 136), (70, 10, 33)],
    "linear_gelu_bf16": [(24, 150, 72), (65, 7, 9)],
    "linear_gelu_bf16_gemm": [(130, 140, 72), (7, 129, 40)],
    "linear_gelu_bf16_wide": [(130, 260, 136), (7, 9, 40)],
}


@pytest.mark.parametrize("path", ["wgmma", "mma.sync"])
@pytest.mark.parametrize("kernel, m, n, k", [(kn, *shape) for kn, shapes in TILE_SHAPES.items() for shape in shapes])
def test_the_tile_kernels_sum_every_product_once(kernel, m, n, k, path):
    """Both paths of every tile kernel: wgmma where the target has it (sm_90a), mma.sync elsewhere."""
    mem = Memory(m, n, k, seed=m * 7919 + n * 31 + k)
    for vec in (True, False) if k % 8 == 0 else (False,):
        sums, writes = replay_tile(mem, kernel, vec, path)
        assert (writes == 1).all(), (vec, np.argwhere(writes != 1)[:5])
        np.testing.assert_array_equal(sums, mem.product())


def test_every_kernel_is_replayed():
    assert set(entries()) == {"linear_gelu_bf16_stream8", "linear_gelu_bf16_stream16", *TILE_SHAPES}


def test_the_replay_catches_a_wrong_fragment_order(monkeypatch):
    """The replay has teeth: with the A registers of the stream kernel's MMA given in ldmatrix's
    order (rows g, g, g + 8, g + 8 where the fragment wants g, g + 8, g, g + 8), or with the tile
    kernels' ldmatrix lanes naming the matrices in the wrong order, or with the wgmma tiles' stages
    stored without the swizzle their descriptors declare, the sums come out wrong."""
    text = source()
    swapped = text.replace("mma16816(d, lo.x, hi.x, lo.y, hi.y, col.x, col.y);",
                           "mma16816(d, lo.x, lo.y, hi.x, hi.y, col.x, col.y);")
    assert swapped != text
    monkeypatch.setattr(f"{__name__}.source", lambda: swapped)
    mem = Memory(8, 16, 64, seed=3)
    sums, _ = replay_stream(mem, 1, 4, 4, True)
    assert not np.array_equal(sums, mem.product())
    reordered = text.replace("8 * ((lane >> 3) & 1), 2 * h + (lane >> 4))",
                             "8 * (lane >> 4), 2 * h + ((lane >> 3) & 1))")
    assert reordered != text
    monkeypatch.setattr(f"{__name__}.source", lambda: reordered)
    mem = Memory(64, 128, 64, seed=4)
    sums, _ = replay_tile(mem, "linear_gelu_bf16", True)
    assert not np.array_equal(sums, mem.product())
    unswizzled = text.replace("dst = r * 128 + ((q ^ (r & 7)) << 4);", "dst = r * 128 + (q << 4);")
    assert unswizzled != text
    monkeypatch.setattr(f"{__name__}.source", lambda: unswizzled)
    sums, _ = replay_tile(mem, "linear_gelu_bf16", True, "wgmma")
    assert not np.array_equal(sums, mem.product())
