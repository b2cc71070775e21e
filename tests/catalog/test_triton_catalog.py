"""Bad input to the Triton kernels' load-time API, config tables and the TP sharding: each
row a named error, or the correct result. Every row runs without a GPU (the checks come
before any launch)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from w4a8_kernels.errors import KernelInputError
from w4a8_kernels.triton_pack import marlin_int_scales, pack_half_split
from w4a8_kernels.triton_runtime import TileConfig, table_config

SURFACE = "triton kernels"
ROOT = Path(__file__).resolve().parents[2]

_GEN = torch.Generator().manual_seed(3)
W = torch.randint(-8, 8, (8, 256), generator=_GEN, dtype=torch.int8)
S = torch.rand(8, 2, generator=_GEN) * 0.02 + 0.001


def _raises(exc, pattern, fn):
    def run():
        with pytest.raises(exc, match=pattern):
            fn()
    return run


def _int_rescale_weight():
    from w4a8_kernels.triton_w4a8 import prepare_w4a8_int_rescale
    p = prepare_w4a8_int_rescale(W, S, 128)
    assert p.scales.dtype == torch.int32 and int(p.scales.max()) == 4096 and p.int_rescale > 0


def _prefill_bucket():
    from w4a8_kernels.triton_w4a8 import W4A8_CONFIGS
    assert table_config(W4A8_CONFIGS["channel"], 10 ** 6) == W4A8_CONFIGS["channel"][-1][1]


def _tp_row_shard():
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from tp_bench import row_shard
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return row_shard(torch.zeros(4, 14784, dtype=torch.int8), torch.ones(4, 115), 128, 2, 0)


def _int_rescale_per_channel():
    from w4a8_kernels.triton_w4a8 import prepare_w4a8_int_rescale
    prepare_w4a8_int_rescale(W, S[:, :1], -1)


CATALOG = [
    ("TileConfig block_m = 24", "KernelInputError: TileConfig.block_m = 24; accepted: a power of two >= 16",
     _raises(KernelInputError, r"block_m = 24; accepted: a power of two", lambda: TileConfig(24, 64, 64))),
    ("TileConfig split_k = 65", "KernelInputError: TileConfig.split_k = 65; accepted: 0 (auto) to 64",
     _raises(KernelInputError, r"split_k = 65; accepted: 0 \(auto\) to 64",
             lambda: TileConfig(16, 64, 64, split_k=65))),
    ("TileConfig num_warps = 3", "KernelInputError: TileConfig.num_warps = 3; accepted: 1, 2, 4, 8, 16",
     _raises(KernelInputError, "num_warps = 3", lambda: TileConfig(16, 64, 64, num_warps=3))),
    ("a config table whose last bucket is closed, at a larger M",
     "KernelInputError: M = 17: the config table ends at M = 16",
     _raises(KernelInputError, "ends at M = 16", lambda: table_config(((16, TileConfig(16, 16, 16)),), 17))),
    ("M = 1,000,000 in the committed W4A8 table", "ok: the open last (prefill) bucket", _prefill_bucket),
    ("group_size 16 for the half-split layout", "KernelInputError: group_size = 16; the Triton kernels accept ...",
     _raises(KernelInputError, "group_size = 16", lambda: pack_half_split(W, torch.ones(8, 16), 16))),
    ("asymmetric weight (zeros given)", "KernelInputError: zeros: ... symmetric int4 weights only",
     _raises(KernelInputError, "symmetric", lambda: pack_half_split(W, S, 128, torch.zeros(8, 2)))),
    ("float32 scale dtype for Marlin's integer scales",
     "KernelInputError: scale_dtype = torch.float32; accepted: torch.bfloat16, torch.float16",
     _raises(KernelInputError, "scale_dtype", lambda: marlin_int_scales(S, torch.float32))),
    ("a zero group scale for Marlin's integer scales", "KernelInputError: ... needs positive scales",
     _raises(KernelInputError, "positive", lambda: marlin_int_scales(S * 0))),
    ("integer rescale of a per-channel weight", "KernelInputError: group_size = -1: integer rescale is for grouped weights",
     _raises(KernelInputError, "for grouped weights", _int_rescale_per_channel)),
    ("integer rescale of a g128 weight", "ok: int32 scales up to 4096 and a positive factor", _int_rescale_weight),
    ("down_proj K = 14784 over TP 2 at g128",
     "KernelInputError: K = 14784 over 2 ranks gives 7392 per rank, not a multiple of g128",
     _raises(KernelInputError, "7392 per rank, not a multiple of g128", _tp_row_shard)),
]


@pytest.mark.parametrize("row", CATALOG, ids=[row[0] for row in CATALOG])
def test_triton_catalog(row):
    row[2]()
