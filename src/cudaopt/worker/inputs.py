"""Deterministic input sets.

Set 0 and set 1 are independent draws (different seeds). Set 2, when asked for, is a *near
duplicate* of set 0: equal in the leading elements, different in a scattered sample and in the
last element. A kernel that caches results keyed on a pointer or on a few leading elements
returns set 0's answer for set 2 and fails the check; an honest kernel cannot tell.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..wire import expr
from ..wire.protocol import CaseSpec, InitSpec
from ..wire.signature import DTYPES, Signature


CHUNK = 1 << 24  # elements of a draw's stream; a larger draw is several, drawn in parallel


class InputError(ValueError):
    """An input that cannot be generated (bad shape, missing or changed file)."""


@dataclass
class HostTensor:
    """Host data for one argument, stored as the device holds it (bfloat16 as uint16 bits)."""

    name: str
    dtype: str
    data: np.ndarray

    def as_numbers(self) -> np.ndarray:
        """The values as a NumPy number array (bfloat16 widened to float32)."""
        return to_numbers(self.data, self.dtype)


def to_numbers(data: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (data.astype(np.uint32) << 16).view(np.float32)
    return data


def from_numbers(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float values into the storage type (bfloat16: round to nearest even)."""
    if dtype == "bfloat16":
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
        rounding = ((bits >> 16) & 1) + 0x7FFF
        return ((bits + rounding) >> 16).astype(np.uint16)
    return np.ascontiguousarray(values).astype(DTYPES[dtype].numpy, copy=False)


def shape_of(shape: list, names: dict, what: str) -> tuple[int, ...]:
    try:
        dims = tuple(expr.evaluate_int(d, names) for d in shape)
    except expr.ExprError as exc:
        raise InputError(f"{what}: shape {shape}: {exc}") from None
    if any(d < 0 for d in dims):
        raise InputError(f"{what}: shape {dims} has a negative dimension")
    return dims


def _seed(case: CaseSpec, name: str, index: int) -> list[int]:
    digest = hashlib.sha256(f"{case.name}/{name}".encode()).digest()
    return [case.seed, int.from_bytes(digest[:4], "little"), index]


def _draw(init: InitSpec, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    if init.dist == "integers":
        return from_numbers(rng.integers(int(init.low), int(init.high), size=shape), dtype)
    work = np.float64 if dtype == "float64" else np.float32
    if init.dist == "normal":
        values = rng.standard_normal(size=shape, dtype=work)
        values *= work(init.std)
        values += work(init.mean)
    else:
        values = rng.random(size=shape, dtype=work)
        values *= work(init.high - init.low)
        values += work(init.low)
    if not DTYPES[dtype].is_float:
        np.rint(values, out=values)
    return from_numbers(values, dtype)


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(a, min(a + CHUNK, n)) for a in range(0, n, CHUNK)]


def _start_draw(init: InitSpec, shape: tuple[int, ...], dtype: str, seed: list[int], pool) -> Callable[[], np.ndarray]:
    """Start one draw on the pool; the returned call waits for it. Past :data:`CHUNK` elements the
    draw is chunks of streams of their own, drawn in parallel (KernelBench's 4096 x 393216 softmax
    input is 96): a draw of at most CHUNK elements is the seed's own stream, as it always was."""
    n = int(np.prod(shape, dtype=np.int64))
    if n <= CHUNK:
        return pool.submit(_draw, init, shape, dtype, np.random.default_rng(seed)).result
    out = np.empty(n, dtype=np.dtype(DTYPES[dtype].numpy))

    def fill(index: int, a: int, b: int) -> None:
        out[a:b] = _draw(init, (b - a,), dtype, np.random.default_rng([*seed, index]))

    parts = [pool.submit(fill, i, a, b) for i, (a, b) in enumerate(_chunks(n))]

    def result() -> np.ndarray:
        for part in parts:
            part.result()
        return out.reshape(shape)

    return result


def _copy_parallel(base: np.ndarray, pool) -> np.ndarray:
    """``base.copy()``, chunk by chunk on the pool (first touches of a large copy are its cost)."""
    out = np.empty_like(base)
    src, dst = base.reshape(-1), out.reshape(-1)
    for part in [pool.submit(np.copyto, dst[a:b], src[a:b]) for a, b in _chunks(src.size)]:
        part.result()
    return out


def _load_file(init: InitSpec, shape: tuple[int, ...], dtype: str, what: str) -> np.ndarray:
    path = Path(init.file or "")
    if not path.is_file():
        raise InputError(f"{what}: input file {path} not found")
    raw = path.read_bytes()
    if init.sha256 and hashlib.sha256(raw).hexdigest() != init.sha256:
        raise InputError(f"{what}: input file {path} changed since the request was made (SHA-256)")
    data = np.load(path, allow_pickle=False)
    if tuple(data.shape) != shape:
        raise InputError(f"{what}: {path} has shape {tuple(data.shape)}, the case says {shape}")
    if dtype == "bfloat16" and data.dtype == np.uint16:
        return np.ascontiguousarray(data)
    return from_numbers(data, dtype)


def generate(case: CaseSpec, signature: Signature, sets: int) -> list[dict[str, HostTensor]]:
    """``sets`` input sets for ``case``, each a dict from argument name to host tensor.

    Independent draws, and the chunks of a large one, run in a thread pool (NumPy's generators
    release the GIL), which matters for large cases: a 4096x4096 pair of inputs is four draws of
    16M values, KernelBench's softmax input two of 1.6G.
    """
    names = case.scalars  # never a tunable: shapes belong to the problem
    out: list[dict[str, HostTensor]] = [{} for _ in range(sets)]
    draws = {}
    for arg in signature.inputs:
        spec = case.inputs.get(arg.name)
        if spec is None:
            raise InputError(f"case {case.name!r}: no input named {arg.name!r}")
        what = f"case {case.name!r} input {arg.name!r}"
        shape = shape_of(spec.shape, names, what)
        if spec.init.dist == "file":
            data = _load_file(spec.init, shape, arg.dtype, what)
            for s in range(sets):
                out[s][arg.name] = HostTensor(arg.name, arg.dtype, data)
            continue
        indices = [s for s in range(sets) if s != 2] if spec.init.vary else [0]
        for s in indices:
            draws[(arg.name, s)] = (spec.init, shape, arg.dtype, _seed(case, arg.name, s))
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        pending = {key: _start_draw(*draw, pool) for key, draw in draws.items()}
        drawn = {key: wait() for key, wait in pending.items()}
        for arg in signature.inputs:
            if (arg.name, 0) not in drawn:
                continue  # loaded from a file above
            for s in range(sets):
                if (arg.name, s) in drawn:
                    data = drawn[(arg.name, s)]
                elif s == 2 and (arg.name, 1) in drawn:
                    data = _near_duplicate(drawn[(arg.name, 0)], drawn[(arg.name, 1)], case, arg.name, pool)
                else:  # an input that does not vary
                    data = drawn[(arg.name, 0)]
                out[s][arg.name] = HostTensor(arg.name, arg.dtype, data)
    return out


def _near_duplicate(base: np.ndarray, other: np.ndarray, case: CaseSpec, name: str, pool) -> np.ndarray:
    """``base`` with a scattered sample of its second half (and its last element) changed."""
    data = _copy_parallel(base, pool)
    flat, src = data.reshape(-1), other.reshape(-1)
    n = flat.size
    if n == 0:
        return data
    rng = np.random.default_rng(_seed(case, name, 1000))
    start = n // 2
    picks = rng.integers(start, n, size=max(1, (n - start) // 64))
    chosen = np.zeros(n - start, dtype=bool)  # sorted and unique without a sort: O(n), not O(k log k)
    chosen[picks - start] = True
    chosen[-1] = True
    picks = np.flatnonzero(chosen) + start
    differs = picks[src[picks] != flat[picks]]
    if differs.size == 0:  # the other draw agrees at every pick (tiny integer ranges)
        differs = np.nonzero(src[start:] != flat[start:])[0][:1] + start
    flat[differs] = src[differs]
    return data
