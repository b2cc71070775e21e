"""The one Runtime value: produced for every selected kernel, rendered, carried in the JSON."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from workbench.dispatch import (DEFAULT_VERSION, describe_runtime, trace_inc, trace_mp,
                                trace_scheme)
from workbench.dispatch.types import ACTIVATIONS
from workbench.dispatch.versions import UnknownVersionError, rules
from workbench.platforms import PRESETS

CONFIGS = [{"weight_type": w, "act_type": a, "group_size": g, "zero_points": zp,
            "out_type": "bfloat16" if a == "float8_e4m3fn" else None,
            "full_weight_shape": [4096, 4096], "partition_weight_shape": [4096, 4096]}
           for w, zp in (("int4", False), ("uint4b8", False), ("uint4", True))
           for a in ("bfloat16", "float16", "int8", "float8_e4m3fn") for g in (128, -1)]
SOURCE = re.compile(r"^[\w/]+\.py(:\d+)?$")
SDIST = Path(os.environ.get("WORKBENCH_VLLM_SRC", "/nonexistent")) / "vllm"


def _runtimes():
    for name, p in PRESETS.items():
        for c in CONFIGS:
            t = trace_mp(c, p)
            if t.selected:
                yield name, c, t


def test_every_selection_has_a_runtime_that_renders_and_cites_vllm():
    seen = set()
    for name, c, t in _runtimes():
        rt = t.runtime_detail
        assert rt is not None and rt.method == t.selected, (name, c)
        assert rt.activation in ACTIVATIONS and SOURCE.match(rt.source), rt
        assert (rt.fails_at is None) == (rt.error is None) == (rt.error_type is None)
        assert t.runtime == describe_runtime(rt) and t.runtime
        out = t.to_json()
        assert out["runtime_detail"] == rt.to_json() and out["vllm_version"] == DEFAULT_VERSION
        seen.add(t.selected)
    assert len(seen) >= 8  # Humming, Machete, Marlin, Cutlass, XPU x2, Dynamic4bit, CPUWNA16, ...


@pytest.mark.skipif(not SDIST.is_dir(), reason="WORKBENCH_VLLM_SRC (an unpacked vLLM sdist) is not set")
def test_cited_lines_exist_in_the_sdist():
    for _, _, t in _runtimes():
        path, _, line = t.runtime_detail.source.partition(":")
        lines = (SDIST / path).read_text().splitlines()
        assert not line or int(line) <= len(lines), t.runtime_detail.source


def test_cpuwna16_isa_hint_and_builds_without_the_op():
    c = {**CONFIGS[0], "weight_type": "uint4b8"}
    assert trace_mp(c, "x86-avx512").runtime_detail.isa_hint == "vec"
    assert trace_mp(c, "powerpc").runtime_detail.isa_hint == "vsx"
    assert trace_mp({**c, "act_type": "float16"}, "x86-spr-amx").runtime_detail.isa_hint == "vec"
    arm = trace_mp(c, "arm-no-dyn-quant").runtime_detail
    assert (arm.fails_at, arm.error_type, arm.error) == (
        "forward", "AttributeError", "'_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'")
    assert trace_mp(c, "x86-avx2").runtime_detail.fails_at == "forward"  # the _C_AVX2 build


def test_dynamic4bit_says_which_implementation_runs():
    assert trace_mp(CONFIGS[0], "arm-kleidiai").runtime_detail.impl == "kleidiai"
    assert trace_mp(CONFIGS[0], "x86-avx512").runtime_detail.impl == "reference"


def test_every_level_carries_the_version_and_an_unknown_version_is_named():
    for t in (trace_mp(CONFIGS[0]), trace_inc({"bits": 4, "group_size": 128}),
              trace_scheme({"in_features": 64, "out_features": 64})):
        assert t.to_json()["vllm_version"] == DEFAULT_VERSION
    with pytest.raises(UnknownVersionError, match="no rule set for '0.1.0'; available: "):
        trace_mp(CONFIGS[0], version="0.1.0")
    assert rules(DEFAULT_VERSION).VLLM_VERSION == DEFAULT_VERSION
