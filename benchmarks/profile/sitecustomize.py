"""Every Python process started with this folder on PYTHONPATH and CUDAOPT_PROFILE_DIR set writes
a cProfile of itself there when it exits (the CLI, the GPU worker, the compile processes)."""
import atexit
import cProfile
import os
import signal
import sys

_dir = os.environ.get("CUDAOPT_PROFILE_DIR")
if _dir:
    _prof = cProfile.Profile()
    _name = "-".join(a.rsplit("/", 1)[-1] for a in sys.argv[:3] if a)[:80] or "python"

    def _dump(*_):
        _prof.disable()
        os.makedirs(_dir, exist_ok=True)
        _prof.dump_stats(os.path.join(_dir, f"{os.getpid()}-{_name}.prof"))

    def _on_term(signum, frame):
        _dump()
        os._exit(143)

    atexit.register(_dump)
    try:
        signal.signal(signal.SIGTERM, _on_term)
    except ValueError:
        pass
    _prof.enable()
