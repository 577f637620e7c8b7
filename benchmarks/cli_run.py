"""Run ``cudaopt`` in a fresh process as a user would, for the benchmarks that time whole commands."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cudaopt(*args: str, log: Path) -> tuple[int, float]:
    """Exit status and wall seconds of ``cudaopt ARGS``, its output kept in ``log``; no model key
    (the tuning strategy), this checkout's sources first on the path."""
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, COLUMNS="160", PYTHONPATH=path)
    env.pop("OPENAI_API_KEY", None)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cudaopt", *args], capture_output=True, text=True, env=env)
    wall = round(time.perf_counter() - start, 2)
    log.write_text(proc.stdout + proc.stderr)
    print(f"$ cudaopt {' '.join(args)}  -> exit {proc.returncode} in {wall:.1f} s (log {log.name})", flush=True)
    return proc.returncode, wall
