"""Alignment helpers: Marlin's padding rule and every candidate's verdict on a shard."""
from __future__ import annotations

from workbench.alignment import kernel_verdicts, marlin_padded_nk, padding_rows
from workbench.dispatch import trace_mp

SHARD = {"weight_type": "uint4b8", "act_type": "bfloat16", "group_size": 128, "zero_points": False,
         "out_type": None, "full_weight_shape": [4096, 2112], "partition_weight_shape": [4096, 2112]}


def test_marlin_padding_picks_the_cheaper_family():
    assert marlin_padded_nk(4096, 4096, 128) == (4096, 4096)  # aligned: untouched
    assert marlin_padded_nk(2112, 14784, 128) == (2112, 14848)  # (n%64, k%128) is cheaper
    assert marlin_padded_nk(2696, 4096, 128) == (2752, 4096)
    assert marlin_padded_nk(100, 96, -1) == (128, 128)  # channelwise: both families give 128 x 128


def test_padding_rows_cost_is_zero_only_when_aligned():
    rows = padding_rows("N", 4096, 4096, [0, 8], 128)
    by = {(r["offset"], r["rule"]): r["cost"] for r in rows}
    assert by[(0, "Marlin (marlin_padded_nk)")] == 0.0
    assert by[(8, "Marlin (marlin_padded_nk)")] > 0.0
    assert by[(8, "XPU / INC W4A8 (K, N % 8)")] == 0.0


def test_verdicts_cover_every_candidate_and_keep_the_chosen_one():
    t = trace_mp(SHARD, "sm90-h200")
    v = kernel_verdicts(t, "sm90-h200", {})
    assert v[t.selected] == ("selected", "")
    assert set(v) == set(t.candidates)
    # Machete rejects N = 2112 (not a multiple of 128); the others are asked in turn.
    assert v["MacheteLinearKernel"] == ("rejected", "Output features size must be divisible by 128")
    assert v["MarlinLinearKernel"][0] == "accepts"


def test_shard_tables_ask_the_rule_set_they_are_given():
    # Before, the tables always traced the default rule set, whatever the page's version.
    from workbench.alignment import model_shard_rows, shard_rows
    from workbench.checkpoints import list_layers
    from workbench.paths import SAMPLE_ROOT

    spec = list_layers(SAMPLE_ROOT / "ct-w4a8-int-g128")[0]
    for rows in (shard_rows([spec], "sm90-h200", {}, 2, version="0.0.1"),
                 model_shard_rows(spec, "Llama-3.1-8B", "sm90-h200", {}, 2, version="0.0.1")):
        assert rows and all(r["error_type"] == "UnknownVersionError" for r in rows)
    # kernel_verdicts re-asks `t.rules`: tests/dispatch/test_fake_version.py shows a fake one


def test_offset_shapes_fix_the_other_side_and_drop_empty_shapes():
    from workbench.alignment import offset_shapes

    assert offset_shapes("N", 256, 1024, [-256, -8, 0, 8]) == [(-8, 1024, 248), (0, 1024, 256), (8, 1024, 264)]
    assert offset_shapes("K", 256, 1024, [0, 16]) == [(0, 256, 1024), (16, 272, 1024)]
