"""benchmarks/tp_bench.py on 2 CPU processes with gloo: the sharding, the collective and
the checks against the unsharded layer, on a small MLP of Qwen2's form."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from w4a8_kernels.errors import KernelInputError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tp(monkeypatch):
    # on sys.path: the spawned ranks import the worker's module by name
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import tp_bench
    return tp_bench


def test_shards_follow_vllm_and_refuse_what_does_not_split(tp):
    shapes = dict(((layer, t), nk) for layer, t, nk in tp.shard_shapes())
    assert shapes[("gate_up_proj", 4)] == (2 * 29568 // 4, 8192)
    assert shapes[("down_proj", 8)] == (8192, 3696)
    w = torch.arange(8 * 4, dtype=torch.int8).reshape(8, 4) % 7
    s = torch.arange(8, dtype=torch.float32).reshape(8, 1)
    # merged outputs [gate 0..3 | up 4..7] over 2 ranks: rank 1 holds gate 2..3 and up 6..7
    w1, s1 = tp.column_shard(w, s, [4, 4], 2, 1)
    assert torch.equal(w1, w[[2, 3, 6, 7]]) and torch.equal(s1.flatten(), s[[2, 3, 6, 7]].flatten())
    with pytest.raises(KernelInputError, match="not a multiple of g128"):
        tp.row_shard(torch.zeros(4, 14784, dtype=torch.int8), torch.ones(4, 115), 128, 2, 0)


def test_gloo_two_ranks_equal_the_unsharded_layer(tp):
    ranks = tp.run("gloo", 2, hidden=256, inter=512, groups=[-1, 32], ms=[4], reps=2, check_m=5,
                   port=29541)
    assert len(ranks) == 2
    for rank in ranks:
        for c in rank["checks"]:
            for kind in ("w4a8", "w4a16"):
                r = c[kind]
                assert r["column_gathered_equals_unsharded"], (c["g"], kind, r)
                assert r["row_within_rounding_of_reference"], (c["g"], kind, r)
        # W4A16 row-parallel is the unsharded layer up to float32 sums; W4A8 quantizes each
        # rank's slice with its own scale, a visible but small difference
        assert all(c["w4a16"]["row_rel_diff_to_unsharded"] < 1e-5 for c in rank["checks"])
        assert all(1e-6 < c["w4a8"]["row_rel_diff_to_unsharded"] < 5e-2 for c in rank["checks"])
    recs = tp.records(ranks, 256, 512, "host")
    assert {r["path"] for r in recs} == {"w4a8_native", "w4a16_fallback"}
    assert all(r["median_us"] > 0 and r["detail"]["all_reduce_us"] > 0 for r in recs)
