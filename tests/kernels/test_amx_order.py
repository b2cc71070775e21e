"""The AMX engine's float arithmetic, bit for bit: each group's exact int32 sum times its
float32 scale, the terms summed in group order, then times the token's scale (no fused
multiply-add), as w4a8_amx.c documents. The float64 reference checks closeness only; an
epilogue that reordered the sums or fused a multiply-add would pass it and fail here."""
from __future__ import annotations

import pytest
import torch

from w4a8_kernels.cpu_w4a8 import prepare_w4a8, w4a8_native_from_quantized
from w4a8_kernels.int8_gemm import Int8Engine, engine_available
from w4a8_kernels.quant import quantize_per_token_int8
from w4a8_kernels.selftest import in_order

ok, why = engine_available(Int8Engine.U4_AMX)

# M: one partial token block, a full one plus one token, several blocks with a ragged
# last; N off the 32-row pairs; K: one group, two (a pair), an odd count (the last pair
# has one group), group sizes that pad to 64 (g 96) or span several 64-blocks (g 192)
# M over several chunks of token blocks (a 32-token block's tiles take 32 K bytes; chunks
# of at most half of L2 once they pass 3/4 of it): at L2 2 MiB, K 8192 gives chunks of 4
# blocks (290: 4, 4, 2 with a ragged last block; 225: 4, 4), K 4096 of 7 (417: 7, 7);
# N of 2-4 weight pairs per thread, walked forwards, then backwards
CASES = [(1, 17, 128, 128), (33, 77, 256, 128), (161, 40, 896, 128), (70, 33, 960, 192),
         (40, 64, 288, 96), (97, 45, 512, -1), (9, 31, 4096, 128),
         (290, 136, 8192, 128), (225, 200, 8192, -1), (417, 100, 4096, 256)]


def sums_in_order(m: int, n: int, k: int, g: int, asym: bool) -> tuple[bool, float]:
    """(bit for bit, max difference): the u4_amx engine this process holds against the
    documented order, on scales of mixed sign and magnitude, so a changed order rounds
    differently."""
    gen = torch.Generator().manual_seed(m * 1000 + n + k)
    gg = k if g == -1 else g
    lo, hi = (0, 15) if asym else (-8, 7)
    w_q = torch.randint(lo, hi + 1, (n, k), generator=gen, dtype=torch.int8)
    zeros = torch.randint(0, 16, (n, k // gg), generator=gen, dtype=torch.int8) if asym else None
    scales = (torch.rand(n, k // gg, generator=gen) - 0.3) * 10.0 ** torch.randint(-3, 3, (n, k // gg), generator=gen)
    x_q, x_scale = quantize_per_token_int8(torch.randn(m, k, generator=gen))
    p = prepare_w4a8(w_q, scales, g, zeros, engine=Int8Engine.U4_AMX)
    out = w4a8_native_from_quantized(x_q, x_scale, p)
    want = in_order(x_q, x_scale, w_q, scales, gg, zeros)
    return torch.equal(out, want), (out - want).abs().max().item()


@pytest.mark.skipif(not ok, reason=f"u4_amx cannot run here: {why}")
@pytest.mark.parametrize("m, n, k, g", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("asym", [False, True], ids=["sym", "asym"])
def test_amx_sums_in_the_documented_order(m, n, k, g, asym):
    same, diff = sums_in_order(m, n, k, g, asym)
    assert same, diff
