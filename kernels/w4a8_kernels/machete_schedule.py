"""The Machete schedule the pinned vLLM runs for an (M, N, K) GEMM when none is forced.

`csrc/quantization/machete/generate.py:511-534` lists (condition, tile MN, cluster MNK) in
order; the generated `mm_dispatch_<types>` (DISPATCH_TEMPLATE, generate.py:45-56) takes the
first condition that holds, the last one unconditional. Every schedule shares
TmaWarpSpecializedCooperative kernel and epilogue schedules and the StreamK tile scheduler
(generate.py:505-509), so `schedule_name` gives vLLM's `gen_sch_sig` text (generate.py:285-306).
The conditions are copied as written, quirks included ("4069", not 4096).
"""
from __future__ import annotations

# (predicate on M, N, K, tile (M, N), cluster (M, N, K)): generate.py:511-534, in order.
_HEURISTIC = (
    (lambda M, N, K: M > 256 and K <= 16384 and N <= 4096, (128, 128), (2, 1, 1)),
    (lambda M, N, K: M > 256, (128, 256), (2, 1, 1)),
    (lambda M, N, K: M > 128 and K <= 4096 and N <= 4096, (128, 64), (2, 1, 1)),
    (lambda M, N, K: M > 128 and K <= 8192 and N <= 8192, (128, 128), (2, 1, 1)),
    (lambda M, N, K: M > 128, (128, 256), (2, 1, 1)),
    (lambda M, N, K: M > 64 and K <= 4069 and N <= 4069, (128, 32), (2, 1, 1)),
    (lambda M, N, K: M > 64 and K <= 4069 and N <= 8192, (128, 64), (2, 1, 1)),
    (lambda M, N, K: M > 64 and K >= 8192 and N >= 12288, (256, 128), (2, 1, 1)),
    (lambda M, N, K: M > 64, (128, 128), (2, 1, 1)),
    (lambda M, N, K: M > 32 and K <= 6144 and N <= 6144, (128, 16), (1, 1, 1)),
    (lambda M, N, K: M > 32 and K >= 16384 and N >= 12288, (256, 64), (2, 1, 1)),
    (lambda M, N, K: M > 32, (128, 64), (2, 1, 1)),
    (lambda M, N, K: M > 16 and K <= 12288 and N <= 8192, (128, 32), (2, 1, 1)),
    (lambda M, N, K: M > 16, (256, 32), (2, 1, 1)),
    (lambda M, N, K: N >= 26624, (256, 16), (1, 1, 1)),
    (lambda M, N, K: True, (128, 16), (1, 1, 1)),
)


def machete_schedule(m: int, n: int, k: int) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """(tile MN, cluster MNK) vLLM's Machete heuristic picks for A [M, K] @ B [K, N]."""
    if min(m, n, k) < 1:
        raise ValueError(f"machete_schedule: M, N, K must be >= 1, got {(m, n, k)}")
    for cond, tile, cluster in _HEURISTIC:
        if cond(m, n, k):
            return tile, cluster
    raise AssertionError("unreachable: the last condition always holds")


def schedule_name(tile: tuple[int, int], cluster: tuple[int, int, int]) -> str:
    """`generate_sch_sig` (generate.py:285-306): the name `machete_mm(schedule=...)` takes."""
    return (f"{tile[0]}x{tile[1]}_{cluster[0]}x{cluster[1]}x{cluster[2]}_"
            "KernelTmaWarpSpecializedCooperative_TmaWarpSpecializedCooperative_StreamKScheduler")


def all_schedules() -> tuple[tuple[tuple[int, int], tuple[int, int, int]], ...]:
    """Each schedule the heuristic can pick, once, in table order: the list generate.py's
    get_unique_schedules instantiates (generate.py:543-551)."""
    seen: list[tuple[tuple[int, int], tuple[int, int, int]]] = []
    for _, tile, cluster in _HEURISTIC:
        if (tile, cluster) not in seen:
            seen.append((tile, cluster))
    return tuple(seen)
