"""Landlock: a process gives up, for good, every file access but reading the CUDA headers.

The compiler process (compile_process.py) calls :func:`confine` once NVRTC is loaded, so that
even a source the include scan misjudged cannot make NVRTC open a host file: the kernel refuses
the open, whatever path the preprocessor computed.

Direct syscalls through ctypes rather than a binding: the Python bindings on PyPI (``landlock``
1.0.0.dev5, ``landlockpy`` 0.2, ``py-landlock`` 0.1) are young single-author projects, and what
is needed here is three syscalls and two structs, all stable kernel ABI (linux/landlock.h).
Linux only; elsewhere, or on a kernel built without Landlock, :func:`abi_version` says why not.
"""

from __future__ import annotations

import ctypes
import os
import sys

# linux/landlock.h; the syscall numbers are the same on every architecture (asm-generic)
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

READ_FILE, READ_DIR = 1 << 2, 1 << 3
# Every file-system right each ABI version knows: all handled (so denied unless a rule allows it).
_FS_RIGHTS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_RIGHTS = 0b11  # ABI 4: bind and connect TCP
_SCOPES = 0b11  # ABI 6: abstract unix sockets and signals outside the domain


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockUnavailable(OSError):
    """This kernel (or OS) cannot confine a process with Landlock; the message says why."""


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The Landlock ABI this kernel offers (1, 2, ...); raise :class:`LandlockUnavailable` if none."""
    if not sys.platform.startswith("linux"):
        raise LandlockUnavailable(f"Landlock is a Linux feature (this is {sys.platform})")
    libc = _libc()
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if version < 0:
        err = ctypes.get_errno()
        why = {38: "the kernel predates Landlock (5.13)", 95: "Landlock is disabled at boot (lsm=)"}
        raise LandlockUnavailable(why.get(err, os.strerror(err)))
    return int(version)


def confine(read_only: list[str]) -> int:
    """Restrict this thread and every thread or process it starts later to reading the files
    and directories under ``read_only``: no other read, no write, no execute, no TCP, no signal
    or abstract socket outside the process. Irreversible. Returns the ABI version used."""
    abi = abi_version()
    libc = _libc()
    attr = _RulesetAttr(_FS_RIGHTS[min(abi, 5)], _NET_RIGHTS if abi >= 4 else 0, _SCOPES if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16  # before ABI 6 the struct had no 'scoped'
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise LandlockUnavailable(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for path in read_only:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rights = READ_FILE | READ_DIR if os.path.isdir(path) else READ_FILE
                rule = _PathBeneathAttr(rights, fd)
                if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    raise LandlockUnavailable(f"landlock_add_rule({path}): {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LandlockUnavailable(f"prctl(NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise LandlockUnavailable(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi
