"""vLLM's Machete heuristic (csrc/quantization/machete/generate.py:511-534), and with the
sdist at hand, that the table is the one the sdist's generator holds."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from w4a8_kernels.machete_schedule import _HEURISTIC, all_schedules, machete_schedule, schedule_name

SDIST = Path(os.environ.get("WORKBENCH_VLLM_SRC", "/nonexistent"))  # an unpacked vLLM sdist
GENERATE = SDIST / "csrc" / "quantization" / "machete" / "generate.py"


@pytest.mark.parametrize("m,n,k,tile", [
    (1, 4096, 4096, (128, 16)), (16, 28672, 4096, (256, 16)), (16, 14336, 4096, (128, 16)),
    (64, 4096, 4096, (128, 16)), (256, 4096, 4096, (128, 64)), (1024, 4096, 4096, (128, 128)),
    (1024, 28672, 4096, (128, 256)), (100, 4069, 4069, (128, 32)), (100, 4096, 4096, (128, 128)),
])
def test_the_heuristic_picks_vllms_schedule(m, n, k, tile):
    assert machete_schedule(m, n, k)[0] == tile


def test_bad_sizes_are_refused_by_name():
    with pytest.raises(ValueError, match="M, N, K must be >= 1"):
        machete_schedule(0, 4096, 4096)


def test_schedule_names_are_vllms():
    assert schedule_name((128, 16), (1, 1, 1)) == (
        "128x16_1x1x1_KernelTmaWarpSpecializedCooperative_TmaWarpSpecializedCooperative_"
        "StreamKScheduler")


@pytest.mark.skipif(not GENERATE.is_file(), reason="the pinned vLLM sdist is not at hand "
                                                   "(set WORKBENCH_VLLM_SRC)")
def test_the_table_is_the_sdists():
    text = GENERATE.read_text()
    rows = re.findall(r'^\s*(?:"([^"]+)"|None): \(\((\d+), (\d+)\), \((\d+), (\d+), (\d+)\)\)',
                      text, re.M)
    assert len(rows) == len(_HEURISTIC) == 16
    for (cond, *nums), (_, tile, cluster) in zip(rows, _HEURISTIC):
        assert (tile, cluster) == ((int(nums[0]), int(nums[1])), tuple(map(int, nums[2:])))


def test_all_schedules_are_the_heuristics_once_each_in_order():
    # get_unique_schedules (generate.py:543-551): first appearance order, no repeats
    s = all_schedules()
    assert len(s) == len(set(s)) == 9
    assert s[0] == ((128, 128), (2, 1, 1)) and s[-1] == ((256, 16), (1, 1, 1))
    assert set(s) == {(tile, cluster) for _, tile, cluster in _HEURISTIC}
