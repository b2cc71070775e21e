"""Layers and their quantization args are frozen, typed values: validated when built, handed
from the readers to the dispatch core as they are, and the readers import nothing of it."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from workbench.checkpoints import open_checkpoint
from workbench.checkpoints.reader_rules import ReaderRules, pinned
from workbench.errors import InvalidInputError
from workbench.layer import CheckpointFormat, LayerSpec
from workbench.quant_args import QuantArgs, QuantArgsError

DOWN = "model.layers.0.mlp.down_proj"


def test_a_layer_spec_and_its_args_cannot_be_mutated(tools):
    spec = open_checkpoint(tools.samples / "ct-w4a8-int-g128").spec(DOWN)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.in_features = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.weight_args.group_size = 64
    with pytest.raises(TypeError, match="read-only"):
        spec.quant_config["config_group"] = "other"
    with pytest.raises(TypeError, match="read-only"):
        spec.provenance.tensors["weight"] = "elsewhere"
    with pytest.raises(TypeError, match="read-only"):
        spec.weight_args.observer_kwargs["k"] = 1
    gptq = open_checkpoint(tools.samples / "gptq-w4a16-g128").spec(DOWN)
    with pytest.raises(TypeError, match="read-only"):
        gptq.quant_config["bits"] = 8
    # a change is a new value, validated again
    other = dataclasses.replace(spec.weight_args, group_size=64)
    assert other.group_size == 64 and spec.weight_args.group_size == 128


@pytest.mark.parametrize("kwargs, match", [
    ({"num_bits": "four"}, r"QuantizationArgs\.num_bits: expected an integer, got 'four'"),
    ({"type": "INT"}, r"QuantizationArgs\.type: 'INT' is not a quantization type"),
    ({"num_bits": 4, "strategy": "group"}, r"strategy group requires group_size"),
    ({"num_bits": 4, "strategy": "token"}, r"Cannot perform static token quantization"),
    ({"num_bits": 4, "group_size": 64, "strategy": "channel"}, r"group_size requires strategy"),
    ({"num_bits": 4, "group_size": -7}, r"Invalid group size -7"),
    ({"num_bits": 4, "dynamic": "global"}, r"dynamic: 'global'; accepted: true, false or 'local'"),
    ({"num_bits": 4, "actorder": "sideways"}, r"actorder: 'sideways'; accepted:"),
    ({"num_bits": 4, "block_structure": [1, 2, 3], "strategy": "block"}, r"Invalid block_structure"),
])
def test_bad_quant_args_raise_the_named_error_at_construction(kwargs, match):
    with pytest.raises(QuantArgsError, match=match):
        QuantArgs(**kwargs)
    # the JSON face names where the args came from
    with pytest.raises(QuantArgsError, match=r"^scheme\.weights"):
        QuantArgs.from_json(kwargs if kwargs.get("type") != "INT" else {"type": "intx"},
                            "scheme.weights")


def test_construction_fills_what_the_library_fills():
    a = QuantArgs(num_bits=4, group_size=128)
    assert (a.strategy, a.observer, a.zp_dtype, a.strategy_inferred) == (
        "group", "memoryless_minmax", "int8", True)
    assert "strategy=<QuantizationStrategy.GROUP: 'group'>" in repr(a)
    assert QuantArgs.from_json(a.to_json(), "w") == dataclasses.replace(a, strategy_inferred=False)


def test_a_layer_spec_refuses_untyped_args():
    with pytest.raises(InvalidInputError, match="weight_args is dict; accepted: QuantArgs"):
        LayerSpec(name="x", in_features=128, out_features=128, num_bits=4, group_size=-1,
                  symmetric=True, format=CheckpointFormat.SYNTHETIC, weight_args={"num_bits": 4})


def test_the_dispatch_core_gets_the_readers_args_as_they_are(tools):
    from workbench.dispatch.versions import rules

    spec = open_checkpoint(tools.samples / "ct-w4a8-int-g128").spec(DOWN)
    stored = rules().SchemeInput.of(spec.scheme_input(tp_size=2))
    # the same objects: nothing was dumped to JSON and parsed back on the way in
    assert stored.weights is spec.weight_args and stored.input_activations is spec.input_args
    # down_proj is row-parallel: TP 2 halves K
    assert (stored.input_size_per_partition, stored.output_size_per_partition) == \
        (spec.in_features // 2, spec.out_features)


def test_the_readers_import_nothing_of_the_dispatch_core():
    code = ("import sys\n"
            "import workbench.checkpoints, workbench.checkpoints.compressed_tensors\n"
            "import workbench.checkpoints.gptq, workbench.checkpoints.checkpoint, workbench.layer\n"
            "bad = sorted(m for m in sys.modules if m.startswith('workbench.dispatch'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_readers_check_against_the_rules_they_are_given(tools, tmp_path):
    other = dataclasses.replace(pinned(), vllm_version="9.9.9",
                                inc_backends=("auto", "gptq", "marlin"))
    path = tools.copy_sample("autoround-w4a16-g128", tmp_path)
    tools.edit_config(path, lambda c: c["quantization_config"].update(backend="awq:marlin"))
    assert any("backend 'awq:marlin': vLLM 9.9.9 raises ValueError" in n
               for n in open_checkpoint(path, rules=other).notes)
    assert not any("awq:marlin" in n for n in open_checkpoint(path).notes)
    assert isinstance(pinned(), ReaderRules)
