"""Record what a vLLM release decides for a compressed-tensors MoE layer, from its own code.

The layer is built as a model builds it: `FusedMoEFactory` (fused_moe/layer.py) under a
`VllmConfig` whose `KernelConfig` holds the case's `moe_backend`, with the checkpoint's
`CompressedTensorsConfig`; that runs `CompressedTensorsMoEMethod.get_moe_method`, the method's
constructor (its MoE kernel oracle) and `create_weights`, unchanged. The platform is simulated
as for the linear levels (the pinned rule set's recorder, `Vllm.on`); what is recorded
beside the outcome is read from vLLM's calls as they return (a profile hook, no code changed):
every experts class's `is_supported_config` answer and every WNA16
`_backend_incompatibility_reason`, in order.

Input: {"scheme": {"format", "weights", "input_activations"}, "num_experts", "top_k",
"hidden_size", "intermediate_size", "activation", "params_dtype", "layer_name"}; env:
{"moe_backend": one of vLLM's `MoEBackend` values}. Expected: {"method": the MoE method class
or None, "backend": the oracle's backend value or None, "experts": the experts class or None,
"probes": [[experts class, supported, reason]], "backend_reasons": [[backend, reason]],
"error", "error_type"}.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from workbench.recorder.sdist import sdist_version

FACTORY = "vllm.model_executor.layers.fused_moe.layer"
CT = "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors"
WNA16_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.int_wna16"
W4AFP8 = "vllm.model_executor.layers.quantization.w4afp8"
# the oracles' entry points: what they return is the selection, even when create_weights
# refuses the layer afterwards
SELECTORS = ("select_w4a8_int8_moe_backend", "select_wna16_moe_backend",
             "select_w4a8_moe_backend")


# What this recorder stands in for beyond the linear recorder's stubs (the provenance says so).
STAND_INS = ["vllm.triton_utils.HAS_TRITON = True: a vLLM install has Triton on every simulated "
             "platform (triton-cpu on x86, the later release's platforms/cpu.py refuses x86 without it); "
             "here no Triton driver is active, so vLLM's import-time probe would say False",
             "torch.ops._C.cutlass_group_gemm_supported: SM 9.x-11.x, as "
             "csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu:179-198 answers for a CUDA 12.8 "
             "build with every SM compiled in"]


def _linear_recorder():
    """The pinned rule set's recorder module: its `Vllm`, error handling and C queries."""
    from workbench.dispatch.versions import pinned
    return pinned().module("recorder")


def _has_w4afp8(version: str) -> bool:
    from workbench.dispatch.moe import moe_rules
    return moe_rules(version).has_w4afp8


def open_vllm(src: str | Path) -> Any:
    """vLLM imported from an unpacked sdist (a release with MoE rules), with the pinned linear
    recorder's simulated platforms: the MoE path imports nothing that recorder does not stub."""
    Vllm = _linear_recorder().Vllm

    class MoeVllm(Vllm):
        def _init_parallel(self) -> None:
            self.mod("vllm.triton_utils").HAS_TRITON = True
            super()._init_parallel()

    v = MoeVllm(Path(src), (), expected=sdist_version(Path(src)))
    # imported once, under the CPU platform Vllm starts on: the later release's attention package (which
    # compressed_tensors imports) binds flash-attn when first imported on a CUDA platform
    for name in (CT, FACTORY, WNA16_ORACLE):
        v.mod(name)
    return v


class _Probes:
    """Every outermost `is_supported_config` and `_backend_incompatibility_reason` call, as it
    returns: an experts class's own check calls the base class's, which is the same answer."""

    def __init__(self) -> None:
        self.probes: list[list] = []
        self.backend_reasons: list[list] = []
        self.methods: list[str] = []  # MoE method classes constructed, outermost first
        self.selected: tuple | None = None  # what the oracle's select function returned
        self._depth = 0

    def _profile(self, frame, event, arg):
        name = frame.f_code.co_name
        if name == "__init__" and event == "call":
            cls = type(frame.f_locals.get("self"))
            if cls.__name__.endswith("MoEMethod") and cls.__name__ not in self.methods:
                self.methods.append(cls.__name__)
        elif name == "is_supported_config":
            if event == "call":
                self._depth += 1
            elif event == "return":
                self._depth -= 1
                if self._depth == 0 and isinstance(arg, tuple):
                    cls = frame.f_locals.get("cls")
                    self.probes.append([getattr(cls, "__name__", str(cls)), bool(arg[0]), arg[1]])
        elif name in SELECTORS and event == "return" and isinstance(arg, tuple):
            self.selected = (getattr(arg[0], "value", arg[0]), getattr(arg[1], "__name__", None))
        elif name == "_backend_incompatibility_reason" and event == "return":
            backend = frame.f_locals.get("backend")
            self.backend_reasons.append([getattr(backend, "value", str(backend)), arg])

    @contextmanager
    def watching(self) -> Iterator["_Probes"]:
        previous = sys.getprofile()
        sys.setprofile(self._profile)
        try:
            yield self
        finally:
            sys.setprofile(previous)


def ct_config(scheme: dict) -> dict:
    """The checkpoint's `quantization_config`: one group targeting Linear, as llm-compressor
    writes an MoE checkpoint (the experts' projections are Linear layers)."""
    group = {"targets": ["Linear"], "weights": scheme["weights"]}
    if scheme.get("input_activations") is not None:
        group["input_activations"] = scheme["input_activations"]
    return {"quant_method": "compressed-tensors", "format": scheme["format"],
            "config_groups": {"group_0": group}, "ignore": ["lm_head"]}


@contextmanager
def _moe_config(v: Any, moe_backend: str, dtype: str) -> Iterator[None]:
    """The VllmConfig a model load runs under, with the user's `--moe-backend`."""
    import types
    config = v.mod("vllm.config")
    vc = config.VllmConfig(kernel_config=config.KernelConfig(moe_backend=moe_backend))
    object.__setattr__(vc, "model_config",
                       types.SimpleNamespace(dtype=v.dtype(dtype), quantization_config=None))
    with config.set_current_vllm_config(vc):
        yield


def record_moe(v: Any, case: dict) -> dict:
    """Build the case's MoE layer with vLLM's factory; what vLLM chose or raised."""
    error_fields = _linear_recorder().error_fields
    i = case["input"]
    out: dict[str, Any] = {"method": None, "backend": None, "experts": None, "probes": [],
                           "backend_reasons": [], "error": None, "error_type": None}
    probes = _Probes()
    try:
        with v.on(case["platform"], {}, i["params_dtype"]), \
                _moe_config(v, case["env"].get("moe_backend", "auto"), i["params_dtype"]):
            if i.get("quantization") == "w4afp8":  # the later release's method: its own config
                qc = v.mod(W4AFP8).W4AFP8Config.from_config({"group_size": i["group_size"]})
            else:
                qc = v.mod(CT).CompressedTensorsConfig.from_config(ct_config(i["scheme"]))
            with probes.watching():
                try:
                    runner = v.mod(FACTORY).FusedMoEFactory(
                        num_experts=i["num_experts"], top_k=i["top_k"],
                        hidden_size=i["hidden_size"], intermediate_size=i["intermediate_size"],
                        params_dtype=v.dtype(i["params_dtype"]), quant_config=qc,
                        prefix=i["layer_name"], activation=i["activation"])
                finally:
                    out["probes"] = probes.probes
                    out["backend_reasons"] = probes.backend_reasons
            out["method"] = type(_quant_method(runner)).__name__
    except Exception as exc:  # vLLM's own refusal, recorded as it is
        if isinstance(exc, ImportError):  # this tree or Python, never an answer of vLLM's
            raise
        out.update(error_fields(exc))
        out["method"] = probes.methods[0] if probes.methods else None
    if probes.selected is not None:
        out["backend"], out["experts"] = probes.selected
    return out


def _quant_method(runner: Any) -> Any:
    for name in ("routed_experts", "experts"):
        layer = getattr(runner, name, None)
        if layer is not None and hasattr(layer, "quant_method"):
            return layer.quant_method
    return runner.quant_method


# -- the cases -----------------------------------------------------------------------------
# A fixed grid, the same for every version: the W4A8 and W4A16 MoE schemes people ship, on the
# presets where their answers differ, with the inputs each oracle's gates read varied one at a
# time from a base layer (activation, dtype, sizes a group must divide, the user's backend).

def _w(group: int | None, symmetric: bool = True, bits: int = 4) -> dict:
    return {"num_bits": bits, "type": "int", "symmetric": symmetric, "dynamic": False,
            "strategy": "channel" if group is None else "group", "group_size": group}


_TOKEN_INT8 = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
               "dynamic": True}
_TOKEN_FP8 = {**_TOKEN_INT8, "type": "float"}

SCHEMES = {
    "w4a8-int8-g128": {"weights": _w(128), "input_activations": _TOKEN_INT8},
    "w4a8-int8-g32": {"weights": _w(32), "input_activations": _TOKEN_INT8},
    "w4a8-int8-channel": {"weights": _w(None), "input_activations": _TOKEN_INT8},
    "w4a8-int8-g128-asym": {"weights": _w(128, False), "input_activations": _TOKEN_INT8},
    "w4a16-g128": {"weights": _w(128)},
    "w4a16-g32": {"weights": _w(32)},
    "w4a16-channel": {"weights": _w(None)},
    "w4a16-g128-asym": {"weights": _w(128, False)},
    "w8a16-g128": {"weights": _w(128, bits=8)},
    "w4a8-fp8-g128": {"weights": _w(128), "input_activations": _TOKEN_FP8},
    "w4a8-fp8-g64": {"weights": _w(64), "input_activations": _TOKEN_FP8},
}
PLATFORMS = ("arm-kleidiai", "arm-no-dyn-quant", "x86-avx512", "x86-spr-amx", "zen4-zentorch",
             "sm80-a100", "sm90-h200", "sm100-b200", "xpu", "rocm-mi300x")
BASE = {"num_experts": 8, "top_k": 2, "hidden_size": 1024, "intermediate_size": 512,
        "activation": "silu", "params_dtype": "bfloat16",
        "layer_name": "model.layers.0.mlp.experts"}
VARIANTS = {
    "base": ({}, {}),
    "gelu_tanh": ({"activation": "gelu_tanh"}, {}),
    "gelu": ({"activation": "gelu"}, {}),
    "swigluoai": ({"activation": "swigluoai"}, {}),
    "odd-sizes": ({"hidden_size": 1000, "intermediate_size": 480}, {}),
    "fp16": ({"params_dtype": "float16"}, {}),
    "fp32": ({"params_dtype": "float32"}, {}),
    "backend-triton": ({}, {"moe_backend": "triton"}),
    "backend-marlin": ({}, {"moe_backend": "marlin"}),
    "backend-humming": ({}, {"moe_backend": "humming"}),
    "backend-cutlass": ({}, {"moe_backend": "cutlass"}),
}


# Targeted cases beyond the grid: (id, scheme, platform, input changes, env). Each reaches a
# gate the grid does not: a W4A8 group size outside CPUExpertsInt4's keys, the AMX experts'
# activations, WNA16's emulation / FlashInfer / RDNA3 backends, Triton's expert-count limit,
# the W4A8-FP8 CUTLASS reorder's intermediate-size assert.
EXTRA = (
    ("w4a8-int8-g48", {"weights": _w(48), "input_activations": _TOKEN_INT8}, "arm-kleidiai",
     {"hidden_size": 1536, "intermediate_size": 768}, {}),
    ("w4a8-int8-g64", {"weights": _w(64), "input_activations": _TOKEN_INT8}, "arm-kleidiai", {}, {}),
    ("w4a8-int8-g256", {"weights": _w(256), "input_activations": _TOKEN_INT8}, "arm-kleidiai", {},
     {}),
    ("w4a8-int8-top1", {"weights": _w(128), "input_activations": _TOKEN_INT8}, "arm-kleidiai",
     {"top_k": 1, "num_experts": 2}, {}),
    ("w4a16-g128-gelu_tanh", {"weights": _w(128)}, "x86-spr-amx", {"activation": "gelu_tanh"}, {}),
    ("w4a16-g128-swigluoai", {"weights": _w(128)}, "x86-spr-amx", {"activation": "swigluoai"}, {}),
    ("w4a16-g32-amx", {"weights": _w(32)}, "x86-spr-amx", {}, {}),
    ("w4a16-g128-emulation-h200", {"weights": _w(128)}, "sm90-h200", {},
     {"moe_backend": "emulation"}),
    ("w4a16-g128-emulation-mi300x", {"weights": _w(128)}, "rocm-mi300x", {},
     {"moe_backend": "emulation"}),
    ("w4a16-g32-trtllm-b200", {"weights": _w(32)}, "sm100-b200", {},
     {"moe_backend": "flashinfer_trtllm"}),
    ("w4a16-g128-asym-trtllm-b200", {"weights": _w(128, False)}, "sm100-b200", {},
     {"moe_backend": "flashinfer_trtllm"}),
    ("w4a16-g128-rdna3", {"weights": _w(128)}, "rocm-rdna3", {}, {}),
    ("w4a16-channel-rdna3", {"weights": _w(None)}, "rocm-rdna3", {}, {"moe_backend": "rdna3"}),
    ("w4a16-g128-1024-experts-mi300x", {"weights": _w(128)}, "rocm-mi300x",
     {"num_experts": 1024, "hidden_size": 256, "intermediate_size": 128}, {}),
    ("w4a16-channel-mi300x-odd", {"weights": _w(None)}, "rocm-mi300x",
     {"hidden_size": 1000, "intermediate_size": 480}, {}),
    ("w4a16-channel-a100-odd", {"weights": _w(None)}, "sm80-a100",
     {"hidden_size": 1000, "intermediate_size": 480}, {}),
    ("w8a16-channel-xpu", {"weights": _w(None, bits=8)}, "xpu", {}, {}),
    ("w4a8-fp8-g128-i384", {"weights": _w(128), "input_activations": _TOKEN_FP8}, "sm90-h200",
     {"intermediate_size": 384}, {}),
    ("w4-tensor-no-input", {"weights": {**_w(None), "strategy": "tensor"}}, "arm-kleidiai", {},
     {}),
    ("w4a16-int-quantized", {"weights": _w(128), "format": "int-quantized"}, "sm80-a100", {}, {}),
    ("w4a8-int8-int-quantized", {"weights": _w(128), "input_activations": _TOKEN_INT8,
                                 "format": "int-quantized"}, "arm-kleidiai", {}, {}),
    ("w4a8-fp8-g128-top1-h100", {"weights": _w(128), "input_activations": _TOKEN_FP8},
     "sm90-h100", {"top_k": 1}, {"moe_backend": "humming"}),
)


# `--quantization w4afp8` layers (the releases whose MoE rules have it): (id, group size, platform, input changes, env)
W4AFP8_CASES = (
    ("g128-h200", 128, "sm90-h200", {}, {}), ("g128-a100", 128, "sm80-a100", {}, {}),
    ("g128-b200", 128, "sm100-b200", {}, {}), ("g128-arm", 128, "arm-kleidiai", {}, {}),
    ("g64-h200", 64, "sm90-h200", {}, {}), ("g128-h200-fp16", 128, "sm90-h200",
                                            {"params_dtype": "float16"}, {}),
    ("g128-h200-humming", 128, "sm90-h200", {}, {"moe_backend": "humming"}),
    ("g128-h200-i384", 128, "sm90-h200", {"intermediate_size": 384}, {}),
)


def draw(version: str | None = None) -> list[dict]:
    """Every (scheme, platform, variant) of the grid, then the targeted cases, as cases with
    an empty `expected`; for a release with w4afp8, its cases too."""
    from workbench.platforms import get_preset
    cases = []
    for sname, scheme in SCHEMES.items():
        for pname in PLATFORMS:
            for vname, (inp, env) in VARIANTS.items():
                cases.append({"id": f"moe-{sname}-{pname}-{vname}", "level": "moe",
                              "input": {**BASE, **inp,
                                        "scheme": {"format": "pack-quantized", **scheme}},
                              "platform": get_preset(pname).to_json(), "env": dict(env),
                              "expected": None})
    for cid, scheme, pname, inp, env in EXTRA:
        cases.append({"id": f"moe-extra-{cid}", "level": "moe",
                      "input": {**BASE, **inp, "scheme": {"format": "pack-quantized", **scheme}},
                      "platform": get_preset(pname).to_json(), "env": dict(env), "expected": None})
    if version is not None and _has_w4afp8(version):
        for cid, g, pname, inp, env in W4AFP8_CASES:
            layer = {k: v for k, v in BASE.items()}
            cases.append({"id": f"moe-w4afp8-{cid}", "level": "moe",
                          "input": {**layer, **inp, "quantization": "w4afp8", "group_size": g},
                          "platform": get_preset(pname).to_json(), "env": dict(env),
                          "expected": None})
    return cases


def draw_random(n: int, seed: int, version: str | None = None) -> list[dict]:
    """`n` seeded random MoE layers over every preset: scheme fields, sizes, activation, dtype
    and backend drawn independently, so combinations the grid never wrote down are recorded
    too (the rules were written from the source, not fitted to these)."""
    import random
    from workbench.platforms import PRESETS
    rng = random.Random(seed)
    inputs = [None, _TOKEN_INT8, _TOKEN_FP8, {**_TOKEN_INT8, "symmetric": False}]
    backends = ["auto"] * 6 + ["triton", "marlin", "humming", "cutlass", "emulation",
                               "flashinfer_trtllm", "rdna3", "deep_gemm"]
    cases = []
    for j in range(n):
        group = rng.choice([32, 64, 128, 128, None, 48, 256])
        w = _w(group, rng.random() < 0.8, rng.choice([4, 4, 4, 8]))
        scheme = {"weights": w}
        inp = rng.choice(inputs)
        if inp is not None:
            scheme["input_activations"] = inp
        layer = {"num_experts": rng.choice([8, 16, 64, 128]), "top_k": rng.choice([1, 2, 8]),
                 "hidden_size": rng.choice([512, 1000, 1024, 1536, 2048]),
                 "intermediate_size": rng.choice([256, 384, 480, 512, 768]),
                 "activation": rng.choice(["silu", "silu", "gelu_tanh", "gelu", "swigluoai",
                                           "swiglustep", "relu2"]),
                 "params_dtype": rng.choice(["bfloat16", "bfloat16", "float16", "float32"]),
                 "layer_name": BASE["layer_name"]}
        layer["top_k"] = min(layer["top_k"], layer["num_experts"])
        env = {} if (b := rng.choice(backends)) == "auto" else {"moe_backend": b}
        pname = rng.choice(list(PRESETS))
        cases.append({"id": f"moe-random-{seed}-{j}", "level": "moe",
                      "input": {**layer, "scheme": {"format": "pack-quantized", **scheme}},
                      "platform": PRESETS[pname].to_json(), "env": env, "expected": None})
    return cases


def _record_group(src: str, cases: list[dict]) -> tuple[list[dict], dict]:
    """In a fresh interpreter: one package set's cases, and what was stubbed."""
    from workbench.recorder import sandbox
    v = open_vllm(src)
    out = []
    for c in cases:
        with _group_gemm_query():
            out.append(record_moe(v, c))
    prov = moe_provenance(v.provenance())
    prov["stub_calls"] = sorted(set(sandbox.Stub.CALLS))
    return out, prov


def moe_provenance(linear: dict) -> dict:
    """The linear recorder's provenance, less what only its levels install (the scheme level's
    kernel-init stubs, Humming's weight-processing stand-ins), plus this recorder's own."""
    keep = ("vllm_version", "vllm_src", "stubbed_compiled", "stubbed_optional_packages",
            "real_optional_packages", "stubbed_hardware_queries")
    prov = {k: linear[k] for k in keep if k in linear}
    prov["stand_ins"] = ["VllmConfig.model_config: only `dtype` (no checkpoint is loaded)",
                         "a one-process gloo tensor-parallel group (TP=1)",
                         "humming.device.current_device: only sm_version"] + STAND_INS
    return prov


@contextmanager
def _group_gemm_query() -> Iterator[None]:
    """`torch.ops._C.cutlass_group_gemm_supported`, answered as its source does for a CUDA
    12.8 build with every SM compiled in (csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu
    :179-198 of both releases): SM 9.x and 10.x-11.x. Set on the `_C` namespace each case's
    platform installs, by wrapping `Vllm.on`'s C queries."""
    rec = _linear_recorder()
    saved = dict(rec.C_QUERIES)
    rec.C_QUERIES["cutlass_group_gemm_supported"] = lambda cc: 90 <= cc < 120
    try:
        yield
    finally:
        rec.C_QUERIES.clear()
        rec.C_QUERIES.update(saved)


def record(src: str | Path, cases: list[dict]) -> dict:
    """Record `expected` into each case, one fresh interpreter per optional-package set (vLLM
    binds what humming provides when a module first imports it); returns the provenance."""
    import concurrent.futures
    import multiprocessing
    import os
    groups: dict[tuple, list[int]] = {}
    for n, c in enumerate(cases):
        groups.setdefault(tuple(sorted(c["platform"].get("packages", []))), []).append(n)
    os.environ["PYTHONHASHSEED"] = "0"
    ctx = multiprocessing.get_context("spawn")
    provenance: dict = {}
    for key, idx in sorted(groups.items()):
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
            expected, prov = pool.submit(_record_group, str(src),
                                         [cases[i] for i in idx]).result()
        for i, e in zip(idx, expected):
            cases[i]["expected"] = e
        calls = set(provenance.get("stub_calls", [])) | set(prov["stub_calls"])
        provenance = {**prov, "vllm_version": sdist_version(Path(src)),
                      "stub_calls": sorted(calls), "python_hash_seed": 0}
    return provenance


def fixture_name(version: str, random_cases: bool = False) -> str:
    kind = "moe_random" if random_cases else "moe"
    return f"vllm_oracle_{kind}_{version.replace('.', '_')}.jsonl"


RANDOM_CASES, RANDOM_SEED = 300, 0


PROVENANCE_FILE = "vllm_oracle_moe_provenance.json"


def regenerate(src: str | Path, out: str | Path) -> int:
    """Draw the grid, record it from `src`, write its fixture file and provenance entry."""
    import json
    from workbench.recorder import write_cases
    out = Path(out)
    version = sdist_version(Path(src))
    cases = draw(version)
    drawn = draw_random(RANDOM_CASES, RANDOM_SEED, version)
    prov = record(src, cases + drawn)
    write_cases(out / fixture_name(version), cases)
    write_cases(out / fixture_name(version, random_cases=True), drawn)
    path = out / PROVENANCE_FILE
    old = json.loads(path.read_text()) if path.is_file() else {}
    old[version] = {**prov, "file": fixture_name(version), "cases": len(cases),
                    "random_file": fixture_name(version, random_cases=True),
                    "random_cases": len(drawn), "random_seed": RANDOM_SEED}
    path.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
    return len(cases)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(prog="python -m workbench.recorder.moe",
                                 description="record the MoE fixture of one vLLM sdist")
    ap.add_argument("--vllm-src", required=True)
    ap.add_argument("--out", default="tests/fixtures")
    a = ap.parse_args()
    print(regenerate(a.vllm_src, a.out), "cases")
