"""The warp-level instructions of the BF16 tensor-core kernels, modelled in NumPy from the PTX ISA's
fragment layouts, so that a kernel's data movement can be replayed on the CPU lane by lane.

A register is an array of 32 uint32 values, one per lane; two BF16 values share a register, the
lower-numbered element in the low 16 bits. ``mma16816`` is ``mma.sync.aligned.m16n8k16.row.col.
f32.bf16.bf16.f32`` (the products summed exactly, in float64), ``ldmatrix4`` is ``ldmatrix.sync.
aligned.m8n8.x4.shared.b16``. ``wgmma`` is ``wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16``
with both operands K-major in shared memory behind 128-byte-swizzle descriptors, and
``wgmma_accumulator`` the place of each lane's accumulator registers in its 64 x N result.
"""

from __future__ import annotations

import numpy as np

LANES = np.arange(32)
GROUP, IN_GROUP = LANES >> 2, LANES & 3  # groupID, threadID_in_group


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """BF16 bit patterns (any unsigned type, low 16 bits used) as float64."""
    return (np.asarray(bits, dtype=np.uint32) << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def half(reg: np.ndarray, which: int) -> np.ndarray:
    return (reg >> (16 * which)) & 0xFFFF


def mma16816(d: np.ndarray, a: list[np.ndarray], b: list[np.ndarray]) -> None:
    """d (32 x 4 float64: c0..c3 of every lane) += A (16 x 16) @ B (16 x 8), A from the four
    registers a, B from the two registers b, laid out as the PTX ISA's figures for m16n8k16 say."""
    A, B = np.full((16, 16), np.nan), np.full((16, 8), np.nan)
    for i in range(8):  # a0..a7: rows groupID (+8 for a2, a3, a6, a7), columns 2 t + (i & 1) (+8 from a4)
        row = GROUP if i < 2 or 4 <= i < 6 else GROUP + 8
        A[row, 2 * IN_GROUP + (i & 1) + (8 if i >= 4 else 0)] = bf16_values(half(a[i // 2], i % 2))
    for i in range(4):  # b0..b3: rows 2 t + (i & 1) (+8 from b2), column groupID
        B[2 * IN_GROUP + (i & 1) + (8 if i >= 2 else 0), GROUP] = bf16_values(half(b[i // 2], i % 2))
    assert not np.isnan(A).any() and not np.isnan(B).any(), "a fragment element was not given"
    D = A @ B
    for i in range(4):  # c0..c3: row groupID (+8 from c2), column 2 t + (i & 1)
        d[:, i] += D[GROUP + (8 if i >= 2 else 0), 2 * IN_GROUP + (i & 1)]


def ldmatrix4(smem: np.ndarray, addresses: np.ndarray) -> list[np.ndarray]:
    """Four 8 x 8 matrices of 16-bit elements from ``smem`` (bytes): lane l gives the address of
    row l % 8 of matrix l // 8 (16 bytes, 16-byte aligned); register j of lane l holds elements
    2 (l % 4), 2 (l % 4) + 1 of row l // 4 of matrix j."""
    addresses = np.asarray(addresses)
    assert addresses.shape == (32,) and (addresses % 16 == 0).all() and (addresses + 16 <= smem.size).all()
    words = smem.view(np.uint32)
    return [words[(addresses[8 * j + GROUP] + 4 * IN_GROUP) // 4] for j in range(4)]


def words16(elements: np.ndarray) -> np.ndarray:
    """Rows of 8 BF16 bit patterns (lanes x 8, uint16) as the four 32-bit words of a 16-byte load
    (lanes x 4): what ``uint4`` holds after reading them, .x = elements 0 and 1."""
    e = np.asarray(elements, dtype=np.uint32).reshape(-1, 8)
    return e[:, 0::2] | (e[:, 1::2] << 16)


def descriptor_operand(smem: np.ndarray, desc: int, rows: int) -> np.ndarray:
    """The ``rows`` x 16 BF16 operand (float64) a wgmma reads through shared-memory descriptor
    ``desc``, K-major with the 128-byte swizzle: row r, column c at byte start + (r // 8) * SBO +
    (r % 8) * 128 + 2 c, whose 16-byte chunk (address bits 4-6) is XORed with its row within the
    1024-byte group (bits 7-9). The descriptor's fields: start address >> 4 (bits 0-13), stride
    byte offset >> 4 (32-45), layout (62-63: 1 is the 128-byte swizzle)."""
    assert desc >> 62 == 1, "not a 128-byte swizzle descriptor"
    start, stride = (desc & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4
    r, c = np.arange(rows)[:, None], np.arange(16)[None, :]
    logical = start + (r // 8) * stride + (r % 8) * 128 + 2 * c
    physical = logical ^ (((logical >> 7) & 7) << 4)
    assert (physical + 2 <= smem.size).all(), "an operand read past the end of shared memory"
    bits = smem[physical].astype(np.uint32) | (smem[physical + 1].astype(np.uint32) << 8)
    return bf16_values(bits)


def wgmma(d: np.ndarray, smem: np.ndarray, desc_a: int, desc_b: int) -> None:
    """d (64 x N float64, the warpgroup's result) += A (64 x 16) @ B (N x 16)^T."""
    d += descriptor_operand(smem, desc_a, 64) @ descriptor_operand(smem, desc_b, d.shape[1]).T


def wgmma_accumulator(warp: int, j: int, e: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of the 64 x N result held by register 4 j + e of each lane of ``warp`` (0-3
    within the warpgroup): rows 16 warp + groupID (+ 8 for e >= 2), columns 8 j + 2 t + (e & 1)."""
    return 16 * warp + GROUP + 8 * (e >> 1), 8 * j + 2 * IN_GROUP + (e & 1)
