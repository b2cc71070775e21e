"""Where a GEMM's weight streams from: DRAM (a model forward: the layers' weights rotate
through the cache, so every call reads its weight from memory) or the L2 (a micro-benchmark
that times one weight copy over and over, when the weight and the activations fit in the
part's L2: after the first call the stream comes from the cache).

The regime is a condition of the call, never read from a measured time: a prediction takes
DRAM unless told otherwise, and the published-figures check passes each source's own
benchmark condition (`weight_reused` in published.json).
"""
from __future__ import annotations

from workbench.dispatch.types import ValueEnum

__all__ = ["Regime", "regime_for", "stream_gbs"]


class Regime(ValueEnum):
    DRAM = "dram"
    L2 = "l2"

    @property
    def sentence(self) -> str:
        return ("weight streamed from the L2 (one weight copy re-read every call, and it fits)"
                if self is Regime.L2 else "weight streamed from DRAM (a model forward's case)")


def regime_for(hw, weight_reused: bool | None, working_set_bytes: float) -> Regime:
    """L2 when every timed call re-reads the same weight copy and the call's weight,
    activations and output fit in the part's L2 (and the part has an L2 bandwidth figure)."""
    if weight_reused and hw.l2_gbs and working_set_bytes <= hw.llc_mb * 1e6:
        return Regime.L2
    return Regime.DRAM


def stream_gbs(hw, regime: Regime) -> float:
    """The bandwidth a weight stream reads at in this regime, GB/s."""
    return hw.l2_gbs if regime is Regime.L2 and hw.l2_gbs else hw.mem_gbs
