"""The GPU a measurement ran on, as it is: its name, SMs, L2, memory and clocks read from the
driver, and the preset it matches (or why none does), with that preset's datasheet limits.

A results file carries this in its provenance, so a file measured on an H100 says H100 and
is never fitted as an H200 (`workbench.perf.calibrate` refuses one part's file for another).
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import asdict, dataclass

__all__ = ["GpuPart", "read_part", "match_preset", "short_name"]


@dataclass(frozen=True)
class GpuPart:
    name: str
    capability: int  # major * 10 + minor
    sms: int
    l2_bytes: int
    memory_gib: float
    max_sm_clock_mhz: int | None  # nvidia-smi's clocks.max.sm, None where it cannot be read
    preset: str | None  # the workbench preset this part is, None where none matches
    why: str  # why it matched that preset, or why none does

    def limits(self) -> dict:
        """The matched preset's datasheet figures (int8 TOP/s, bf16 TFLOP/s, memory GB/s)."""
        from workbench.perf.hardware import hardware_for

        if self.preset is None:
            return {}
        hw = hardware_for(self.preset)
        return {"int8_tops": hw.peaks["int8"], "bf16_tflops": hw.peaks["bf16"], "hbm_gbs": hw.mem_gbs}

    def to_json(self) -> dict:
        return asdict(self)


def short_name(preset: str | None) -> str:
    """A results file's prefix for a preset: "sm90-h100" -> "h100"; "gpu" where none matched."""
    return preset.split("-", 1)[1] if preset and "-" in preset else "gpu"


def match_preset(name: str, capability: int, sms: int, l2_bytes: int, memory_gib: float) -> tuple[str | None, str]:
    """(preset, why): the preset whose alias the device's name carries and whose SM count, L2
    and memory class agree with the part; None, saying what differs, otherwise. A part is
    never matched by its capability alone (an H800 or H20 is not an H100)."""
    from workbench.perf.hardware import hardware_for
    from workbench.platforms import ALIASES, PRESETS

    low = name.lower()
    named = [(a, k) for a, k in ALIASES.items()
             if re.search(rf"\b{re.escape(a)}\b", low) and PRESETS[k].device == "cuda"]
    if not named:
        return None, f"no preset's name is in the device's name {name!r}"
    alias, key = max(named, key=lambda ak: len(ak[0]))
    hw = hardware_for(key)
    if PRESETS[key].capability != capability:
        return None, f"{name!r} reads as {key} but has capability {capability}, not {PRESETS[key].capability}"
    if hw.units != sms:
        return None, f"{name!r} reads as {key} but has {sms} SMs, not {hw.units}"
    l2_mb = l2_bytes / 1e6
    if abs(l2_mb - hw.llc_mb) > 0.15 * hw.llc_mb:
        return None, f"{name!r} reads as {key} but has an L2 of {l2_mb:.0f} MB, not {hw.llc_mb:.0f}"
    return key, f"name {alias!r}, sm{capability}, {sms} SMs, L2 {l2_mb:.0f} MB, {memory_gib:.0f} GiB"


def _max_sm_clock() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout.split()
        return int(out[0]) if out else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def read_part(device: int = 0) -> GpuPart:
    """This machine's GPU `device` as the driver reports it, matched to a preset."""
    import torch

    p = torch.cuda.get_device_properties(device)
    cap = p.major * 10 + p.minor
    mem = p.total_memory / 2 ** 30
    preset, why = match_preset(p.name, cap, p.multi_processor_count, p.L2_cache_size, mem)
    return GpuPart(p.name, cap, p.multi_processor_count, int(p.L2_cache_size), round(mem, 1),
                   _max_sm_clock(), preset, why)
