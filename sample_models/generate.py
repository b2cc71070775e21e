"""Write the bundled sample checkpoints (run from the repository root):

    python sample_models/generate.py [--out sample_models] [--only NAME ...]

Each sample is a one-decoder-layer Llama-shaped model (hidden 256, intermediate 1024,
vocab 256) unless its entry says otherwise. The intended quantized values come first:
seeded float weights (a few outlier input channels, as trained weights have) quantized
round-to-nearest by `workbench.synthetic.quantize_rtn`. Then the tools' own formats:

- compressed-tensors samples go through compressed-tensors 0.17.0 itself
  (`apply_quantization_config`, `ModelCompressor.compress_model`, `update_config`), fed
  the exact dequantized weight so its quantizer reproduces the intended integers; the
  tensors and `quantization_config` are what llm-compressor writes.
- GPTQ / AutoRound samples are packed with `kernels.packing` in the layouts AutoGPTQ and
  AutoRound's `auto_round:auto_gptq` export write (`qzeros` holding zero point - 1, fp16
  scales [K/g, N]); their config fields are the ones those tools serialize.

`intended_layers(name)` recomputes the intended values without writing anything, so a
test can check that reading a sample gives back exactly what was meant.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from w4a8_kernels import packing  # noqa: E402
from workbench.synthetic import SyntheticSpec, quantize_rtn, synthetic_weight  # noqa: E402

HIDDEN, INTERMEDIATE, VOCAB, HEADS, KV_HEADS = 256, 1024, 256, 4, 2
_HEAD_DIM = HIDDEN // HEADS
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def _llama_shapes(hidden: int = HIDDEN, intermediate: int = INTERMEDIATE) -> dict[str, tuple[int, int]]:
    """Linear name -> (N, K) of one Llama decoder layer."""
    kv = KV_HEADS * (hidden // HEADS)
    p = "model.layers.0"
    return {
        f"{p}.self_attn.q_proj": (hidden, hidden), f"{p}.self_attn.k_proj": (kv, hidden),
        f"{p}.self_attn.v_proj": (kv, hidden), f"{p}.self_attn.o_proj": (hidden, hidden),
        f"{p}.mlp.gate_proj": (intermediate, hidden), f"{p}.mlp.up_proj": (intermediate, hidden),
        f"{p}.mlp.down_proj": (hidden, intermediate),
    }


@dataclass(frozen=True)
class Group:
    """One quantization scheme and the layers (name suffixes) it covers."""

    targets: tuple[str, ...]  # compressed-tensors targets, as written to config.json
    suffixes: tuple[str, ...]  # which generated layers it covers
    group_size: int = 128
    symmetric: bool = True
    input: dict | None = None  # compressed-tensors input_activations args


@dataclass(frozen=True)
class Sample:
    name: str
    kind: str  # "compressed-tensors", "gptq", "auto-round"
    readme: str
    groups: tuple[Group, ...]
    shapes: dict[str, tuple[int, int]] = field(default_factory=_llama_shapes)
    format: str | None = None  # force a compressed-tensors format
    dtype: str = "bfloat16"
    scale_dtype: str | None = None  # GPTQ family: stored scale dtype (fp16 as the tools write)
    hidden: int = HIDDEN
    intermediate: int = INTERMEDIATE
    shards: int = 1
    extra_config: dict = field(default_factory=dict)
    model_config: dict = field(default_factory=dict)  # config.json fields over the Llama ones
    ignore: tuple[str, ...] = ("lm_head",)  # compressed-tensors ignore list


_INT8_TOKEN = {"num_bits": 8, "type": "int", "strategy": "token", "symmetric": True, "dynamic": True}
_INT8_TOKEN_ASYM = dict(_INT8_TOKEN, symmetric=False)
_FP8_TOKEN = {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True, "dynamic": True}
_ALL = ("proj",)
MOE_EXPERTS, MOE_INTERMEDIATE = 4, 128


def _moe_shapes(hidden: int = HIDDEN, experts: int = MOE_EXPERTS,
                inter: int = MOE_INTERMEDIATE) -> dict[str, tuple[int, int]]:
    """A Qwen3-MoE decoder layer: attention, the router (`mlp.gate`, left unquantized) and
    per-expert gate / up / down projections."""
    shapes = {k: v for k, v in _llama_shapes(hidden).items() if "self_attn" in k}
    p = "model.layers.0.mlp"
    shapes[f"{p}.gate"] = (experts, hidden)
    for e in range(experts):
        shapes.update({f"{p}.experts.{e}.gate_proj": (inter, hidden),
                       f"{p}.experts.{e}.up_proj": (inter, hidden),
                       f"{p}.experts.{e}.down_proj": (hidden, inter)})
    return shapes

SAMPLES: dict[str, Sample] = {s.name: s for s in (
    Sample("ct-w4a8-int-g128", "compressed-tensors",
           "llm-compressor W4A8 preset (int4 g128 symmetric weights, int8 dynamic per-token input), "
           "`int-quantized`: resolves to CompressedTensorsW4A8Int; x86/Arm CPU Dynamic4bitLinearKernel, "
           "XPU XPUW4A8IntLinearKernel, H200 only Humming (16-bit activations).",
           (Group(("Linear",), _ALL, 128, True, _INT8_TOKEN),)),
    Sample("ct-w4a8-int-channel-asym-input", "compressed-tensors",
           "the vLLM docs' channelwise W4A8 recipe: int4 per-channel weights, asymmetric dynamic "
           "per-token int8 input, `int-quantized`: still CompressedTensorsW4A8Int (input symmetry is "
           "not checked there).",
           (Group(("Linear",), _ALL, -1, True, _INT8_TOKEN_ASYM),)),
    Sample("ct-w4a8-pack-sym-input", "compressed-tensors",
           "W4A8 args forced to `pack-quantized`: resolves to CompressedTensorsWNA8Int, which on "
           "H200 lands on Machete and silently runs W4A16.",
           (Group(("Linear",), _ALL, 128, True, _INT8_TOKEN),), format="pack-quantized"),
    Sample("ct-w4a16-pack", "compressed-tensors",
           "W4A16 `pack-quantized` in two shards with `model.safetensors.index.json`; attention "
           "layers g128 symmetric, MLP layers (a `re:` target) g128 asymmetric with packed zero "
           "points: CompressedTensorsWNA16 (Machete / Marlin / CPUWNA16).",
           (Group(("re:.*self_attn\\..*_proj$",), ("self_attn",), 128, True, None),
            Group(("re:.*mlp\\..*_proj$",), ("mlp",), 128, False, None)), shards=2),
    Sample("ct-w4afp8-pack", "compressed-tensors",
           "W4A8-FP8 (llm-compressor W4AFP8: int4 g128 weights, fp8 dynamic per-token input), "
           "`pack-quantized`: CompressedTensorsW4A8Fp8 on SM90 only (Cutlass W4A8); "
           "NotImplementedError everywhere else.",
           (Group(("Linear",), _ALL, 128, True, _FP8_TOKEN),), format="pack-quantized"),
    Sample("gptq-w4a16-g128", "gptq",
           "AutoGPTQ-style 4-bit g128 symmetric, desc_act false (`qweight`, `qzeros` = 7, fp16 "
           "`scales`, identity `g_idx`), fp16 model: AutoGPTQLinearMethod, Machete on H200, Marlin on A100.",
           (Group((), _ALL, 128, True),), dtype="float16", scale_dtype="float16"),
    Sample("autoround-w4a16-g128", "auto-round",
           "AutoRound `auto_round:auto_gptq` 4-bit g128 symmetric, fp16 scales, bf16 model: vLLM "
           "routes `quant_method: auto-round` to INC (XPU: oneDNN W4A16, or W4A8 with "
           "VLLM_XPU_INC_WNA16_BACKEND=w4a8).",
           (Group((), _ALL, 128, True),), scale_dtype="float16"),
    Sample("inc-w4a16-bf16-scales", "auto-round",
           "INC-style checkpoint whose scales are stored bf16 (bf16 model): the XPU W4A8 trap, "
           "int4_gemm_w4a8 reads scales as fp16, so vLLM keeps a fp16 copy next to the bf16 "
           "scales of the W4A16 fallback.",
           (Group((), _ALL, 128, True),), scale_dtype="bfloat16"),
    Sample("ct-w4a8-int-intermediate-1152", "compressed-tensors",
           "W4A8 `int-quantized` g128 with intermediate size 1152: at TP 2 down_proj's K "
           "partition is 576, which group 128 does not divide (ValueError in "
           "CompressedTensorsW4A8Int at weight creation).",
           (Group(("Linear",), _ALL, 128, True, _INT8_TOKEN),),
           shapes=_llama_shapes(HIDDEN, 1152), intermediate=1152),
    Sample("ct-w4a16-k29568-rows64", "compressed-tensors",
           "one W4A16 `pack-quantized` g128 down_proj [N 64, K 29568] (Qwen2-72B's intermediate "
           "size, 64 output rows to stay small): at TP 2 K = 14784, the llm-compressor #973 "
           "shape (14784 % 128 = 64).",
           (Group(("Linear",), ("down_proj",), 128, True, None),),
           shapes={"model.layers.0.mlp.down_proj": (64, 29568)}, hidden=64, intermediate=29568),
    Sample("ct-w4a8-int-moe", "compressed-tensors",
           "a Qwen3-MoE-shaped layer (4 experts, top-2, hidden 256, expert intermediate 128) with "
           "the W4A8 preset on every projection (int4 g128 symmetric, int8 dynamic per-token "
           "input): its experts resolve to CompressedTensorsW4A8Int8MoEMethod, which loads on "
           "an Arm CPU only (CPUExpertsInt4); x86 and GPUs refuse it.",
           (Group(("Linear",), _ALL, 128, True, _INT8_TOKEN),), shapes=_moe_shapes(),
           intermediate=MOE_INTERMEDIATE, ignore=("lm_head", "re:.*mlp.gate$"),
           model_config={"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                         "num_experts": MOE_EXPERTS, "num_experts_per_tok": 2,
                         "moe_intermediate_size": MOE_INTERMEDIATE, "norm_topk_prob": True,
                         "decoder_sparse_step": 1, "mlp_only_layers": []}),
)}


def _group_of(sample: Sample, layer: str) -> Group | None:
    for g in sample.groups:
        if any(s in layer for s in g.suffixes):
            return g
    return None


def _seed(sample: str, layer: str) -> int:
    return zlib.crc32(f"{sample}/{layer}".encode())


def intended_layers(name: str) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """layer -> (w_q int8 [N, K] project convention, scales [N, G], zeros or None)."""
    sample = SAMPLES[name]
    scale_dtype = _DTYPES[sample.scale_dtype or sample.dtype]
    out = {}
    for layer, (n, k) in sample.shapes.items():
        g = _group_of(sample, layer)
        if g is None:
            continue
        spec = SyntheticSpec(out_features=n, in_features=k, group_size=g.group_size,
                             symmetric=g.symmetric, outlier_channels=max(1, k // 128),
                             params_dtype=sample.dtype, seed=_seed(name, layer))
        out[layer] = quantize_rtn(synthetic_weight(spec), group_size=g.group_size,
                                  symmetric=g.symmetric, scale_dtype=scale_dtype)
    return out


def _float_tensors(sample: Sample) -> dict[str, torch.Tensor]:
    """The unquantized tensors of the skeleton (embeddings, norms, lm_head)."""
    gen = torch.Generator().manual_seed(_seed(sample.name, "dense"))
    dt = _DTYPES[sample.dtype]
    h = sample.hidden
    t = {"model.embed_tokens.weight": torch.randn(VOCAB, h, generator=gen) * 0.02,
         "model.norm.weight": torch.ones(h), "lm_head.weight": torch.randn(VOCAB, h, generator=gen) * 0.02,
         "model.layers.0.input_layernorm.weight": torch.ones(h),
         "model.layers.0.post_attention_layernorm.weight": torch.ones(h)}
    quantized = {layer for layer in sample.shapes if _group_of(sample, layer)}
    for layer, (n, k) in sample.shapes.items():
        if layer not in quantized:
            t[f"{layer}.weight"] = torch.randn(n, k, generator=gen) * 0.02
    return {k: v.to(dt).contiguous() for k, v in t.items()}


def _model_config(sample: Sample) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": sample.hidden, "intermediate_size": sample.intermediate,
        "num_hidden_layers": 1, "num_attention_heads": HEADS if sample.hidden == HIDDEN else 1,
        "num_key_value_heads": KV_HEADS if sample.hidden == HIDDEN else 1,
        "head_dim": _HEAD_DIM, "vocab_size": VOCAB, "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "dtype": sample.dtype, "transformers_version": "5.20.2",
        **sample.model_config,
    }


def _ct_tensors(sample: Sample, intended: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """Compress with compressed-tensors itself; returns (tensors, quantization_config)."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs, QuantizationConfig, QuantizationScheme, apply_quantization_config,
    )

    root = torch.nn.Module()
    for layer, (n, k) in sample.shapes.items():
        parent = root
        parts = layer.split(".")
        for part in parts[:-1]:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        parent.add_module(parts[-1], torch.nn.Linear(k, n, bias=False))
    root.add_module("lm_head", torch.nn.Linear(sample.hidden, VOCAB, bias=False))
    groups = {}
    for i, g in enumerate(sample.groups):
        weights = QuantizationArgs(num_bits=4, type="int", symmetric=g.symmetric,
                                   strategy="channel" if g.group_size == -1 else "group",
                                   group_size=None if g.group_size == -1 else g.group_size)
        groups[f"group_{i}"] = QuantizationScheme(
            targets=list(g.targets), weights=weights,
            input_activations=QuantizationArgs(**g.input) if g.input else None)
    apply_quantization_config(root, QuantizationConfig(config_groups=groups,
                                                       ignore=list(sample.ignore)))
    dt = _DTYPES[sample.dtype]
    for layer, (q, s, z) in intended.items():
        mod = root.get_submodule(layer)
        mod.weight_scale = torch.nn.Parameter(s.clone(), requires_grad=False)
        # compressed-tensors keeps integers signed; the workbench convention is unsigned with zeros.
        if z is not None:
            mod.weight_zero_point.data.copy_((z.to(torch.int16) - 8).to(torch.int8))
        # The exact dequantized weight, so the library's quantizer gives back q.
        idx = torch.arange(q.shape[1]) // (q.shape[1] if s.shape[1] == 1 else q.shape[1] // s.shape[1])
        w = q.to(torch.float32) - (z.to(torch.float32)[:, idx] if z is not None else 0)
        mod.weight.data.copy_(w * s.to(torch.float32)[:, idx])
    compressor = ModelCompressor.from_pretrained_model(root, quantization_format=sample.format)
    compressor.compress_model(root)
    # a layer the config ignores (an MoE router) keeps the skeleton's float tensor
    kept = tuple(f"{layer}." for layer in sample.shapes if layer not in intended)
    tensors = {k: v.detach().contiguous() for k, v in root.state_dict().items()
               if not k.startswith(("lm_head",) + kept)}
    return tensors, compressor


def _gptq_tensors(sample: Sample, intended: dict) -> dict[str, torch.Tensor]:
    out = {}
    for layer, (q, s, z) in intended.items():
        unsigned = packing.signed_to_unsigned(q) if z is None else q
        zeros = torch.full_like(s, 8, dtype=torch.int8) if z is None else z
        out[f"{layer}.qweight"] = packing.pack_int4_gptq(unsigned)
        # AutoGPTQ and AutoRound's auto_gptq export store zero point - 1.
        out[f"{layer}.qzeros"] = packing.pack_int4_gptq_zeros((zeros.to(torch.int16) - 1).to(torch.int8))
        out[f"{layer}.scales"] = s.t().contiguous()
        if sample.kind == "gptq":
            k = q.shape[1]
            out[f"{layer}.g_idx"] = (torch.arange(k, dtype=torch.int32) // (k // s.shape[1]))
    return out


def _gptq_config(sample: Sample) -> dict:
    g = sample.groups[0]
    if sample.kind == "gptq":
        return {"bits": 4, "group_size": g.group_size, "desc_act": False, "sym": g.symmetric,
                "damp_percent": 0.01, "true_sequential": True, "static_groups": False,
                "checkpoint_format": "gptq", "model_name_or_path": None,
                "model_file_base_name": "model", "quant_method": "gptq"}
    return {"bits": 4, "group_size": g.group_size, "sym": g.symmetric, "data_type": "int",
            "act_bits": 16, "iters": 200, "nsamples": 128, "seqlen": 2048,
            "autoround_version": "0.16.1", "block_name_to_quantize": "model.layers",
            "quant_method": "auto-round", "packing_format": "auto_round:auto_gptq",
            **sample.extra_config}


def _save(tensors: dict[str, torch.Tensor], out: Path, shards: int) -> None:
    from safetensors.torch import save_file

    names = sorted(tensors)
    if shards == 1:
        save_file({k: tensors[k] for k in names}, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    # Attention tensors and the embedding in the first shard, the rest in the second.
    first = [k for k in names if "self_attn" in k or "embed" in k]
    parts = [first, [k for k in names if k not in first]]
    weight_map, total = {}, 0
    for i, part in enumerate(parts, 1):
        fname = f"model-{i:05d}-of-{len(parts):05d}.safetensors"
        save_file({k: tensors[k] for k in part}, str(out / fname), metadata={"format": "pt"})
        for k in part:
            weight_map[k] = fname
            total += tensors[k].numel() * tensors[k].element_size()
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def write_sample(name: str, out_root: Path) -> Path:
    sample = SAMPLES[name]
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    intended = intended_layers(name)
    tensors = _float_tensors(sample)
    (out / "config.json").write_text(json.dumps(_model_config(sample), indent=2, sort_keys=True) + "\n")
    if sample.kind == "compressed-tensors":
        quantized, compressor = _ct_tensors(sample, intended)
        tensors.update(quantized)
        _save(tensors, out, sample.shards)
        compressor.update_config(str(out))  # writes quantization_config as llm-compressor does
    else:
        tensors.update(_gptq_tensors(sample, intended))
        _save(tensors, out, sample.shards)
        config = _model_config(sample)
        config["quantization_config"] = _gptq_config(sample)
        (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if sample.kind == "gptq":
            (out / "quantize_config.json").write_text(json.dumps(_gptq_config(sample), indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent))
    parser.add_argument("--only", nargs="*", choices=sorted(SAMPLES))
    args = parser.parse_args(argv)
    for name in args.only or SAMPLES:
        path = write_sample(name, Path(args.out))
        size = sum(f.stat().st_size for f in path.iterdir())
        print(f"{name}: {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
