"""Comparing a kernel's output with the reference, element by element.

An element passes when ``|out - ref| <= atol + rtol * |ref|``. NaN in the output passes only
where the reference is NaN too; an element still holding the poison bit pattern is counted as
unwritten (and fails), whatever its value.
"""

from __future__ import annotations

import numpy as np

from ..wire.results import CheckInfo
from ..wire.signature import DTYPES
from .inputs import to_numbers


def poison_array(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """An array filled with the dtype's poison pattern, in storage layout."""
    storage = np.dtype(DTYPES[dtype].numpy)
    nbytes = int(np.prod(shape, dtype=np.int64)) * storage.itemsize
    pattern = DTYPES[dtype].poison
    raw = (pattern * (nbytes // len(pattern) + 1))[:nbytes]
    return np.frombuffer(raw, dtype=storage).reshape(shape).copy()


def compare(
    name: str,
    out: np.ndarray,
    ref: np.ndarray,
    dtype: str,
    rtol: float,
    atol: float,
    input_set: int,
    phase: str = "check",
) -> CheckInfo:
    """Compare ``out`` (storage layout, as copied from the device) with ``ref`` (numbers)."""
    n = int(out.size)
    if tuple(ref.shape) != tuple(out.shape):
        raise ValueError(f"output {name!r}: reference shape {ref.shape} != output shape {out.shape}")
    poison = poison_array(out.shape, dtype)
    unwritten_mask = _bits_equal(out, poison)
    actual = to_numbers(out, dtype).astype(np.float64)
    expected = np.asarray(ref, dtype=np.float64)
    if not DTYPES[dtype].is_float:
        # an integer poison value that equals the right answer is not an unwritten element
        unwritten_mask &= actual != expected
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(actual - expected)
        good = agrees(actual, expected, rtol, atol, diff) & ~unwritten_mask
        finite = np.isfinite(diff)
        rel = diff / np.maximum(np.abs(expected), np.finfo(np.float64).tiny)
        ref_norm = np.linalg.norm(expected[np.isfinite(expected)])
        err_norm = np.linalg.norm(diff[finite])
    bad = ~good
    info = CheckInfo(
        output=name,
        input_set=input_set,
        phase=phase,  # type: ignore[arg-type]
        ok=not bool(bad.any()),
        elements=n,
        mismatches=int(bad.sum()),
        unwritten=int(unwritten_mask.sum()),
        nan_count=int((np.isnan(actual) & ~unwritten_mask).sum()),
        inf_count=int(np.isinf(actual).sum()),
        max_abs_error=float(diff[finite].max()) if finite.any() else 0.0,
        max_rel_error=float(rel[finite].max()) if finite.any() else 0.0,
        rel_l2_error=float(err_norm / ref_norm) if ref_norm > 0 else float(err_norm),
    )
    if not info.ok:
        flat = int(np.flatnonzero(bad.reshape(-1))[0])
        index = np.unravel_index(flat, out.shape) if out.ndim else ()
        info.first_bad_index = [int(i) for i in index]
        info.expected = json_float(expected.reshape(-1)[flat])
        info.actual = json_float(actual.reshape(-1)[flat])
    return info


def agrees(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float,
           diff: np.ndarray | None = None) -> np.ndarray:
    """Where ``actual`` passes for ``expected`` (numbers, float64): the element rule of this module."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(actual - expected) if diff is None else diff
        close = diff <= atol + rtol * np.abs(expected)
        both_nan = np.isnan(actual) & np.isnan(expected)
        same_inf = np.isinf(actual) & (actual == expected)
    return close | both_nan | same_inf


def _bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    itemsize = a.dtype.itemsize
    as_uint = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[itemsize]
    return a.view(as_uint) == b.view(as_uint)


def json_float(value: float) -> float | None:
    """A value as a result keeps it: None when not finite (results are strict JSON)."""
    value = float(value)
    return value if np.isfinite(value) else None


def shown(value: float | None) -> str:
    """A value of a failure report: results keep non-finite values as None (strict JSON)."""
    return "NaN/Inf" if value is None else str(value)


def describe(info: CheckInfo) -> str:
    """One line for a failed check, for tables and for the model's feedback."""
    if info.ok:
        return f"{info.output}: ok (max abs {info.max_abs_error:.3g}, max rel {info.max_rel_error:.3g})"
    parts = [f"{info.output} (input set {info.input_set}, {info.phase}): {info.mismatches}/{info.elements} wrong"]
    if info.unwritten:
        parts.append(f"{info.unwritten} unwritten")
    if info.nan_count:
        parts.append(f"{info.nan_count} NaN")
    if info.inf_count:
        parts.append(f"{info.inf_count} Inf")
    if info.first_bad_index is not None:
        parts.append(f"first at {tuple(info.first_bad_index)}: expected {shown(info.expected)}, "
                     f"got {shown(info.actual)}")
    parts.append(f"max abs err {info.max_abs_error:.3g}")
    return ", ".join(parts)
