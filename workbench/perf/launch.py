"""Launch geometry of this project's Triton GEMMs: the config they pick, programs, K steps.

The configs and the split-K rule are the kernels' own (`kernels/w4a8_kernels/triton_w4a8.py` w4a8_config,
`kernels/w4a8_kernels/triton_w4a16.py` w4a16_config, `kernels/w4a8_kernels/triton_runtime.py` resolve_split_k): a
re-tuned table changes the prediction without an edit here. The weight is described by a
`HalfSplitInt4` on the meta device (its shape, no data), so the config functions run as they
do at a real launch.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Launch", "triton_config", "triton_launch", "cublas_launch"]


@dataclass(frozen=True)
class Launch:
    """What a GEMM launch is, as the cost model needs it."""

    config: dict  # TileConfig fields (or the tile assumed for a library kernel)
    tiles: int  # output tiles (ceil(M / block_m) * ceil(N / block_n))
    split: int  # split-K factor
    k_steps: int  # K steps of one program (one step covers 2 * block_k values of K)
    programs_per_sm: int  # programs that run on one multiprocessor at once

    @property
    def programs(self) -> int:
        return self.tiles * self.split

    def waves(self, sms: int) -> int:
        return -(-self.programs // (sms * self.programs_per_sm))


@lru_cache(maxsize=4096)
def _packed(n: int, k: int, g: int):
    import torch

    from w4a8_kernels.triton_pack import HalfSplitInt4, padded_k

    per_channel = g in (-1, k)
    kp = padded_k(k, 128 if per_channel else g)
    rows = 1 if per_channel else kp // g
    return HalfSplitInt4(packed=torch.empty((n, kp // 2), dtype=torch.int8, device="meta"),
                         scales=torch.empty((rows, n), dtype=torch.float32, device="meta"),
                         group_size=-1 if per_channel else g, n=n, k=k, k_padded=kp)


def _split(cfg, m: int, n: int, k_steps: int, sms: int) -> int:
    # kernels/w4a8_kernels/triton_runtime.py resolve_split_k, with the multiprocessor count as a value
    # (the kernel reads it from the device); tests/perf check the two agree.
    if cfg.split_k:
        return max(1, min(cfg.split_k, k_steps))
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    split = 1
    while (split < 32 and tiles * split * 2 <= cfg.programs_per_sm * sms
           and k_steps // (split * 2) >= 2):
        split *= 2
    return split


def triton_config(kernel: str, m: int, n: int, k: int, g: int):
    """The TileConfig the kernel picks for this call (kernel: "w4a8" or "w4a16")."""
    if kernel == "w4a8":
        from w4a8_kernels.triton_w4a8 import w4a8_config as config_of
    else:
        from w4a8_kernels.triton_w4a16 import w4a16_config as config_of
    return config_of(m, _packed(n, k, g))


@lru_cache(maxsize=65536)
def triton_launch(kernel: str, m: int, n: int, k: int, g: int, sms: int,
                  config: tuple | None = None) -> Launch:
    """kernel: "w4a8" or "w4a16"; config: the TileConfig that ran, as sorted (field, value)
    pairs (a results record's), or None for the one the kernel picks now."""
    from dataclasses import asdict, fields

    from w4a8_kernels.triton_runtime import TileConfig

    if config is None:
        cfg = triton_config(kernel, m, n, k, g)
    else:
        known = {f.name for f in fields(TileConfig)}
        cfg = TileConfig(**{key: v for key, v in config if key in known})
    packed = _packed(n, k, g)
    steps = packed.half_k // cfg.block_k
    split = _split(cfg, m, n, steps, sms)
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    return Launch(asdict(cfg), tiles, split, -(-steps // split), cfg.programs_per_sm)


def cublas_launch(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int = 64,
                  sms: int | None = None) -> Launch:
    """A library GEMM seen as one tile shape (fitted from the results, see calibrate). With
    fewer tiles than multiprocessors, cuBLAS splits K (split-K / stream-K kernels) so every SM
    streams its share: the split doubles while the tiles still fit on the SMs and each split
    keeps at least 4 K steps (N = 2112, K = 7168, M = 1 on an H100 streams at about 3 TB/s)."""
    tiles = -(-m // block_m) * -(-n // block_n)
    steps = -(-k // block_k)
    split = 1
    while sms and tiles * split * 2 <= sms and steps // (split * 2) >= 4:
        split *= 2
    return Launch({"block_m": block_m, "block_n": block_n, "block_k": block_k}, tiles, split,
                  -(-steps // split), 1)
