"""What the Triton GPU kernels share: the availability probe, tile configs, M buckets.

Nothing here imports triton at module load: `triton_available()` answers on machines
without triton or without a GPU, so the workbench can say why the GPU kernels are absent.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass, replace

import torch

from w4a8_kernels.errors import KernelInputError, KernelUnavailableError

__all__ = [
    "TileConfig",
    "ConfigTable",
    "table_config",
    "triton_available",
    "require_triton",
    "interpreting",
    "sm_count",
    "resolve_split_k",
    "fit_block_k",
    "split_k_buffers",
    "next_pow2",
]

# int8 and bf16 mma.sync exist from sm80 on; bf16 `tl.dot` needs Ampere or newer.
_MIN_CAPABILITY = (8, 0)

def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_available() -> tuple[bool, str]:
    """(usable, why): the Triton kernels need triton and a CUDA GPU of sm80 or newer.

    Under TRITON_INTERPRET=1 they run on CPU tensors through Triton's interpreter,
    exactly but slowly; that mode is for tests.
    """
    return _probe(interpreting())


@functools.lru_cache(maxsize=2)
def _probe(interp: bool) -> tuple[bool, str]:
    # Cached: every kernel call asks, and reading package metadata costs milliseconds.
    # find_spec, not import: importing triton fixes, for the whole process, whether its
    # @jit builtins are compiled or interpreted, so a probe must not do it early.
    if importlib.util.find_spec("triton") is None:
        return False, "triton not installed (pip install triton)"
    if interp:
        return True, "Triton interpreter (TRITON_INTERPRET=1): CPU tensors, for tests only"
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    cap = torch.cuda.get_device_capability()
    if cap < _MIN_CAPABILITY:
        name = torch.cuda.get_device_name()
        return False, (f"{name} has compute capability {cap[0]}.{cap[1]}; the Triton "
                       f"W4A8/W4A16 kernels need 8.0 or newer")
    return True, f"triton {importlib.metadata.version('triton')} on {torch.cuda.get_device_name()}"


def require_triton() -> None:
    """Raise KernelUnavailableError with the probe's reason when the kernels cannot run."""
    ok, why = triton_available()
    if not ok:
        raise KernelUnavailableError(f"Triton W4A8/W4A16 kernels unavailable: {why}")


@dataclass(frozen=True)
class TileConfig:
    """One launch configuration of the W4A8 / W4A16 GEMMs.

    block_k counts packed bytes per K step: each step covers 2 * block_k values of K
    (block_k from the low half of K and block_k from the high half, see triton_pack).
    split_k = 0 splits K until about programs_per_sm programs run on each multiprocessor
    (decode: more programs keep more weight bytes in flight).
    swap_ab computes (W @ X^T)^T so the unpacked weight is the left operand, which
    Triton can keep in registers, and a small M becomes the narrow side of the dot.
    variant picks a code path inside the kernel: for grouped W4A8 when each group's int32
    dot is scaled into the fp32 accumulator (0 right after its dot, 2 one dot later); for W4A16,
    the flags of `triton_w4a16.W4A16Variant` (SCALE_MUL 1, TWO_ACC 2, INT_DQ 4).
    """

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    swap_ab: bool = False
    variant: int = 0
    programs_per_sm: int = 2

    def __post_init__(self) -> None:
        # A kernel's named flags (triton_w4a16.W4A16Variant) are held as the plain int they
        # are, so configs print and serialize as numbers.
        if isinstance(self.variant, int):
            object.__setattr__(self, "variant", int(self.variant))
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if v < 16 or v & (v - 1):
                raise KernelInputError(f"TileConfig.{name} = {v}; accepted: a power of two >= 16")
        if self.split_k < 0 or self.split_k > 64:
            raise KernelInputError(f"TileConfig.split_k = {self.split_k}; accepted: 0 (auto) to 64")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise KernelInputError(f"TileConfig.num_warps = {self.num_warps}; accepted: 1, 2, 4, 8, 16")


def sm_count(device: torch.device) -> int:
    """Multiprocessors to fill; the interpreter gets a small fixed number."""
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def resolve_split_k(cfg: TileConfig, m: int, n: int, k_steps: int, device: torch.device) -> int:
    """The split-K factor to launch: cfg.split_k, or for 0 enough splits to fill the chip.

    Never more splits than K steps, so every split owns at least one step.
    """
    if cfg.split_k:
        return max(1, min(cfg.split_k, k_steps))
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    sms = sm_count(device)
    split = 1
    # Double up to about programs_per_sm programs per multiprocessor (loads in flight hide
    # HBM latency), keeping >= 2 K steps per split so the pipeline has something to overlap.
    while (split < 32 and tiles * split * 2 <= cfg.programs_per_sm * sms
           and k_steps // (split * 2) >= 2):
        split *= 2
    return split


# A config table: (m_max, config) pairs in ascending m_max; the last has m_max None (any M).
ConfigTable = tuple[tuple["int | None", TileConfig], ...]


def table_config(table: ConfigTable, m: int) -> TileConfig:
    """The config of the first bucket whose m_max holds m."""
    for m_max, cfg in table:
        if m_max is None or m <= m_max:
            return cfg
    raise KernelInputError(f"M = {m}: the config table ends at M = {table[-1][0]}; "
                           "accepted: a table whose last bucket has m_max None")


def fit_block_k(cfg: TileConfig, half_k: int) -> TileConfig:
    """Halve a config's block_k until it divides Kp/2 (128 always does)."""
    bk = cfg.block_k
    while half_k % bk:
        bk //= 2
    return cfg if bk == cfg.block_k else replace(cfg, block_k=bk)


def next_pow2(v: int) -> int:
    return 1 << (max(v, 1) - 1).bit_length()


_LOCKS: dict[torch.device, torch.Tensor] = {}


def split_k_buffers(m: int, n: int, split: int, tiles: int, device: torch.device
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(float32 partials [split, M, N], per-tile counters). Counters start at zero and
    the last split of each tile resets its own, so one zeroed buffer serves every call
    on a device (launches on one stream never overlap)."""
    locks = _LOCKS.get(device)
    if locks is None or locks.numel() < tiles:
        locks = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=device)
        _LOCKS[device] = locks
    if split == 1:
        return locks, locks  # unused by the kernel when SPLIT_K == 1
    return torch.empty((split, m, n), dtype=torch.float32, device=device), locks
