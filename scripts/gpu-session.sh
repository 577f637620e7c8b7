#!/usr/bin/env bash
# Run the GPU tests and the benchmarks on a GPU machine in one go.
# Usage: scripts/gpu-session.sh [tests|bench|all] [pytest args...]
# Wheels for packages the machine lacks go in .whl/ (scripts/fetch-wheels.sh; installed to /tmp/site).
# Logs and figures go to $OUT (or ./out when OUT is unset).
set -uo pipefail
what=${1:-all}; shift || true
out=${OUT:-$PWD/out}; mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$out/gpu.txt"
status=0
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest -m gpu -v -rA "$@" tests 2>&1 | tee "$out/pytest-gpu.log"
  status=${PIPESTATUS[0]}
fi
if [[ $what == bench || $what == all ]]; then
  COLUMNS=110 python3 -m cudaopt evaluate --config examples/sgemm/experiment.json --json "$out/evaluate.json" \
    2>&1 | tee "$out/evaluate.txt" || status=1
  for script in benchmarks/bench_*.py; do
    python3 "$script" --out "$out" 2>&1 | tee -a "$out/benchmarks.log" || status=1
  done
fi
exit $status
