from __future__ import annotations

import math

import pytest
import torch

from workbench.errors import InvalidInputError
from workbench.metrics import (
    compare, cosine_similarity, max_abs, per_token_rel_error, rel_frobenius, sqnr_db,
)


def test_hand_computed_values():
    ref = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    out = torch.tensor([[3.0, 4.5], [0.0, 0.0]])
    assert rel_frobenius(out, ref) == pytest.approx(0.5 / 5.0)
    assert max_abs(out, ref) == pytest.approx(0.5)
    assert sqnr_db(out, ref) == pytest.approx(20.0)  # 10 log10(25 / 0.25)
    cos = (3 * 3 + 4 * 4.5) / (5.0 * math.hypot(3, 4.5))
    assert cosine_similarity(out, ref) == pytest.approx(cos)
    tok = per_token_rel_error(out, ref)
    assert tok.tolist() == pytest.approx([0.1, 0.0])


def test_exact_and_degenerate_cases():
    x = torch.randn(3, 4)
    assert rel_frobenius(x, x) == 0.0 and sqnr_db(x, x) == math.inf
    z = torch.zeros(2, 2)
    assert rel_frobenius(z, z) == 0.0 and cosine_similarity(z, z) == 1.0
    assert rel_frobenius(torch.ones(2, 2), z) == math.inf
    assert per_token_rel_error(torch.tensor([[1.0], [0.0]]), torch.zeros(2, 1)).tolist() == [math.inf, 0.0]


def test_compare_report_and_dtype_handling():
    ref = torch.randn(8, 16, dtype=torch.float64)
    out = ref.to(torch.bfloat16)
    r = compare(out, ref)
    assert 1e-4 < r.rel_error < 2.0 ** -8
    assert r.worst_token_rel_error >= r.median_token_rel_error > 0
    assert r.cosine > 0.9999 and 40 < r.sqnr_db < 80
    assert set(r.to_dict()) == {"rel_error", "max_abs_error", "cosine", "sqnr_db",
                                "worst_token_rel_error", "median_token_rel_error"}


def test_shape_mismatch_is_named():
    with pytest.raises(InvalidInputError, match="does not match"):
        rel_frobenius(torch.zeros(2, 3), torch.zeros(3, 2))
