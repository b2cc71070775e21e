"""Fuzzing the safetensors header and the config parsers: only the project's named errors escape."""
from __future__ import annotations

import copy
import json
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.checkpoints import open_checkpoint
from workbench.checkpoints.safetensors_file import SAFETENSORS_DTYPES, read_header
from workbench.errors import CheckpointError, WorkbenchError

_SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"
_FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def _read(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "model.safetensors"
        f.write_bytes(blob)
        try:
            tensors, metadata = read_header(f)
        except CheckpointError:
            return  # refused by name: what the header reader owes bad bytes
        # accepted: every tensor's bytes lie inside the file, the metadata is str -> str
        size = f.stat().st_size
        for info in tensors.values():
            assert 0 <= info.begin <= info.end and info.data_start + info.end <= size, info
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())


@_FAST
@given(st.binary(max_size=300))
def test_random_bytes(blob):
    _read(blob)


@st.composite
def headers(draw):
    """Plausible headers: real keys with fuzzed values, a data section of fuzzed length."""
    entries = {}
    for i in range(draw(st.integers(0, 4))):
        entry = {
            "dtype": draw(st.sampled_from(list(SAFETENSORS_DTYPES)) | json_values),
            "shape": draw(st.lists(st.integers(-2, 2**33), max_size=3) | json_values),
            "data_offsets": draw(st.lists(st.integers(-5, 2**40), min_size=0, max_size=3) | json_values),
        }
        if draw(st.booleans()):
            entry.pop(draw(st.sampled_from(sorted(entry))))
        entries[draw(st.text(max_size=8)) + str(i)] = entry
    if draw(st.booleans()):
        entries["__metadata__"] = draw(json_values)
    raw = json.dumps(entries).encode()
    claimed = draw(st.sampled_from([len(raw), len(raw) + 7, max(0, len(raw) - 3), 2**63, 200_000_000]))
    return struct.pack("<Q", claimed) + raw + draw(st.binary(max_size=64))


@_FAST
@given(headers())
def test_fuzzed_headers(blob):
    _read(blob)


def _fuzz_config(sample: str, mutate) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / sample
        shutil.copytree(_SAMPLES / sample, path)
        config = json.loads((path / "config.json").read_text())
        config["quantization_config"] = mutate(config["quantization_config"])
        (path / "config.json").write_text(json.dumps(config))
        try:
            ck = open_checkpoint(path)
            layers = [ck.load_layer(name) for name in ck.layer_names()[:1]]
        except WorkbenchError:
            return  # refused by name
        for layer in layers:  # accepted: the weight vLLM would see has the layer's own shape
            assert tuple(layer.int4_weight().shape) == (layer.out_features, layer.in_features), layer.name


_CT_PATHS = [("config_groups",), ("format",), ("ignore",), ("config_groups", "group_0"),
             ("config_groups", "group_0", "targets"), ("config_groups", "group_0", "format"),
             ("config_groups", "group_0", "weights"), ("config_groups", "group_0", "input_activations"),
             ("config_groups", "group_0", "weights", "group_size"), ("config_groups", "group_0", "weights", "num_bits"),
             ("config_groups", "group_0", "weights", "strategy"), ("config_groups", "group_0", "weights", "symmetric"),
             ("config_groups", "group_0", "weights", "actorder"), ("config_groups", "group_0", "weights", "type"),
             ("quant_method",)]
_GPTQ_KEYS = ["bits", "group_size", "sym", "desc_act", "checkpoint_format", "dynamic", "quant_method",
              "packing_format", "backend", "data_type", "extra_config", "block_name_to_quantize"]


def _set(qc: dict, path: tuple, value) -> dict:
    node = qc
    for key in path[:-1]:
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            return qc
        node = node[key]
    node[path[-1]] = value
    return qc


_interesting = json_values | st.sampled_from(
    [0, -1, 64, 96, 3, 8, 16, "group", "channel", "tensor", "token", "float", "int", "re:(",
     "pack-quantized", "int-quantized", "auto_round:auto_awq", ["Linear"], ["re:.*"], {}, [], "gptq_v2"])


@pytest.mark.parametrize("sample", ["ct-w4a8-int-g128", "ct-w4a16-pack"])
@_FAST
@given(data=st.data())
def test_fuzzed_compressed_tensors_config(sample, data):
    edits = data.draw(st.lists(st.tuples(st.sampled_from(_CT_PATHS), _interesting), min_size=1, max_size=3))

    def mutate(qc):
        for path, value in edits:
            qc = _set(qc, path, copy.deepcopy(value))  # a drawn value may repeat
        return qc

    _fuzz_config(sample, mutate)


@pytest.mark.parametrize("sample", ["gptq-w4a16-g128", "autoround-w4a16-g128"])
@_FAST
@given(data=st.data())
def test_fuzzed_gptq_and_inc_config(sample, data):
    edits = data.draw(st.lists(st.tuples(st.sampled_from(_GPTQ_KEYS), _interesting), min_size=1, max_size=3))

    def mutate(qc):
        for key, value in edits:
            qc[key] = copy.deepcopy(value)
        return qc

    _fuzz_config(sample, mutate)


@_FAST
@given(json_values)
def test_fuzzed_whole_quantization_config(value):
    _fuzz_config("ct-w4a8-int-g128", lambda qc: value)


_LAYER = "model.layers.0.mlp.down_proj"


@pytest.mark.parametrize("sample,key", [("autoround-w4a16-g128", "extra_config"), ("gptq-w4a16-g128", "dynamic")])
@_FAST
@given(override=st.dictionaries(st.sampled_from(["bits", "group_size", "sym", "desc_act"]), _interesting, max_size=3))
def test_fuzzed_per_layer_overrides(sample, key, override):
    pattern = _LAYER if key == "extra_config" else r"+:.*down_proj"
    _fuzz_config(sample, lambda qc: {**qc, key: {pattern: override}})
