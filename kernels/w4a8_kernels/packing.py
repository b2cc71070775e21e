"""int4 packing in the on-disk orders the workbench reads and writes.

Logical input everywhere: int8 [N, K] (out_features, in_features). Three layouts:

- compressed-tensors (`pack-quantized`): int32 [N, ceil(K / 8)], packed along K
  (input_dim = packed_dim = 1). Nibble i of word j holds column 8j + i, stored as
  value + 8 (signed int4 shifted to [0, 15]); a ragged tail is padded with nibble 0.
  Same result as compressed_tensors `pack_to_int32(w, 4, packed_dim=1)`.
- GPTQ `qweight`: int32 [K / 8, N], packed along K (dim 0); nibble i of word [j, n]
  holds row 8j + i of the [K, N] weight, as an unsigned nibble (uint4b8 = value + 8
  for symmetric checkpoints). GPTQ `qzeros`: int32 [K / g, N / 8], packed along N.
- AWQ `qweight`: int32 [K, N / 8], packed along N with the interleaved nibble order
  [0, 2, 4, 6, 1, 3, 5, 7]: nibble slot s holds column 8j + AWQ_ORDER[s].
  AWQ `qzeros`: int32 [K / g, N / 8], same order.

All unpack functions return int8; `pack(unpack(x)) == x` and `unpack(pack(w)) == w` hold
bit-exactly (tested).
"""
from __future__ import annotations

from enum import Enum

import torch

from w4a8_kernels.errors import KernelInputError

__all__ = [
    "PackingFormat", "AWQ_ORDER",
    "pack_int4_ct", "unpack_int4_ct",
    "pack_int4_gptq", "unpack_int4_gptq", "pack_int4_gptq_zeros", "unpack_int4_gptq_zeros",
    "pack_int4_awq", "unpack_int4_awq", "pack_int4_awq_zeros", "unpack_int4_awq_zeros",
    "gptq_to_awq", "awq_to_gptq", "ct_to_gptq", "gptq_to_ct",
    "signed_to_unsigned", "unsigned_to_signed",
    "pack_int4_pairs_uint8",
]

# AWQ stores column 8j + AWQ_ORDER[s] in nibble slot s of word j.
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_AWQ_INVERSE = tuple(AWQ_ORDER.index(i) for i in range(8))
_SHIFTS = torch.arange(8, dtype=torch.int32) * 4


class PackingFormat(str, Enum):
    """How int4 values sit in int32 words on disk."""

    COMPRESSED_TENSORS = "compressed-tensors"
    """int32 [N, K/8] packed along K, value + 8, low nibble first (pack-quantized)."""
    GPTQ = "gptq"
    """int32 [K/8, N] packed along K (dim 0), unsigned nibbles, low nibble first."""
    AWQ = "awq"
    """int32 [K, N/8] packed along N, unsigned nibbles in order 0,2,4,6,1,3,5,7."""


def _check_nibbles(u: torch.Tensor, name: str) -> None:
    if u.dtype not in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        raise KernelInputError(f"{name} must be an integer tensor, got {u.dtype}")
    if u.dim() != 2:
        raise KernelInputError(f"{name} must be 2-D, got shape {tuple(u.shape)}")
    if u.numel() and (int(u.min()) < 0 or int(u.max()) > 15):
        raise KernelInputError(
            f"{name} holds values in [{int(u.min())}, {int(u.max())}]; "
            "unsigned nibbles must lie in [0, 15]")


def _check_packed(p: torch.Tensor, name: str) -> None:
    if p.dtype != torch.int32:
        raise KernelInputError(f"{name} must be torch.int32 packed words, got {p.dtype}")
    if p.dim() != 2:
        raise KernelInputError(f"{name} must be 2-D, got shape {tuple(p.shape)}")


def _pack_last(u: torch.Tensor) -> torch.Tensor:
    """Pack unsigned nibbles [R, C] (C % 8 == 0) along the last dim: [R, C / 8] int32."""
    r, c = u.shape
    words = (u.to(torch.int32).view(r, c // 8, 8) << _SHIFTS.to(u.device)).sum(dim=2, dtype=torch.int64)
    # Sums fill 32 bits; wrap into the signed int32 range as the on-disk int32 does.
    return (words - ((words >> 31) << 32)).to(torch.int32)


def _unpack_last(p: torch.Tensor) -> torch.Tensor:
    """Inverse of _pack_last: int32 [R, W] -> int8 nibbles [R, 8W] in [0, 15]."""
    r, w = p.shape
    return ((p.unsqueeze(-1) >> _SHIFTS.to(p.device)) & 0xF).to(torch.int8).reshape(r, w * 8)


def signed_to_unsigned(w_q: torch.Tensor) -> torch.Tensor:
    """Signed int4 [-8, 7] to the uint4b8 nibble [0, 15] (value + 8)."""
    return (w_q.to(torch.int16) + 8).to(torch.int8)


def unsigned_to_signed(u: torch.Tensor) -> torch.Tensor:
    """uint4b8 nibble [0, 15] back to signed int4 [-8, 7]."""
    return (u.to(torch.int16) - 8).to(torch.int8)


# -- compressed-tensors ------------------------------------------------------------

def pack_int4_ct(w_q: torch.Tensor) -> torch.Tensor:
    """Signed int8 [N, K] in [-8, 7] -> int32 [N, ceil(K / 8)] (compressed-tensors order)."""
    if w_q.dtype != torch.int8:
        raise KernelInputError(f"w_q must be torch.int8 before packing, got {w_q.dtype}")
    u = signed_to_unsigned(w_q) if w_q.numel() else w_q
    _check_nibbles(u, "w_q + 8")
    n, k = u.shape
    pad = (-k) % 8
    if pad:
        u = torch.nn.functional.pad(u, (0, pad))
    return _pack_last(u)


def unpack_int4_ct(packed: torch.Tensor, k: int) -> torch.Tensor:
    """int32 [N, ceil(K / 8)] -> signed int8 [N, K] (drops the padding of a ragged K)."""
    _check_packed(packed, "packed")
    if not 0 < k <= packed.shape[1] * 8 or packed.shape[1] != -(-k // 8):
        raise KernelInputError(
            f"k = {k} does not fit packed width {packed.shape[1]} (needs ceil(k / 8) words)")
    return unsigned_to_signed(_unpack_last(packed)[:, :k])


# -- GPTQ --------------------------------------------------------------------------

def pack_int4_gptq(u: torch.Tensor) -> torch.Tensor:
    """Unsigned nibbles [N, K] (K % 8 == 0) -> GPTQ qweight int32 [K / 8, N]."""
    _check_nibbles(u, "u")
    if u.shape[1] % 8:
        raise KernelInputError(f"GPTQ packs 8 rows of K per word; K = {u.shape[1]} is not a multiple of 8")
    # Packing along K of the [K, N] weight is packing along the last dim of [N, K].
    return _pack_last(u).t().contiguous()


def unpack_int4_gptq(qweight: torch.Tensor) -> torch.Tensor:
    """GPTQ qweight int32 [K / 8, N] -> unsigned nibbles int8 [N, K]."""
    _check_packed(qweight, "qweight")
    return _unpack_last(qweight.t().contiguous())


def pack_int4_gptq_zeros(z: torch.Tensor) -> torch.Tensor:
    """Unsigned zero points [N, G] (N % 8 == 0) -> GPTQ qzeros int32 [G, N / 8]."""
    _check_nibbles(z, "zeros")
    if z.shape[0] % 8:
        raise KernelInputError(f"qzeros pack 8 output channels per word; N = {z.shape[0]} is not a multiple of 8")
    return _pack_last(z.t().contiguous())


def unpack_int4_gptq_zeros(qzeros: torch.Tensor) -> torch.Tensor:
    """GPTQ qzeros int32 [G, N / 8] -> unsigned zero points int8 [N, G]."""
    _check_packed(qzeros, "qzeros")
    return _unpack_last(qzeros).t().contiguous()


# -- AWQ ---------------------------------------------------------------------------

def _awq_pack_cols(v: torch.Tensor) -> torch.Tensor:
    """[R, C] nibbles -> [R, C / 8] words with AWQ's interleaved order."""
    r, c = v.shape
    v = v.reshape(r, c // 8, 8)[:, :, list(AWQ_ORDER)].reshape(r, c)
    return _pack_last(v)


def _awq_unpack_cols(p: torch.Tensor) -> torch.Tensor:
    r, w = p.shape
    return _unpack_last(p).reshape(r, w, 8)[:, :, list(_AWQ_INVERSE)].reshape(r, w * 8)


def pack_int4_awq(u: torch.Tensor) -> torch.Tensor:
    """Unsigned nibbles [N, K] (N % 8 == 0) -> AWQ qweight int32 [K, N / 8]."""
    _check_nibbles(u, "u")
    if u.shape[0] % 8:
        raise KernelInputError(f"AWQ packs 8 output channels per word; N = {u.shape[0]} is not a multiple of 8")
    return _awq_pack_cols(u.t().contiguous())


def unpack_int4_awq(qweight: torch.Tensor) -> torch.Tensor:
    """AWQ qweight int32 [K, N / 8] -> unsigned nibbles int8 [N, K]."""
    _check_packed(qweight, "qweight")
    return _awq_unpack_cols(qweight).t().contiguous()


def pack_int4_awq_zeros(z: torch.Tensor) -> torch.Tensor:
    """Unsigned zero points [N, G] (N % 8 == 0) -> AWQ qzeros int32 [G, N / 8]."""
    _check_nibbles(z, "zeros")
    if z.shape[0] % 8:
        raise KernelInputError(f"AWQ packs 8 output channels per word; N = {z.shape[0]} is not a multiple of 8")
    return _awq_pack_cols(z.t().contiguous())


def unpack_int4_awq_zeros(qzeros: torch.Tensor) -> torch.Tensor:
    """AWQ qzeros int32 [G, N / 8] -> unsigned zero points int8 [N, G]."""
    _check_packed(qzeros, "qzeros")
    return _awq_unpack_cols(qzeros).t().contiguous()


# -- conversions -------------------------------------------------------------------

def gptq_to_awq(qweight: torch.Tensor) -> torch.Tensor:
    """GPTQ qweight [K / 8, N] -> AWQ qweight [K, N / 8] (the same nibbles)."""
    return pack_int4_awq(unpack_int4_gptq(qweight))


def awq_to_gptq(qweight: torch.Tensor) -> torch.Tensor:
    """AWQ qweight [K, N / 8] -> GPTQ qweight [K / 8, N]."""
    return pack_int4_gptq(unpack_int4_awq(qweight))


def ct_to_gptq(packed: torch.Tensor, k: int) -> torch.Tensor:
    """compressed-tensors int32 [N, K / 8] -> GPTQ qweight [K / 8, N] of uint4b8 nibbles.

    compressed-tensors stores value + 8, which is GPTQ's uint4b8 nibble, so this is a
    pure relayout (the transpose vLLM's CPUWNA16 does when input_dim == packed_dim == 1).
    """
    return pack_int4_gptq(signed_to_unsigned(unpack_int4_ct(packed, k)))


def gptq_to_ct(qweight: torch.Tensor) -> torch.Tensor:
    """GPTQ qweight of uint4b8 nibbles [K / 8, N] -> compressed-tensors int32 [N, K / 8]."""
    return pack_int4_ct(unsigned_to_signed(unpack_int4_gptq(qweight)))


def pack_int4_pairs_uint8(w_q: torch.Tensor) -> torch.Tensor:
    """Signed int8 [N, K] (K even) -> uint8 [N, K / 2], two nibbles per byte.

    The byte layout vLLM's Dynamic4bitLinearKernel hands to
    `_dyn_quant_pack_4bit_weight`: value + 8, even column in the low nibble.
    """
    if w_q.dtype != torch.int8 or w_q.dim() != 2:
        raise KernelInputError(f"w_q must be int8 [N, K], got {w_q.dtype} {tuple(w_q.shape)}")
    if w_q.shape[1] % 2:
        raise KernelInputError(f"two nibbles per byte need an even K, got K = {w_q.shape[1]}")
    u = signed_to_unsigned(w_q)
    _check_nibbles(u, "w_q + 8")
    u = u.to(torch.uint8)
    return (u[:, 1::2] << 4) | u[:, ::2]
