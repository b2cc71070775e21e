"""Shared fixtures: seeded random int4 layers in the project's weight convention."""
from __future__ import annotations

import pytest
import torch


def make_layer(n: int, k: int, group_size: int, *, asym: bool = False, seed: int = 0,
               scale_dtype: torch.dtype = torch.float32):
    """Random int4 weight, scales (and zeros when asym) in the project convention."""
    gen = torch.Generator().manual_seed(seed)
    g = k if group_size in (-1, k) else group_size
    if asym:
        w_q = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.int8)
        zeros = torch.randint(0, 16, (n, k // g), generator=gen, dtype=torch.int8)
    else:
        w_q = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
        zeros = None
    scales = (torch.rand(n, k // g, generator=gen) * 0.02 + 0.001).to(scale_dtype)
    return w_q, scales, zeros


def make_x(m: int, k: int, seed: int = 1, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=gen).to(dtype)


@pytest.fixture
def layer_factory():
    return make_layer


@pytest.fixture
def x_factory():
    return make_x
