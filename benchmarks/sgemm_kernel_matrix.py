"""Every kernel form of the SGEMM example on every shape of its smaller tiers, beside cuBLAS.

The tier table picks one kernel per shape; this measures them all, so that a rule can be read
off a table instead of guessed. Each form (a tile, its thread tile, its ring, and for split-K its
cluster width and the groups of threads that split each block's k again) is added to the example's ``tunable.cu`` as one more entry and launched alone on
every shape; cuBLAS is timed interleaved in the first repeat, and the forms alternate over two
repeats. ``--ref REF`` adds, for each chosen form that is one of the example's kernels (an
``entry``: the large tier, medium, the split-K tiers), that kernel as it was at git revision REF
(its whole tunable.cu compiled instead of today's; form ``NAME@ref``; REF may also be a copy of
tunable.cu, for a machine without the repository's history), to time a change beside its
predecessor in one call. Run: ``python benchmarks/sgemm_kernel_matrix.py --out DIR [--forms
a,b,..] [--shapes MxNxK,..] [--ref REF]``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from cudaopt.experiment import load_experiment
from cudaopt.pool.supervisor import Supervisor
from cudaopt.winner.shapes import load_shapes
from cudaopt.wire.protocol import LaunchSpec, TimingProtocol

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(128, 8192, 4096), (8192, 128, 4096), (1024, 1024, 1024), (1000, 1000, 1000), (512, 512, 16384),
          (256, 256, 16384), (256, 256, 32768), (512, 512, 8192), (515, 261, 1031), (96, 3072, 1536),
          (96, 96, 9000), (64, 4096, 2048), (4096, 64, 2048), (777, 333, 555)]


@dataclass(frozen=True)
class Form:
    """One kernel: an AsyncTier<bm, bn, bk, tm, tn, stages> (or with `staged`, a StagedTier<bm, bn,
    bk, tm, tn, wrows>: two buffers filled through registers, the large tier's main loop),
    its k split over `split` blocks of a cluster and `groups` groups of threads within each block
    (1, 1: no split), or an entry the example already has (`entry`)."""

    name: str
    tile: tuple[int, int, int, int, int, int] = (64, 64, 16, 8, 4, 4)
    split: int = 1
    entry: str = ""
    groups: int = 1
    min_blocks: int = 1  # __launch_bounds__'s second value: blocks that must fit on an SM
    staged: bool = False
    pad: int = 0  # shared memory to ask for at least, in bytes: 120000 leaves room for one block per SM
    ways: str = ""  # clusters per tile (an expression of the shape; a SPREAD entry): grid z = split * ways

    @property
    def threads(self) -> int:
        bm, bn, _, tm, tn, _ = self.tile
        return self.groups * (bm // tm) * (bn // tn)

    @property
    def tier(self) -> str:
        return f"{'Staged' if self.staged else 'Async'}Tier<{', '.join(map(str, self.tile))}>"

    @property
    def smem_bytes(self) -> int:
        """splitk_floats<tier, groups>() in bytes: a ring per group, which must also hold the partial tiles."""
        bm, bn, bk, _, _, stages = self.tile
        if self.staged:
            ring = 2 * (bk * (bm + 4) + bk * bn)
        else:
            ring = stages * (bm * (bk + (4 if bk % 16 == 0 else 0)) + bk * bn)
        split = self.split > 1 or self.groups > 1
        partials = bm * bn * max(1, self.groups // 2) if split else 0
        return max(4 * max(self.groups * ring, partials), self.pad)

    @property
    def dynamic(self) -> bool:
        return self.smem_bytes > 48 * 1024  # beyond static shared memory: the launch asks for it

    def source(self) -> str:
        if self.entry:
            return ""
        t = self.tier
        head = f'extern "C" __global__ void __launch_bounds__({self.threads}, {self.min_blocks})\n' \
               f"matmul_f32_{self.name}(const float* a, " \
               "const float* b, float* c, int m, int n, int k)"
        split = self.split > 1 or self.groups > 1
        spread = ", true" if self.ways else ""
        body = f"splitk_gemm<{t}, {self.split}, {self.groups}{spread}>" if split else \
            f"{'staged' if self.staged else 'async'}_gemm<{t}>"
        cluster = f"{head} __cluster_dims__(1, 1, {self.split});\n" if self.split > 1 else ""
        smem = ("    extern __shared__ __align__(16) float smem[];\n" if self.dynamic
                else f"    __shared__ __align__(16) float smem[{self.smem_bytes // 4}];\n")
        return f"{cluster}{head}\n{{\n{smem}    {body}(a, b, c, m, n, k, smem);\n}}\n"

    def launch(self) -> LaunchSpec:
        bm, bn = self.tile[:2]
        entry = self.entry or f"matmul_f32_{self.name}"
        grid = [f"cdiv(n, {bn})", f"cdiv(m, {bm})", f"{self.split} * ({self.ways})" if self.ways else self.split]
        return LaunchSpec.model_validate({"entry": entry, "block": [self.threads], "grid": grid,
                                          "shared_bytes": self.smem_bytes if self.dynamic else 0})


FORMS = [
    Form("large", (128, 256, 8, 8, 16, 0), entry="matmul_f32"),  # the space's last configuration
    Form("medium", entry="matmul_f32_medium"),
    Form("small", (32, 32, 32, 4, 4, 3), entry="matmul_f32_small"),
    Form("s4", split=4, entry="matmul_f32_splitk4"),
    Form("s8", split=8, entry="matmul_f32_splitk8"),
    Form("s2", split=2, entry="matmul_f32_splitk2"),
    Form("s8sm", (32, 32, 32, 4, 4, 3), split=8, entry="matmul_f32_splitk8s"),
    Form("m5", (64, 64, 16, 8, 4, 5)),
    Form("w88", (64, 128, 8, 8, 8, 6)),
    Form("t88", (128, 64, 16, 8, 8, 3)),
    Form("s4m5", (64, 64, 16, 8, 4, 5), split=4),
    Form("s8m5", (64, 64, 16, 8, 4, 5), split=8),
    Form("s4sm", (32, 32, 32, 4, 4, 3), split=4),
    Form("s2w", (64, 128, 8, 8, 8, 6), split=2),
    Form("s4w", (64, 128, 8, 8, 8, 6), split=4),
    Form("s8w", (64, 128, 8, 8, 8, 6), split=8),
    # 128 x 128 tiles, 8 x 8 per thread, 256 threads, in dynamic shared memory (64-72 KB)
    Form("L1", (128, 128, 8, 8, 8, 8)),
    Form("L2", (128, 128, 8, 8, 8, 8), split=2),
    Form("L4", (128, 128, 8, 8, 8, 8), split=4),
    Form("L8", (128, 128, 8, 8, 8, 8), split=8),
    Form("L2k16", (128, 128, 16, 8, 8, 4), split=2),
    Form("L4k16", (128, 128, 16, 8, 8, 4), split=4),
    # 64 x 64 tiles, 8 x 8 per thread, k also split among G groups of 64 threads within a block
    Form("g4s8", (64, 64, 8, 8, 8, 3), split=8, groups=4),
    Form("g4s4", (64, 64, 8, 8, 8, 3), split=4, groups=4),
    Form("g4s2", (64, 64, 8, 8, 8, 3), split=2, groups=4, entry="matmul_f32_splitk2g"),
    Form("g4s1", (64, 64, 8, 8, 8, 3), groups=4),
    Form("g2s1", (64, 64, 8, 8, 8, 3), groups=2),
    Form("g2s2", (64, 64, 8, 8, 8, 3), split=2, groups=2),
    Form("g2s4", (64, 64, 8, 8, 8, 3), split=4, groups=2),
    Form("g4s8k16", (64, 64, 16, 8, 8, 3), split=8, groups=4),
    Form("g4s4k16", (64, 64, 16, 8, 8, 3), split=4, groups=4),
    Form("g2s8", (64, 64, 16, 8, 4, 4), split=8, groups=2),
    Form("g4s8m", (64, 64, 16, 8, 4, 3), split=8, groups=4),
    Form("g4s8b2", (64, 64, 8, 8, 8, 3), split=8, groups=4, min_blocks=2),
    Form("g4s2b2", (64, 64, 8, 8, 8, 3), split=2, groups=4, min_blocks=2),
    Form("g4s4b2", (64, 64, 8, 8, 8, 3), split=4, groups=4, min_blocks=2),
    Form("g2s8x", (64, 64, 8, 8, 8, 3), split=8, groups=2),
    Form("g8s8", (64, 64, 8, 8, 8, 2), split=8, groups=8),
    Form("g8s4", (64, 64, 8, 8, 8, 2), split=4, groups=8),
    Form("g8s2", (64, 64, 8, 8, 8, 2), split=2, groups=8),
    Form("g8s1", (64, 64, 8, 8, 8, 2), groups=8),
    Form("g4s2k16", (64, 64, 16, 8, 8, 2), split=2, groups=4),
    Form("sg2s8", (32, 32, 32, 4, 4, 3), split=8, groups=2, entry="matmul_f32_splitk8sg"),
    Form("sg2s8k16", (32, 32, 16, 4, 4, 3), split=8, groups=2),
    Form("sg4s8k16", (32, 32, 16, 4, 4, 3), split=8, groups=4),
    Form("s8sk16", (32, 32, 16, 4, 4, 4), split=8),
    Form("m32g2s8", (64, 32, 16, 8, 4, 3), split=8, groups=2),
    Form("m32s8", (64, 32, 16, 8, 4, 3), split=8),
    Form("m32g2s4", (64, 32, 16, 8, 4, 3), split=4, groups=2),
    Form("sg2s8st2", (32, 32, 32, 4, 4, 2), split=8, groups=2),
    Form("sg2s8st4", (32, 32, 32, 4, 4, 4), split=8, groups=2),
    Form("sg2s4", (32, 32, 32, 4, 4, 3), split=4, groups=2),
    Form("sg2s2", (32, 32, 32, 4, 4, 3), split=2, groups=2),
    Form("sg4s8", (32, 32, 32, 4, 4, 2), split=8, groups=4),
    # the large tier's main loop (StagedTier: registers, two buffers, A transposed) split like the above
    Form("stg4s2", (64, 64, 8, 8, 8, 0), split=2, groups=4, staged=True),
    Form("stg4s4", (64, 64, 8, 8, 8, 0), split=4, groups=4, staged=True),
    Form("stg4s8", (64, 64, 8, 8, 8, 0), split=8, groups=4, staged=True),
    Form("stg2s8", (64, 64, 8, 8, 8, 0), split=8, groups=2, staged=True),
    Form("stg2s4", (64, 64, 8, 8, 8, 0), split=4, groups=2, staged=True),
    Form("stk16g4s2", (64, 64, 16, 8, 8, 0), split=2, groups=4, staged=True),
    Form("stmg2s8", (64, 64, 8, 8, 4, 0), split=8, groups=2, staged=True),
    Form("stmg2s4", (64, 64, 8, 8, 4, 0), split=4, groups=2, staged=True),
    Form("stsg2s8", (32, 32, 8, 4, 4, 0), split=8, groups=2, staged=True),
    Form("stsg4s8", (32, 32, 8, 4, 4, 0), split=8, groups=4, staged=True),
    Form("st128s2", (128, 128, 8, 8, 8, 0), split=2, staged=True),
    Form("st128s4", (128, 128, 8, 8, 8, 0), split=4, staged=True),
    Form("st128s8", (128, 128, 8, 8, 8, 0), split=8, staged=True),
    Form("st128x64g2", (128, 64, 8, 8, 8, 0), groups=2, staged=True),
    Form("st128x64g2s2", (128, 64, 8, 8, 8, 0), split=2, groups=2, staged=True),
    Form("st128x64g2s4", (128, 64, 8, 8, 8, 0), split=4, groups=2, staged=True),
    Form("st64x128g2", (64, 128, 8, 8, 8, 0), groups=2, staged=True),
    Form("st64x128g2s2", (64, 128, 8, 8, 8, 0), split=2, groups=2, staged=True),
    Form("st816g4s4", (64, 128, 8, 8, 16, 0), split=4, groups=4, staged=True),
    Form("st816g4s2", (64, 128, 8, 8, 16, 0), split=2, groups=4, staged=True),
    Form("st816g2s8", (64, 128, 8, 8, 16, 0), split=8, groups=2, staged=True),
    Form("st168g4s4", (128, 64, 8, 16, 8, 0), split=4, groups=4, staged=True),
    # the large tier's kernel with other tiles, for the largest squares
    Form("Lk16", (128, 256, 16, 8, 16, 0), staged=True),
    # one warp per group (8 x 8 per thread on 32 x 64 or 64 x 32), 8 groups; and forms held to one block per SM
    Form("w8s4", (32, 64, 8, 8, 8, 3), split=4, groups=8),
    Form("w8s2", (32, 64, 8, 8, 8, 3), split=2, groups=8),
    Form("w8s1", (32, 64, 8, 8, 8, 3), groups=8),
    Form("w8k16s4", (32, 64, 16, 8, 8, 3), split=4, groups=8),
    Form("h8s4", (64, 32, 8, 8, 8, 3), split=4, groups=8),
    Form("h8s2", (64, 32, 8, 8, 8, 3), split=2, groups=8),
    Form("w4s4", (32, 64, 8, 8, 8, 3), split=4, groups=4),
    Form("w8s4p", (32, 64, 8, 8, 8, 3), split=4, groups=8, pad=120000),
    Form("st128s2p", (128, 128, 8, 8, 8, 0), split=2, staged=True, pad=120000),
    Form("g4s2p", (64, 64, 8, 8, 8, 3), split=2, groups=4, pad=120000),
    Form("s8p", split=8, pad=120000),
    Form("s4p", split=4, pad=120000),
    Form("sg2s8p", (32, 32, 32, 4, 4, 3), split=8, groups=2, pad=60000),
    # the large tier's 8 x 16 outputs per thread, split: a warp per 64 x 64 group tile, or 64-128 threads per group
    Form("x8s2", (64, 64, 8, 8, 16, 0), split=2, groups=8, staged=True),
    Form("x8k16s2", (64, 64, 16, 8, 16, 0), split=2, groups=8, staged=True),
    Form("x8s4", (64, 64, 8, 8, 16, 0), split=4, groups=8, staged=True),
    Form("x8s8", (64, 64, 8, 8, 16, 0), split=8, groups=8, staged=True),
    Form("x4s8", (64, 64, 8, 8, 16, 0), split=8, groups=4, staged=True),
    Form("x4s4", (64, 64, 8, 8, 16, 0), split=4, groups=4, staged=True),
    Form("y2s2", (128, 128, 8, 8, 16, 0), split=2, groups=2, staged=True, entry="matmul_f32_splitk2r"),
    Form("y4s1", (64, 128, 8, 8, 16, 0), groups=4, staged=True),
    Form("y4s1t", (128, 64, 8, 16, 8, 0), groups=4, staged=True),
    Form("y2s1", (64, 128, 8, 8, 16, 0), groups=2, staged=True),
    # warps of 4 x 8 or 8 x 4 threads instead of rows of the thread grid
    Form("Lw4", (128, 256, 8, 8, 16, 4), staged=True),
    Form("Lw8", (128, 256, 8, 8, 16, 8), staged=True),
    Form("Lw0", (128, 256, 8, 8, 16, 0), staged=True),
    Form("y2s2w4", (128, 128, 8, 8, 16, 4), split=2, groups=2, staged=True),
    Form("y2s2w8", (128, 128, 8, 8, 16, 8), split=2, groups=2, staged=True),
    Form("L128w4", (128, 128, 8, 8, 16, 4), staged=True, min_blocks=2),
    Form("L128w0", (128, 128, 8, 8, 16, 0), staged=True, min_blocks=2),
    Form("L88w8", (128, 128, 8, 8, 8, 8), staged=True, min_blocks=2),
    Form("L88w0", (128, 128, 8, 8, 8, 0), staged=True, min_blocks=2),
    Form("L256x128", (256, 128, 8, 16, 8, 0), staged=True),
    # splitk2r with W clusters per tile through the workspace (the example's spread tier): W fills the
    # SMs at one block each (f), or is held to k / 2048 (h) or k / 4096 (q); or 2 whatever the tiles (w2)
    *[Form(f"y2s2{tag}", (128, 128, 8, 8, 16, 0), split=2, groups=2, staged=True, entry="matmul_f32_splitk2r",
           ways=f"max(1, min(num_sms // (2 * cdiv(m, 128) * cdiv(n, 128)), {cap}))")
      for tag, cap in (("f", "64"), ("h", "k // 2048"), ("q", "k // 4096"))],
    Form("y2s2w2", (128, 128, 8, 8, 16, 0), split=2, groups=2, staged=True, entry="matmul_f32_splitk2r", ways="2"),
    # the large tier's winning thread tile (8 x 8, warps of 8 x 4) in splitk2r's place: 2 groups of 256
    # threads, 16 warps per SM; and 16-deep slices for splitk2r
    Form("z2s2", (128, 128, 8, 8, 8, 8), split=2, groups=2, staged=True),
    Form("z2s2f", (128, 128, 8, 8, 8, 8), split=2, groups=2, staged=True,
         ways="max(1, min(num_sms // (2 * cdiv(m, 128) * cdiv(n, 128)), 64))"),
    Form("y2s2k16", (128, 128, 16, 8, 16, 0), split=2, groups=2, staged=True),
]


def _ref_source(ref: str) -> str:
    """The example's tunable.cu at git revision ``ref``, or the file ``ref`` (a machine without the
    repository's history)."""
    if Path(ref).is_file():
        return Path(ref).read_text()
    shown = subprocess.run(["git", "show", f"{ref}:examples/sgemm/tunable.cu"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        raise SystemExit(f"--ref {ref}: {shown.stderr.strip()}")
    return shown.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--forms", default="", help="comma-separated form names (default: all)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--shapes", default="", help="comma-separated MxNxK (default: the smaller tiers' shapes)")
    parser.add_argument("--ref", default="",
                        help="a git revision or a tunable.cu file: add its build of each chosen kernel as NAME@ref")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    forms = [f for f in FORMS if not args.forms or f.name in args.forms.split(",")]
    exp = load_experiment(ROOT / "examples/sgemm/experiment.json")
    config = exp.tuning.space.configurations()[-1]
    source = exp.tuning.source + "\n" + "\n".join(f.source() for f in forms)
    sources = {f.name: source for f in forms}
    if args.ref:
        ref_source = _ref_source(args.ref)
        for form in [f for f in forms if f.entry and f"{f.entry}(" in ref_source]:
            forms.append(replace(form, name=f"{form.name}@ref"))
            sources[f"{form.name}@ref"] = ref_source
    shapes_file = args.out / "matrix-shapes.json"
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")] if args.shapes else SHAPES
    shapes_file.write_text(json.dumps({"template": "square-4096", "shapes": [dict(m=m, n=n, k=k) for m, n, k in shapes]}))
    cases = [c.model_copy(update={"role": "performance"}) for c in load_shapes(shapes_file, exp)]
    protocol = TimingProtocol(warmup=5, iterations=30)
    us: dict[str, dict[str, list[float]]] = {f.name: {} for f in forms}
    cublas: dict[str, float] = {}
    with Supervisor(devices=[0], log_dir=args.out / "workers") as pool:
        for repeat in range(args.repeats):
            for form in forms if repeat % 2 == 0 else forms[::-1]:
                request = exp.request(sources[form.name], launch=form.launch(), defines=config, protocol=protocol,
                                      vendor=repeat == 0 and form is forms[0])
                request.cases = cases
                start = time.monotonic()
                result = pool.evaluate(request)
                bad = [(c.name, c.status, c.reason[:160]) for c in result.cases if c.status != "ok"]
                if not result.cases:
                    bad = [result.reason[:600]]
                print(f"repeat {repeat} {form.name}: {result.status} {time.monotonic() - start:.1f} s {bad or ''}",
                      flush=True)
                for c in result.cases:
                    if c.status == "ok" and c.timing:
                        us[form.name].setdefault(c.name, []).append(c.timing.median_us)
                    if c.vendors and c.vendors[0].timing:
                        cublas[c.name] = c.vendors[0].timing.median_us
                # after every form, so that a run cut short keeps what it measured
                (args.out / "sgemm_kernel_matrix.json").write_text(json.dumps({"us": us, "cublas": cublas}, indent=1))
    names = [c.name for c in cases]
    print("\nbest median us per shape and form, as x cuBLAS (cuBLAS us in the first column)")
    print(f"{'shape':22} {'cuBLAS':>8} " + " ".join(f"{f.name:>6}" for f in forms))
    for name in names:
        cells = []
        for f in forms:
            times = us[f.name].get(name)
            cells.append(f"{cublas.get(name, math.nan) / min(times):6.2f}" if times else f"{'-':>6}")
        print(f"{name:22} {cublas.get(name, math.nan):8.1f} " + " ".join(cells))


if __name__ == "__main__":
    main()
