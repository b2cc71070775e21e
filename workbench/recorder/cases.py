"""Seeded random cases for the levels that have no hand-written inputs.

Each case is a checkpoint's quantization config for one linear layer (or, for the config gate,
the model-level config), on a platform drawn from the presets the committed cases use, under
an env drawn from the knobs these routes read. Values are mostly valid, with the invalid ones
vLLM must refuse mixed in (bits 9, group 256, unknown backends, fp32 models).
"""
from __future__ import annotations

import random

def _p(device: str, capability: int | None = None, cpu_arch: str | None = None,
       gfx: str | None = None, zen: bool = False, amx: bool = False) -> dict:
    return {"device": device, "capability": capability, "cpu_arch": cpu_arch, "gfx": gfx,
            "zen": zen, "amx": amx}


PLATFORMS = ([_p("cuda", c) for c in (60, 70, 75, 80, 86, 89, 90, 100, 120)]
             + [_p("rocm", 94, gfx="gfx942"), _p("rocm", 110, gfx="gfx1100"), _p("xpu"),
                _p("cpu", cpu_arch="x86"), _p("cpu", cpu_arch="x86", amx=True),
                _p("cpu", cpu_arch="x86", zen=True), _p("cpu", cpu_arch="arm")])
ZEN_OPS = ["zentorch.zentorch_dynamic_qlinear", "zentorch.zentorch_woq_linear",
           "zentorch.zentorch_woq_repack_weight"]
LAYERS = ["model.layers.0.mlp.down_proj", "model.layers.0.self_attn.q_proj",
          "model.layers.3.mlp.gate_proj", "lm_head"]
SHAPES = [(4096, 4096), (4096, 11008), (11008, 4096), (14336, 4096), (2048, 5632), (1000, 1000),
          (5120, 13824), (3584, 18944)]


def _platform(r: random.Random, level: str) -> dict:
    pool = PLATFORMS + ([p for p in PLATFORMS if p["device"] in ("xpu", "cpu")] * 2
                        if level == "inc" else [])
    if level == "runtime":
        pool = RUNTIME_PLATFORMS
    p = dict(r.choice(pool))
    ops = ["aten._dyn_quant_matmul_4bit"] if r.random() < 0.85 else []
    packages: list[str] = []
    if p["device"] == "cuda":
        packages = [x for x, share in (("humming", 0.6), ("conch", 0.2)) if r.random() < share]
    elif p["device"] == "rocm":
        packages = ["conch"] if r.random() < 0.5 else []
        ops += ["_rocm_C.gptq_gemm_rdna3"] if r.random() < 0.5 else []
    elif p["device"] == "xpu":
        ops += ["_xpu_C.int4_gemm_w4a8", "_xpu_C.int4_gemm_w4a16"] if r.random() < 0.85 else []
        packages = ["auto_round_kernel"] if r.random() < 0.3 else []
    elif p["zen"]:
        packages = ["zentorch"] if r.random() < 0.8 else []
        ops += ZEN_OPS if packages and r.random() < 0.8 else []
    elif p["device"] == "cpu":
        packages = ["auto_round_kernel"] if r.random() < 0.2 else []
    if "auto_round_kernel" in packages and r.random() < 0.3:
        p["ark_backend_lib"] = False  # importable, but its cpu_lib / xpu_lib failed to load
    p["packages"] = sorted(packages)
    p["torch_ops"] = sorted(ops)
    return p


def _layer(r: random.Random, dtypes=("bfloat16", "bfloat16", "float16", "float16",
                                      "float32")) -> dict:
    k, n = r.choice(SHAPES)
    out = {"layer_name": r.choice(LAYERS), "in_features": k, "out_features": n,
           "params_dtype": r.choice(dtypes)}
    tp = r.choice([1, 1, 2, 4, 8])
    if tp > 1 and r.random() < 0.5:
        out["input_size_per_partition"] = k // tp
    elif tp > 1:
        out["output_size_per_partition"] = n // tp
    return out


def _marlin_env(r: random.Random) -> dict:
    env = {}
    if r.random() < 0.3:
        env["VLLM_MARLIN_INPUT_DTYPE"] = r.choice(["int8", "fp8"])
    if r.random() < 0.1:
        env["VLLM_DISABLED_KERNELS"] = r.choice(["MacheteLinearKernel", "HummingLinearKernel",
                                                  "MacheteLinearKernel,HummingLinearKernel"])
    return env


def _gptq(r: random.Random) -> tuple[dict, dict]:
    qc = {"quant_method": "gptq", "bits": r.choice([4, 4, 4, 8, 8, 2, 3]),
          "group_size": r.choice([128, 128, 64, 32, -1, 256]), "desc_act": r.random() < 0.15,
          "sym": r.random() < 0.85}
    if r.random() < 0.2:
        qc["checkpoint_format"] = "gptq_v2" if r.random() < 0.5 else "gptq"
    return {"quantization_config": qc, **_layer(r)}, _marlin_env(r)


def _awq(r: random.Random) -> tuple[dict, dict]:
    qc = {"quant_method": "awq", "bits": r.choice([4, 4, 4, 8]),
          "group_size": r.choice([128, 128, 64, 32, -1, 256]),
          "zero_point": r.random() < 0.85, "version": r.choice(["gemm", "gemm", "gemv"])}
    return {"quantization_config": qc, **_layer(r)}, _marlin_env(r)


def _inc(r: random.Random) -> tuple[dict, dict]:
    qc = {"quant_method": "auto-round" if r.random() < 0.97 else "intel/auto-round",
          "bits": r.choice([4, 4, 4, 4, 4, 2, 3, 8, 5, 6, 7, 9, 16]),
          "group_size": r.choice([128, 128, 128, 64, 32, -1, -1, 48]), "sym": r.random() < 0.8}
    if r.random() < 0.6:
        qc["packing_format"] = r.choice(["auto_round:auto_gptq", "auto_round:auto_gptq",
                                         "auto_round:auto_awq", "auto_round:auto_awq",
                                         "auto_round:gptq", "auto_round:fp8"])
    if r.random() < 0.3:
        qc["backend"] = r.choice(["auto", "gptq", "awq", "gptq:marlin", "awq:marlin", "marlin",
                                  "exllama"])
    if r.random() < 0.1:
        qc["data_type"] = r.choice(["int", "fp", "fp8", "mx_fp"])
    layer = _layer(r)
    if r.random() < 0.1:
        qc["extra_config"] = {layer["layer_name"]: {"bits": r.choice([16, 8, 4])}}
    env = {}
    if r.random() < 0.5:
        env["VLLM_XPU_INC_WNA16_BACKEND"] = r.choice(["auto", "ark", "w4a16", "w4a8", "w4a8",
                                                      "W4A8"])
    if r.random() < 0.2:
        env["VLLM_MARLIN_INPUT_DTYPE"] = r.choice(["int8", "fp8"])
    return {"quantization_config": qc, **layer}, env


_GATE_CONFIGS = {
    "compressed-tensors": {"quant_method": "compressed-tensors", "format": "int-quantized",
                           "config_groups": {}},
    "auto_gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
                  "sym": True, "modules_in_block_to_quantize": ["mlp.down_proj"]},
    "auto_awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                 "version": "gemm", "modules_to_not_convert": []},
    "inc": {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True},
}


def _gate(r: random.Random) -> tuple[dict, dict]:
    q = r.choice(sorted(_GATE_CONFIGS) + ["gptq", "awq", "inc"])
    qc = _GATE_CONFIGS[q] if q in _GATE_CONFIGS else DRAW[q](r)[0]["quantization_config"]
    return {"quantization_config": qc,
            "dtype": r.choice(["bfloat16", "float16", "float32"])}, {}


def _scheme(r: random.Random) -> tuple[dict, dict]:
    """A compressed-tensors layer on an MP scheme: W4A16/W8A16 pack-quantized or W4A8 int."""
    bits, sym = r.choice([4, 4, 8]), r.random() < 0.7
    weights = {"num_bits": bits, "type": "int", "symmetric": sym, "strategy": "group",
               "dynamic": False, "group_size": r.choice([128, 128, 64, 32])}
    if r.random() < 0.2:
        weights.update(strategy="channel", group_size=None)
    inp, fmt = None, "pack-quantized"
    if r.random() < 0.35:
        weights.update(num_bits=4, symmetric=True)
        inp = {"num_bits": 8, "type": "int", "symmetric": r.random() < 0.8, "strategy": "token",
               "dynamic": True}
        fmt = r.choice(["int-quantized", "pack-quantized"])
    layer = _layer(r, ("bfloat16", "bfloat16", "float16"))
    return {"format": fmt, "weights": weights, "input_activations": inp,
            "output_activations": None, **layer}, _marlin_env(r)


def _runtime(r: random.Random) -> tuple[dict, dict]:
    """A layer whose route mostly gets a kernel, so that its weight processing runs."""
    route = r.choice(["scheme", "scheme", "gptq", "gptq", "awq", "inc"])
    layer = _layer(r, ("bfloat16", "bfloat16", "float16"))
    env = {}
    if route == "scheme":
        layer, env = _scheme(r)
    elif route == "gptq":
        layer["quantization_config"] = {"quant_method": "gptq", "bits": r.choice([4, 4, 8]),
                                        "group_size": r.choice([128, 128, 64, 32, -1]),
                                        "desc_act": False, "sym": True}
    elif route == "awq":
        layer["quantization_config"] = {"quant_method": "awq", "bits": 4,
                                        "group_size": r.choice([128, 128, 64, -1]),
                                        "zero_point": r.random() < 0.9, "version": "gemm"}
    else:
        layer["quantization_config"] = {"quant_method": "auto-round", "bits": 4,
                                        "group_size": r.choice([128, 128, 32, -1]),
                                        "sym": r.random() < 0.85,
                                        "packing_format": r.choice(["auto_round:auto_gptq",
                                                                    "auto_round:auto_awq"])}
        if r.random() < 0.5:
            env["VLLM_XPU_INC_WNA16_BACKEND"] = r.choice(["auto", "w4a16", "w4a8", "ark"])
    if r.random() < 0.5:
        env["VLLM_MARLIN_INPUT_DTYPE"] = r.choice(["int8", "fp8"])
    return {"route": route, "layer": layer}, env


RUNTIME_PLATFORMS = [p for p in PLATFORMS if p["device"] != "rocm" and
                     p.get("capability") not in (60, 70)]


DRAW = {"gptq": _gptq, "awq": _awq, "inc": _inc, "config-gate": _gate, "runtime": _runtime}


def _ct_int_input(bits: int, group: int | None = None, w_bits: int = 4, w_group: int | None = 128,
                  w_sym: bool = True, dtype: str = "bfloat16") -> dict:
    """A compressed-tensors pack-quantized layer with an int input (CompressedTensorsWNA8Int /
    WNA4Int): the schemes that hand Humming an input config (compressed_tensors_wNa8.py:168)."""
    w = {"num_bits": w_bits, "type": "int", "symmetric": w_sym, "dynamic": False,
         "strategy": "group" if w_group else "channel", "group_size": w_group}
    i = {"num_bits": bits, "type": "int", "symmetric": True, "dynamic": True,
         "strategy": "group" if group else "token", "group_size": group}
    return {"route": "scheme", "layer": {
        "format": "pack-quantized", "weights": w, "input_activations": i,
        "output_activations": None, "layer_name": "model.layers.0.mlp.down_proj",
        "in_features": 4096, "out_features": 4096, "params_dtype": dtype}}


def _cuda_humming(cap: int) -> dict:
    return {**_p("cuda", cap), "packages": ["humming"], "torch_ops": []}


HUMMING = {"linear_backend": "humming"}
# One case per branch of Humming's input-schema decision (utils/humming/schema.py:261-400),
# appended to the drawn runtime cases: (name, input, capability, env).
HUMMING_RUNTIME_CASES = [
    ("g128-int8-sm90-no-machete", _ct_int_input(8), 90,
     {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"}),                  # :354 groupwise weight
    ("channel-int8-sm90", _ct_int_input(8, w_group=None), 90, HUMMING),  # :359 kept
    ("channel-int8-group128-input-sm90", _ct_int_input(8, 128, w_group=None), 90,
     HUMMING),                                                           # :354 groupwise input
    ("channel-int8-sm100", _ct_int_input(8, w_group=None), 100, HUMMING),  # :333 -> bf16
    ("channel-int8-sm103", _ct_int_input(8, w_group=None), 103, HUMMING),  # :329 -> bf16
    ("channel-int8-sm120", _ct_int_input(8, w_group=None), 120, HUMMING),  # :359 kept
    ("channel-int4-sm89", _ct_int_input(4, w_group=None), 89, HUMMING),    # :359 int4 kept
    ("channel-int4-sm90", _ct_int_input(4, w_group=None), 90, HUMMING),    # :328 -> int8
    ("g128-int4-group128-input-sm89", _ct_int_input(4, 128), 89, HUMMING),  # int4 per group
    ("channel-int8-fp16-sm90", _ct_int_input(8, w_group=None, dtype="float16"), 90, HUMMING),
    ("w8-asym-int8-sm90", _ct_int_input(8, w_bits=8, w_group=None, w_sym=False), 90,
     HUMMING),                                                           # linear.py:108-119
    ("g128-bf16-sm75", _ct_int_input(8), 75, HUMMING),                   # :396 no schema
    ("gptq-int8-act-g128-sm90", {"route": "gptq", "layer": {
        "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128,
                                "desc_act": False, "sym": True},
        "layer_name": "model.layers.0.mlp.down_proj", "in_features": 4096,
        "out_features": 4096, "params_dtype": "bfloat16"}}, 90,
     {**HUMMING, "VLLM_MARLIN_INPUT_DTYPE": "int8"}),                    # humming.py:66 act_type
]
# INC MXFP8 layers (`data_type: mx_fp`, 8 bits, g32): INCMxfp8LinearScheme's K check and the
# MXFP8 kernel loop it runs, on each device, under the backend and disabled-kernel knobs.
MXFP8 = {"quant_method": "auto-round", "bits": 8, "group_size": 32, "sym": True,
         "data_type": "mx_fp", "packing_format": "auto_round:llm_compressor"}
MXFP8_PLATFORMS = {"sm70": _p("cuda", 70), "sm75": _p("cuda", 75), "sm80": _p("cuda", 80),
                   "sm90": _p("cuda", 90), "sm100": _p("cuda", 100), "sm120": _p("cuda", 120),
                   "gfx942": _p("rocm", 94, gfx="gfx942"), "gfx950": _p("rocm", 95, gfx="gfx950"),
                   "xpu": _p("xpu"), "x86": _p("cpu", cpu_arch="x86")}
MXFP8_ENVS = {"auto": {}, "marlin": {"linear_backend": "marlin"},
              "flashinfer": {"linear_backend": "flashinfer_cutlass"},
              "torch-per-quant": {"linear_backend_per_quant": {"mxfp8": "torch"}},
              "no-marlin-emulation": {"VLLM_DISABLED_KERNELS":
                                      "MarlinMxfp8LinearKernel,EmulationMxfp8LinearKernel"}}


def _mxfp8_cases() -> list[dict]:
    out = []
    for pname, platform in MXFP8_PLATFORMS.items():
        for humming in ([False, True] if platform["device"] == "cuda" else [False]):
            for ename, env in MXFP8_ENVS.items():
                if humming and ename not in ("auto", "marlin"):
                    continue
                for k in (4096, 4100):
                    if k == 4100 and ename != "auto":
                        continue
                    out.append({
                        "id": f"inc-mxfp8-{pname}{'-humming' * humming}-{ename}-k{k}",
                        "level": "inc",
                        "input": {"quantization_config": dict(MXFP8),
                                  "layer_name": "model.layers.0.mlp.down_proj", "in_features": k,
                                  "out_features": 4096, "params_dtype": "bfloat16"},
                        "platform": {**platform, "packages": ["humming"] * humming,
                                     "torch_ops": []},
                        "env": env, "expected": None})
    return out


# Inputs where a later release decides otherwise and no drawn case goes: GPTQ in
# batch-invariant mode, and x86 CPUs without Triton (the platform field `triton` false).
UPGRADE_PLATFORMS = {"sm80": _p("cuda", 80), "sm90": _p("cuda", 90),
                     "gfx942": _p("rocm", 94, gfx="gfx942"), "xpu": _p("xpu"),
                     "x86": _p("cpu", cpu_arch="x86"), "x86-amx": _p("cpu", cpu_arch="x86", amx=True),
                     "arm": _p("cpu", cpu_arch="arm")}


def _upgrade_cases() -> list[dict]:
    out = []
    for pname, platform in UPGRADE_PLATFORMS.items():
        packages = {"cuda": ["humming"], "rocm": ["conch"]}.get(platform["device"], [])
        for bits, group, sym in ((4, 128, True), (8, -1, True), (4, 256, True), (4, 128, False)):
            for env, triton in (({"VLLM_BATCH_INVARIANT": "1"}, True), ({}, False)):
                if not triton and platform["device"] != "cpu":
                    continue
                qc = {"quant_method": "gptq", "bits": bits, "group_size": group,
                      "desc_act": False, "sym": sym}
                out.append({
                    "id": (f"gptq-upgrade-{pname}-b{bits}-g{group}-{'sym' if sym else 'asym'}-"
                           + ("batch-invariant" if env else "no-triton")),
                    "level": "gptq",
                    "input": {"quantization_config": qc, "layer_name": "model.layers.0.mlp.down_proj",
                              "in_features": 4096, "out_features": 4096, "params_dtype": "bfloat16"},
                    "platform": {**platform, "packages": packages,
                                 "torch_ops": ["aten._dyn_quant_matmul_4bit"],
                                 **({} if triton else {"triton": False})},
                    "env": env, "expected": None})
    return out


FIXED = {"gptq": _upgrade_cases(), "runtime": [
    {"id": f"runtime-humming-{name}", "level": "runtime", "input": inp,
     "platform": _cuda_humming(cap), "env": env, "expected": None}
    for name, inp, cap, env in HUMMING_RUNTIME_CASES],
    "inc": _mxfp8_cases()}


def draw(level: str, n: int, seed: int) -> list[dict]:
    """`n` cases of `level`, the same for the same seed, then the level's fixed cases."""
    r = random.Random(f"{level}:{seed}")
    out = []
    for i in range(n):
        inp, env = DRAW[level](r)
        out.append({"id": f"{level}-{seed}-{i:04d}", "level": level, "input": inp,
                    "platform": _platform(r, level), "env": env, "expected": None})
    import copy
    return out + copy.deepcopy(FIXED.get(level, []))
