"""The softmax example without a GPU: it loads and checks, every kernel of every configuration
compiles without spills, the launch picks a kernel that holds each shape where its fast path
needs it, and a model of each kernel's indexing (which thread reads and writes which element)
writes every output exactly once and reads nothing outside its row."""

from __future__ import annotations

import functools
import math
import random
import re

import numpy as np
import pytest

from tests.conftest import ROOT

SOFTMAX = ROOT / "examples" / "softmax"
KERNELS = ("softmax_rows", "softmax_rows_warp", "softmax_rows_warp4", "softmax_rows_block", "softmax_rows_cluster")
WARP_KERNELS = ("softmax_rows_warp", "softmax_rows_warp4")
SHARED_OPTIN = 232448  # bytes of shared memory a block may have on sm_90 (static and dynamic)
SMS = 132  # an H200's SMs: the launch's num_sms here


@functools.cache
def _experiment():
    from cudaopt.experiment import load_experiment

    return load_experiment(SOFTMAX / "experiment.json")


@functools.cache
def _source() -> str:
    return (SOFTMAX / "tunable.cu").read_text()


def _bounds(config: dict) -> dict[str, int]:
    """Each kernel's __launch_bounds__ thread count, read from the source, with ``config``'s values."""
    from cudaopt.wire.expr import evaluate_int

    defines = {name: int(value) for name, value in re.findall(r"#define (\w+) (\d+)", _source())}
    found = re.findall(r'extern "C" __global__ void __launch_bounds__\(([^,)]+)[^)]*\)\s*(\w+)\(', _source())
    return {name: evaluate_int(bound.strip(), {**defines, **config}) for bound, name in found}


def _launch(rows: int, cols: int, config: dict, sms: int = SMS):
    from cudaopt.wire.launch import candidate_names, resolve_launch

    return resolve_launch(_experiment().tuning.launch, candidate_names({"rows": rows, "cols": cols}, config,
                                                                        {"num_sms": sms}))


def test_the_example_loads_with_both_pytorch_vendors_and_every_role():
    exp = _experiment()
    assert exp.signature.name == "softmax_rows" and exp.reference_kind == "cu"
    assert [(v.label, v.arrays, v.returns, v.pytorch) for v in exp.vendors] == [
        ("PyTorch eager", "torch", True, "eager"), ("torch.compile", "torch", True, "compile")]
    roles = [c.role for c in exp.case_specs]
    assert roles.count("performance") == 5 and roles.count("holdout") == 2 and roles.count("correctness") >= 10
    perf = {c.name: c.scalars for c in exp.case_specs if c.role == "performance"}
    assert perf["kernelbench-4096x393216"] == {"rows": 4096, "cols": 393216}  # KernelBench level 1, problem 23
    assert all(c.bytes == "8*rows*cols" for c in exp.case_specs if c.role != "correctness")
    assert len(exp.tuning.space.configurations()) == 4


def test_check_says_ready(tmp_path):
    from typer.testing import CliRunner

    from cudaopt.cli import app

    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["check", "--config", str(SOFTMAX / "experiment.json")])
    assert result.exit_code == 0, result.output
    assert "ready" in result.output and "4 configurations" in result.output


def test_the_tolerances_reject_a_copy_zeros_and_a_constant():
    """On every case but the single element, the arithmetic is what is checked: a copy of the
    input, zeros, a uniform 1/cols and a softmax without the maximum subtracted (where a naive
    exp overflows or underflows) fail the case's tolerances on input set 0."""
    from cudaopt.worker.inputs import generate

    exp = _experiment()
    naive_fails = set()
    for case in exp.case_specs:
        rows, cols = case.scalars["rows"], case.scalars["cols"]
        if rows * cols > 2_000_000 or rows * cols == 1:
            continue
        x = generate(case, exp.signature, 1)[0]["x"].data.astype(np.float64).reshape(rows, cols)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        tol = case.outputs["y"]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            xf = x.astype(np.float32)
            naive = np.exp(xf) / np.exp(xf).sum(axis=1, keepdims=True)
        fake = {"copy": x, "zeros": np.zeros_like(ref), "uniform": np.full_like(ref, 1.0 / cols), "naive": naive}
        for name, out in fake.items():
            ok = np.abs(out - ref) <= tol.atol + tol.rtol * np.abs(ref)
            if name == "naive":
                if not ok.all():
                    naive_fails.add(case.name)
            else:
                assert not ok.all(), (case.name, name)
        assert (np.abs(ref.astype(np.float32) - ref) <= tol.atol + tol.rtol * np.abs(ref)).all(), case.name
    assert {"wide-range-5x1000", "shifted-up-4x1536", "shifted-down-6x700"} <= naive_fails


def test_every_kernel_of_every_configuration_compiles_without_spills():
    """The tuner spends a GPU evaluation on each configuration: no kernel may fail to compile,
    spill, or keep a stack; the cluster kernel carries its cluster size (a declaration gives it,
    since the definition must stay plain for the trust rule)."""
    from cudaopt.compilekit.compiler import compile_kernel, compile_ptx, parse_ptxas
    from cudaopt.wire.protocol import KernelSpec

    for config in _experiment().tuning.space.configurations():
        spec = KernelSpec(source=_source(), entry="softmax_rows", defines={**config, "CUDAOPT_NUM_SMS": SMS})
        usage = parse_ptxas(compile_kernel(spec).info.log)
        for name in KERNELS:
            used = usage[name]
            assert used["spill_stores"] == 0 and used["spill_loads"] == 0 and used["stack_bytes"] == 0, (config, name)
            assert used["registers"] * _bounds(config)[name] <= 65536, (config, name)
    ptx = compile_ptx(KernelSpec(source=_source(), entry="softmax_rows_cluster", defines={"CL": 4}))
    cluster = ptx[ptx.index(".entry softmax_rows_cluster"):]
    assert ".reqnctapercluster 4, 1, 1" in cluster[:cluster.index("{")]
    for name in ("initial.cu", "reference.cu"):
        info = compile_kernel(KernelSpec(source=(SOFTMAX / name).read_text(), entry="softmax_rows")).info
        assert info.ok and info.spill_stores == 0, name


def _shapes(count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    edges = [1, 2, 3, 4, 5, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025,
             4095, 4096, 4097, 8191, 8192, 8193, 16384, 16385, 65536, 393216, 458752, 458753, 1 << 20]
    shapes = [(rng.choice([1, 3, 7, 100, 1000, 4096, 65536]), c) for c in edges]
    shapes += [(rng.randint(1, 70000), int(math.exp(rng.uniform(0, math.log(2_000_000))))) for _ in range(count)]
    return shapes


def test_each_shape_gets_a_kernel_whose_fast_path_holds_it():
    """On thousands of shapes and every configuration: the launch names a kernel of the source,
    its block is whole warps within the kernel's launch bounds, and the kernel holds the row where
    its fast path needs it (registers for the warp and block kernels, the dynamic shared memory
    the cluster kernel is given); the cluster grid is whole clusters; the limits of any GPU hold."""
    from cudaopt.wire.expr import evaluate_int

    seen = set()
    configs = _experiment().tuning.space.configurations()
    static_shared = 272  # softmax_rows_cluster's own shared memory (ptxas), besides its part of the row
    for rows, cols in _shapes(3000, 7):
        for config in configs:
            launch = _launch(rows, cols, config)
            entry, (threads, *_), (grid, *_) = launch.entry, launch.block, launch.grid
            seen.add(entry)
            assert threads % 32 == 0 and 32 <= threads <= _bounds(config)[entry], (rows, cols, config, launch)
            assert 1 <= grid < 2**31
            if entry in WARP_KERNELS:
                assert cols <= 512 and grid == -(-rows // (threads // 32 * _one_round(cols)))
                assert (entry == "softmax_rows_warp4") == (cols <= 128 and cols % 4 == 0)  # its float4 paths
            elif entry == "softmax_rows_block":
                assert 512 < cols <= (4 if cols % 4 == 0 else 2) * config["NB"] * threads and grid == rows
            elif entry == "softmax_rows_cluster":
                part = 4 * -(-cols // (4 * config["CL"]))
                assert cols > 65536 or rows < SMS  # the mid tier's rows go to the online kernel
                assert grid == rows * config["CL"] and 4 * part <= launch.shared_bytes
                assert launch.shared_bytes + static_shared <= SHARED_OPTIN
            else:
                assert cols <= 65536 and rows >= SMS or cols > evaluate_int("57344 * CL", config)
                assert grid == rows and launch.shared_bytes == 0
    assert seen == set(KERNELS)


# ---- a model of each kernel's indexing, written from tunable.cu ----------------------------------

def _one_round(cols: int) -> int:
    """Rows a warp holds in one round of registers: 4 float4 per lane (warp_rows)."""
    lanes, slots, side = _warp_plan(cols)
    return side * 4 // slots


def _warp_plan(cols: int) -> tuple[int, int, int]:
    """lanes per row, float4 slots per lane and row, rows side by side in a warp (warp_rows)."""
    if cols <= 32:
        return 8, 1, 4
    if cols <= 64:
        return 16, 1, 2
    return 32, next(nv for nv in (1, 2, 4) if cols <= 128 * nv) if cols <= 512 else 0, 1


def test_the_model_follows_the_warp_kernels_buckets():
    """_warp_plan is warp_rows' dispatch: each `cols <= N` bucket of the source with its lanes per
    row, float4 slots, rows at a time (4 float4 in flight per lane), rows side by side and the
    stride between a group's rows; each bucket's lanes x slots x 4 holds N columns."""
    body = _source()[_source().index("void warp_rows("):]
    body = body[:body.index("\n}\n")]
    buckets = re.findall(r"cols <= (\d+)\)[^\n]*\n\s*group_rows<(\d+), (\d+), (\d+), VEC>\(x, y, rows, cols, "
                         r"first(?: \+ lane / (\d+))?, (\d+), ", body)
    assert [int(b[0]) for b in buckets] == [32, 64, 128, 256, 512]
    for limit, lanes, slots, at_once, side, step in buckets:
        limit, lanes, slots, side = int(limit), int(lanes), int(slots), int(side or 32)
        assert 32 // side == int(step) and lanes == side and lanes * slots * 4 >= limit
        assert int(at_once) * slots == 4 and _one_round(limit) == int(at_once) * 32 // lanes
        for cols in range(limit // 2 + 1 if limit > 32 else 1, limit + 1):
            assert _warp_plan(cols) == (lanes, slots, 32 // lanes), cols


def _slot_columns(lane, lanes, slots, vec):
    """The columns a thread (lane of lanes) keeps in its float4 slots: 4*(lane + lanes*i) + j with
    float4s, lane + lanes*(4*i + j) without (group_rows, block_row)."""
    i, j = np.meshgrid(np.arange(slots), np.arange(4), indexing="ij")
    return (4 * (lane + lanes * i) + j).ravel() if vec else (lane + lanes * (4 * i + j)).ravel()


def _cover(rows: int, cols: int, config: dict, vec: bool) -> tuple[np.ndarray, str]:
    """How often each output element is written by the launch experiment.json gives this shape."""
    launch = _launch(rows, cols, config)
    threads, grid = launch.block[0], launch.grid[0]
    writes = np.zeros(rows * cols, dtype=np.int64)

    def row_elements(row, columns):
        columns = columns[columns < cols]
        assert (columns >= 0).all()
        np.add.at(writes, row * cols + columns, 1)

    def online_rows():  # softmax_rows, and the block kernel's row that does not fit its registers
        for row in range(rows):
            for t in range(threads):
                row_elements(row, (4 * np.arange(t, cols // 4, threads)[:, None] + np.arange(4)).ravel() if vec
                             else np.arange(t, cols, threads))

    if launch.entry in WARP_KERNELS:
        lanes, slots, side = _warp_plan(cols)
        warps = grid * (threads // 32)
        per = -(-(-(-rows // warps)) // side) * side  # each warp's even share, whole rows side by side
        for warp in range(warps):
            first = warp * per
            if launch.entry == "softmax_rows_warp4" and not vec:  # unaligned pointers: rows streamed by the warp
                for row in range(first, min(rows, first + per)):
                    for lane in range(32):
                        row_elements(row, np.arange(lane, cols, 32))
                continue
            for lane in range(32 if first < rows else 0):
                for k in range(per // side):
                    row = first + lane // lanes + side * k
                    if row < rows:
                        row_elements(row, _slot_columns(lane % lanes, lanes, slots, vec))
    elif launch.entry == "softmax_rows_block":
        slots = config["NB"] if vec else config["NB"] // 2  # float4s, or half as many scalars
        if cols > 4 * slots * threads:
            online_rows()
        else:
            for row in range(rows):  # grid == rows: block b takes row b
                for t in range(threads):
                    row_elements(row, _slot_columns(t, threads, slots, vec))
    elif launch.entry == "softmax_rows_cluster":
        part = 4 * -(-cols // (4 * config["CL"]))
        for row in range(rows):
            for rank in range(config["CL"]):
                begin = rank * part
                n = min(part, cols - begin) if begin < cols else 0
                assert begin % 4 == 0 and (not vec or n % 4 == 0)  # a float4 never straddles a part or a row
                for t in range(threads):
                    if vec:
                        quads = np.arange(t, n // 4, threads)
                        offsets = (4 * quads[:, None] + np.arange(4)).ravel()
                    else:
                        offsets = np.arange(t, n, threads)
                    row_elements(row, begin + offsets)
    else:
        online_rows()
    return writes, launch.entry


@pytest.mark.parametrize("rows, cols", [(7, 33), (1, 1), (37, 64), (45, 28), (19, 100), (9, 130), (70, 32), (13, 500),
                                        (5, 1024), (3, 700),
                                        (4, 1536), (3, 2052), (2, 1025), (2, 20000), (3, 100003), (1, 600001)])
def test_the_model_of_the_kernels_writes_every_output_once(rows, cols):
    configs = _experiment().tuning.space.configurations()
    for config in (configs[0], configs[-1]):
        for vec in (True, False) if cols % 4 == 0 else (False,):
            writes, entry = _cover(rows, cols, config, vec)
            assert (writes == 1).all(), (entry, config, vec, np.flatnonzero(writes != 1)[:5])
