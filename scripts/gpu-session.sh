#!/usr/bin/env bash
# Run the GPU tests and the benchmarks on a GPU machine in one go.
# Usage: scripts/gpu-session.sh tests [pytest paths and options; default: tests]
#        scripts/gpu-session.sh bench [benchmark names, e.g. tune_sgemm vs_kernel_tuner; default all]
#        scripts/gpu-session.sh all
# Wheels for packages the machine lacks go in .whl/ (scripts/fetch-wheels.sh; installed to /tmp/site).
# Logs go to $OUT (or ./out when OUT is unset): pytest-gpu.log and benchmarks.log as they are,
# everything else (figures, run directories, ncu output) packed in session.tgz.
set -uo pipefail
what=${1:-all}; shift || true
out=${OUT:-$PWD/out}; mkdir -p "$out"
work=$(mktemp -d)
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$out/gpu.txt"
status=0
if [[ $what == tests || $what == all ]]; then
  targets=("$@"); [[ ${#targets[@]} -gt 0 && $what == tests ]] || targets=(tests)
  python3 -m pytest -m gpu -v -rA "${targets[@]}" 2>&1 | tee "$out/pytest-gpu.log"
  status=${PIPESTATUS[0]}
fi
if [[ $what == bench || $what == all ]]; then
  COLUMNS=110 python3 -m cudaopt evaluate --config examples/sgemm/experiment.json --json "$work/evaluate.json" \
    2>&1 | tee "$work/evaluate.txt" || status=1
  names=("$@"); [[ ${#names[@]} -gt 0 && $what == bench ]] || names=($(ls benchmarks/bench_*.py | sed 's|.*/bench_||; s|\.py$||'))
  for name in "${names[@]}"; do
    script=benchmarks/bench_$name.py
    python3 "$script" --out "$work" 2>&1 | tee -a "$out/benchmarks.log" || status=1
  done
fi
tar czf "$out/session.tgz" -C "$work" . && rm -rf "$work"
exit $status
