"""The architecture kernels are compiled for."""

from __future__ import annotations

DEFAULT_ARCH = "sm_90a"  # an H100's or H200's, where no GPU says otherwise


def target_arch(major: int, minor: int) -> str:
    """The target for a GPU of compute capability ``major.minor``: the arch-specific one (sm_90a)
    from Hopper on, so that a kernel may use the instructions only that GPU has (wgmma,
    setmaxnreg). Such a cubin runs on that compute capability alone, the GPU it is built for."""
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")
