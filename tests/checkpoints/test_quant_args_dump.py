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
        "num_bits": st.sampled_from([2, 3, 4, 8, 16]),
        "type": st.sampled_from(["int", "float", "INT"]),
        "symmetric": st.booleans(),
        "group_size": st.sampled_from([None, -1, 16, 32, 128]),
        "strategy": st.sampled_from([None, "tensor", "channel", "group", "token", "tensor_group", "block"]),
        "dynamic": st.sampled_from([True, False, "local"]),
        "actorder": st.sampled_from([None, "static", "weight", "group", "dynamic", True, False]),
        "observer": st.sampled_from([None, "minmax", "mse"]),
        "block_structure": st.sampled_from([None, [128, 128]]),
        "scale_dtype": st.sampled_from([None, "torch.float16", "torch.uint8"]),
    })


@settings(max_examples=300, deadline=None)
@given(raw=args)
def test_normalization_matches_compressed_tensors(raw):
    try:
        expected = ct.QuantizationArgs.model_validate(raw).model_dump(mode="json")
    except Exception:  # the library refuses it: so must we
        with pytest.raises(InvalidConfigError):
            _args(raw, "weights")
        return
    assert _args(raw, "weights").to_json() == expected
