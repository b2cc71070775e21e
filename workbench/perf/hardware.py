"""The figures that bound a GEMM, per platform preset, read from `hardware.json`.

Every figure there carries its source (datasheet or whitepaper); this module only reads
them. "This machine" is measured instead (`workbench.perf.cpu`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from workbench.errors import InvalidInputError

__all__ = ["Hardware", "hardware_for", "hardware_table", "HARDWARE_FILE"]

HARDWARE_FILE = Path(__file__).with_name("hardware.json")


@dataclass(frozen=True)
class Hardware:
    preset: str
    part: str
    kind: str  # "gpu" | "cpu"
    peaks: dict  # datatype -> dense TFLOP/s or TOP/s (None: not on this part)
    mem_gbs: float
    llc_mb: float
    units: int  # SMs / CUs / Xe cores / CPU cores
    clock_mhz: float
    source: str
    derived: str = ""
    measured: dict = field(default_factory=dict)  # host calibration figures, if measured
    sustained: dict = field(default_factory=dict)  # datatype -> dense rate reached, where known
    l2_gbs: float | None = None  # what the SMs can read from the L2 (hardware.json says if derived)

    def sustained_rate(self, dtype: str) -> float | None:
        """The dense rate this part is known to reach for a datatype (None: not known)."""
        v = self.sustained.get(dtype)
        return float(v) if isinstance(v, (int, float)) else None

    def sustained_link(self, dtype: str) -> str | None:
        """Where the sustained rate of a datatype was published (None: not known)."""
        return (self.sustained.get("links") or {}).get(dtype)

    def peak(self, dtype: str) -> float | None:
        """Dense peak in TOP/s for a datatype; bf16 falls back to fp16, then fp32."""
        for d in ((dtype, "fp16", "fp32") if dtype == "bf16" else (dtype,)):
            v = self.peaks.get(d)
            if v:
                return float(v)
        return None


@lru_cache(maxsize=1)
def _doc() -> dict:
    return json.loads(HARDWARE_FILE.read_text())


def hardware_for(preset: str) -> Hardware:
    """The data of one preset name (after `workbench.platforms` aliases)."""
    from workbench.platforms import ALIASES

    low = preset.lower() if isinstance(preset, str) else preset
    key = ALIASES.get(low, low)  # the one alias table, platforms', read as data
    parts = _doc()["parts"]
    if key not in parts:
        aliases = ", ".join(f"{a} ({k})" for a, k in ALIASES.items() if k in parts)
        raise InvalidInputError(f"platform {preset!r}: no hardware data; accepted: {', '.join(parts)}; "
                                f"aliases {aliases}; or 'host' (measured here); case-insensitive")
    d = parts[key]
    return Hardware(key, d["part"], d["kind"], dict(d["peaks"]), float(d["mem_gbs"]), float(d["llc_mb"]),
                    int(d["units"]), float(d["clock_mhz"]), d["source"], d.get("derived", ""),
                    sustained=dict(d.get("sustained", {})),
                    l2_gbs=float(d["l2_gbs"]) if d.get("l2_gbs") else None)


def hardware_table() -> list[dict]:
    """One row per preset, for docs and the app."""
    return [{"preset": k, **{f: v for f, v in d.items() if f not in ("peaks", "sustained")},
             **{f"peak_{t}": v for t, v in d["peaks"].items()},
             **{f"sustained_{t}" if t != "source" else "sustained_source": v
                for t, v in d.get("sustained", {}).items() if t != "links"}}
            for k, d in _doc()["parts"].items()]
