"""Our QuantizationArgs normalization equals compressed-tensors 0.17.0's, field for field.

The checkpoint reader uses ours so that opening a checkpoint does not import the library
(and transformers behind it); this test imports the library to hold the two equal.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.checkpoints.compressed_tensors import _args
from workbench.checkpoints.errors import InvalidConfigError

ct = pytest.importorskip("compressed_tensors.quantization")

args = st.fixed_dictionaries(
    {},
    optional={
        # pydantic's lax spellings too: the library reads "4", 4.0 and true as ints, "yes" and
        # 0 as booleans, and refuses 4.5, "four" and a dtype torch does not have.
        "num_bits": st.sampled_from([2, 3, 4, 8, 16, 4.0, "4", " 8 ", "4.0", True, 4.5, "four"]),
        "type": st.sampled_from(["int", "float", "INT"]),
        "symmetric": st.sampled_from([True, False, "true", "no", "on", 1, 0, 1.0, None, "maybe"]),
        "group_size": st.sampled_from([None, -1, 16, 32, 128, 128.0, -1.0, True, 64.5]),
        "strategy": st.sampled_from([None, "tensor", "channel", "group", "token", "tensor_group", "block"]),
        "dynamic": st.sampled_from([True, False, "local", 1, 0, 1.0, 2]),
        "actorder": st.sampled_from([None, "static", "weight", "group", "dynamic", True, False]),
        "observer": st.sampled_from([None, "minmax", "mse"]),
        "block_structure": st.sampled_from([None, [128, 128]]),
        "scale_dtype": st.sampled_from([None, "torch.float16", "torch.uint8", "half", "float",
                                        "torch.bfloat16", "nonsense", "Tensor"]),
    })


def test_torch_dtype_names_are_torchs_own():
    import torch

    from workbench.quant_args import TORCH_DTYPES

    names = {n for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}
    assert set(TORCH_DTYPES) == names
    assert all(str(getattr(torch, n)) == f"torch.{c}" for n, c in TORCH_DTYPES.items())


@settings(max_examples=400, deadline=None)
@given(raw=args)
def test_normalization_matches_compressed_tensors(raw):
    try:
        expected = ct.QuantizationArgs.model_validate(raw).model_dump(mode="json")
    except Exception:  # the library refuses it: so must we
        with pytest.raises(InvalidConfigError):
            _args(raw, "weights")
        return
    assert _args(raw, "weights").to_json() == expected
