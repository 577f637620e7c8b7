"""NVRTC needs no GPU: compilation and resource reports are tested everywhere."""

import pytest

from cudaopt.compilekit.compiler import CompileError, compile_kernel, parse_ptxas
from cudaopt.wire.protocol import KernelSpec
from tests.conftest import SGEMM, kernel_source

PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'matmul_f32' for 'sm_90'
ptxas info    : Function properties for matmul_f32
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compile time = 5.1 ms
"""


def test_parse_ptxas():
    usage = parse_ptxas(PTXAS_LOG)["matmul_f32"]
    assert usage == {"stack_bytes": 16, "spill_stores": 8, "spill_loads": 12, "registers": 40,
                     "static_shared_bytes": 2048}


def test_initial_kernel_compiles_with_resource_usage():
    compiled = compile_kernel(KernelSpec(source=(SGEMM / "initial.cu").read_text(), entry="matmul_f32"))
    info = compiled.info
    assert info.ok and info.arch == "sm_90a"  # the default: arch-specific Hopper
    assert info.registers and info.registers > 0
    assert info.static_shared_bytes == 2 * 16 * 16 * 4
    assert info.spill_stores == 0


def test_compile_error_keeps_the_compiler_message():
    with pytest.raises(CompileError) as err:
        compile_kernel(KernelSpec(source=kernel_source("compile_error.cu"), entry="matmul_f32"))
    assert "cannot be used to initialize" in err.value.log


def test_defines_reach_the_kernel():
    source = '#if TILE != 32\n#error TILE must be 32\n#endif\nextern "C" __global__ void k(float* x) { x[0] = TILE; }'
    compile_kernel(KernelSpec(source=source, entry="k", defines={"TILE": 32}))
    with pytest.raises(CompileError, match="TILE must be 32"):
        compile_kernel(KernelSpec(source=source, entry="k", defines={"TILE": 16}))


def test_cuda_headers_are_found():
    source = '#include <cuda_fp16.h>\n#include <cuda_bf16.h>\nextern "C" __global__ void k(__half* x, __nv_bfloat16* y) { x[0] = __float2half(1.f); y[0] = __float2bfloat16(1.f); }'
    assert compile_kernel(KernelSpec(source=source, entry="k")).info.ok


def test_harness_utilities_compile_with_every_kernel_the_worker_launches():
    from importlib import resources

    from cudaopt.worker.gpu import UTILITY_KERNELS

    source = resources.files("cudaopt.worker").joinpath("utilities.cu").read_text()
    compiled = compile_kernel(KernelSpec(source=source, entry="cudaopt_compare"))
    assert compiled.info.ok and compiled.info.spill_stores == 0
    code = bytes(compiled.cubin.code)
    assert [name for name in UTILITY_KERNELS if f".text.{name}".encode() not in code] == []


_ADD = 'extern "C" __global__ void add(float* x) { x[threadIdx.x] += 1.0f; }'


def test_compile_cache_hands_out_a_fresh_module_per_hit_with_the_first_compile_report():
    """A cached kernel is its kept cubin loaded afresh (no shared __device__ globals), marked cached."""
    from cudaopt.worker.lru import CompileCache

    spec = KernelSpec(source=_ADD, entry="add", defines={"N": 4})
    compiled = compile_kernel(spec)
    cache = CompileCache()
    assert cache.get("k") is None and "k" not in cache
    cache.put("k", compiled)
    first, second = cache.get("k"), cache.get("k")
    assert "k" in cache
    assert first.cubin is not second.cubin and first.cubin is not compiled.cubin
    assert bytes(first.cubin.code) == bytes(compiled.cubin.code)
    assert first.info.cached and second.info.cached and not compiled.info.cached
    assert first.info.registers == compiled.info.registers


def test_compile_cache_drops_the_oldest_beyond_its_byte_limit():
    from cudaopt.worker.lru import CompileCache

    compiled = compile_kernel(KernelSpec(source=_ADD, entry="add"))
    size = len(bytes(compiled.cubin.code))
    cache = CompileCache(limit_bytes=2 * size)
    for key in "abc":
        cache.put(key, compiled)
    assert "a" not in cache and cache.get("b") is not None and cache.get("c") is not None


def test_every_configuration_of_the_example_space_compiles_without_spills():
    """The tuner spends a GPU evaluation on each configuration: none may fail to compile, spill (the
    large tier's 8 x 16 thread tile sits near the 255-register limit) or outgrow static shared
    memory (the ST x ST tier drops to 2 stages where 3 would not fit)."""
    from cudaopt.experiment import load_experiment

    space = load_experiment(SGEMM / "experiment.json").tuning.space
    source = (SGEMM / "tunable.cu").read_text()
    for config in space.configurations():
        spec = KernelSpec(source=source, entry="matmul_f32", defines={**config, "CUDAOPT_NUM_SMS": 132})
        info = compile_kernel(spec).info
        assert info.ok and info.spill_stores == 0 and info.spill_loads == 0, config
        assert info.static_shared_bytes <= 48 * 1024, config


def test_the_example_split_k_kernels_keep_nothing_but_the_spread_workspace():
    """The split-K tiers' reduction must hold under the trust rules. Within a tile's cluster the
    partial tiles travel through shared memory between two cluster barriers, in a cluster of S
    blocks along z (the launch's grid z, checked in test_tune): those kernels keep no device-global
    memory and use no atomics. splitk2r may also spread a tile over several clusters: it alone
    touches the module's workspace (spread_bands) and its arrival counters, with one wrapping
    atomicInc, a fence before it, and a trap for a launch the workspace cannot hold.
    The experiment names the bands its workspace (the harness poisons them before every launch);
    the counters and the module's other device-global memory are within the default limit. Each entry compiles
    without spills within static shared memory (splitk8sg's and splitk2r's rings are dynamic: their
    launches ask for them), whatever the tunables of the other tiers."""
    import re

    from cudaopt.experiment import load_experiment
    from cudaopt.compilekit.compiler import compile_ptx

    exp = load_experiment(SGEMM / "experiment.json")
    configs = exp.tuning.space.configurations()
    source = (SGEMM / "tunable.cu").read_text()
    cluster_only, spread = ("2", "4", "8", "8s", "8sg", "2g"), ("2r",)
    for config in (configs[0], configs[len(configs) // 2], configs[-1]):
        defines = {**config, "CUDAOPT_NUM_SMS": 132}
        compiled = compile_kernel(KernelSpec(source=source, entry="matmul_f32_splitk4", defines=defines))
        info, symbols = compiled.info, compiled.info.global_symbols
        assert symbols["spread_arrivals"] == 512, config  # kept state, reset by the kernel itself
        assert info.ok and not info.device_malloc, config
        workspace = sum(symbols[name] for name in exp.limits.workspace)  # every name is in the module
        assert workspace == 8 << 20 and info.global_bytes - workspace <= exp.limits.global_bytes, config
        usage = parse_ptxas(info.log)
        for s in cluster_only + spread:
            entry = usage[f"matmul_f32_splitk{s}"]
            assert entry["spill_stores"] == 0 and entry["spill_loads"] == 0, (s, config)
            assert entry["static_shared_bytes"] <= 48 * 1024, (s, config)
    ptx = compile_ptx(KernelSpec(source=source, entry="matmul_f32_splitk4", defines={"CUDAOPT_NUM_SMS": 132}))
    mutable = re.findall(r"^\.(?:visible \.)?global \.align \d+ \.b8 (\w+)\[\d+\];", ptx, re.MULTILINE)
    assert sorted(mutable) == ["spread_arrivals", "spread_bands"]
    for s in cluster_only + spread:
        body = ptx[ptx.index(f".entry matmul_f32_splitk{s}("):]
        body = body[:body.index("\n}")]
        atomics = re.findall(r"\s((?:atom|red)\.[\w.]+)", body)
        if s in spread:
            assert atomics == ["atom.global.inc.u32"] and "spread_arrivals" in body and "spread_bands" in body, s
            assert "membar.gl" in body[:body.index("atom.global.inc")] and "trap;" in body, s
        else:
            assert not atomics and not any(name in body for name in mutable), s
        assert re.search(rf"\.reqnctapercluster 1, 1, {s.rstrip('sgr')}\b", body), s
        assert body.count("barrier.cluster.arrive") == 2 and "ld.shared::cluster" in body, s


def test_a_kernel_compiled_once_is_read_from_disk_by_the_next_process_with_its_math_read_again(monkeypatch):
    """The pre-flight's compilations serve the worker, and a second run compiles nothing: the cubin
    comes from cudaopt's cache, and its math units are read from it again, not taken on trust."""
    from cudaopt.compilekit import compiler, kept_cubins

    spec = KernelSpec(source=_ADD, entry="add", defines={"N": 5})
    first = compile_kernel(spec)
    assert not first.info.kept and first.info.seconds > 0 and first.info.math
    calls = []
    monkeypatch.setattr(compiler, "compile_remote", lambda *a: calls.append(a))  # nothing may compile now
    monkeypatch.setattr(compiler, "read_math", lambda code, info: setattr(info, "math_error", "read again"))
    again = compile_kernel(spec)
    assert calls == [] and again.info.kept and again.info.seconds == 0.0 and again.info.math_error == "read again"
    assert bytes(again.cubin.code) == bytes(first.cubin.code) and again.info.registers == first.info.registers
    assert len(list(kept_cubins.folder().glob("*.cubin"))) == 1


def test_a_kept_cubin_differs_by_every_input_of_the_compiler_and_a_damaged_one_is_compiled_again():
    from cudaopt.compilekit import kept_cubins

    spec = KernelSpec(source=_ADD, entry="add", defines={"N": 6})
    keys = {kept_cubins.key_of(spec, "sm_90"), kept_cubins.key_of(spec, "sm_80"),
            kept_cubins.key_of(spec.model_copy(update={"defines": {"N": 7}}), "sm_90"),
            kept_cubins.key_of(spec.model_copy(update={"source": _ADD + "\n"}), "sm_90")}
    assert len(keys) == 4
    compile_kernel(spec)
    (cubin,) = kept_cubins.folder().glob("*.cubin")
    cubin.write_bytes(cubin.read_bytes()[:-8] + b"\0" * 8)  # changed after it was kept
    again = compile_kernel(spec)
    assert not again.info.kept and again.info.seconds > 0
    assert compile_kernel(spec).info.kept  # the fresh compilation replaced it


def test_a_cache_folder_that_cannot_be_written_never_fails_a_compilation(monkeypatch, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("CUDAOPT_CACHE_DIR", str(blocked))
    compiled = compile_kernel(KernelSpec(source=_ADD, entry="add", defines={"N": 8}))
    assert compiled.info.ok and not compiled.info.kept
