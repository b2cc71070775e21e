"""Bad checkpoint files and paths: each row a named error, or the correct result.

Rows build a small checkpoint from a bundled sample in a temporary directory, break one
thing, and open it (listing, every layer loaded, the listing table). Rows that hung before
their fix (a FIFO, a catastrophic regex) run in a child process with a time limit.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from workbench.checkpoints import (
    CorruptFileError, InvalidConfigError, MissingTensorError, MissingWeightsError, NotAFileError,
    OutsideRootsError, PatternRefusedError, TensorMismatchError, UnknownFormatError,
    UnsupportedLayerError, listing_rows, open_checkpoint,
)

SURFACE = "checkpoints"

_REPO = Path(__file__).resolve().parents[2]
_SAMPLES = _REPO / "sample_models"
D = "model.layers.0.mlp.down_proj"
CT, PACK, GPTQ, AR, SHARDED = ("ct-w4a8-int-g128", "ct-w4a8-pack-sym-input", "gptq-w4a16-g128",
                               "autoround-w4a16-g128", "ct-w4a16-pack")
_SHARD1 = "model-00001-of-00002.safetensors"
_INDEX = "model.safetensors.index.json"


# ----------------------------------------------------------------------------- building


def _copy(tmp: Path, sample: str) -> Path:
    return Path(shutil.copytree(_SAMPLES / sample, tmp / "ckpt"))


def _config(path: Path, fn, file: str = "config.json") -> None:
    data = json.loads((path / file).read_text())
    fn(data)
    (path / file).write_text(json.dumps(data))


def _qc(path: Path, **fields) -> None:
    _config(path, lambda c: c["quantization_config"].update(fields))


def _weights(path: Path, **fields) -> None:
    _config(path, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"].update(fields))


def _tensors(path: Path, fn, file: str = "model.safetensors") -> None:
    t = load_file(str(path / file))
    fn(t)
    save_file(t, str(path / file), metadata={"format": "pt"})


def _raw_header(path: Path, header: bytes, data: bytes = b"") -> None:
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + data)


def _open_all(path) -> object:
    ck = open_checkpoint(path)
    for name in ck.layer_names():
        ck.load_layer(name)
    listing_rows(ck.layers)
    return ck


# ----------------------------------------------------------------------------- checking


def _raises(exc: type[Exception], gist: str, build, action=_open_all):
    """Row check: `build(tmp)` returns what to open; opening it raises `exc` matching `gist`."""
    def run():
        with tempfile.TemporaryDirectory() as d:
            target = build(Path(d))
            try:
                action(target)
            except exc as e:
                if not re.search(gist, str(e)):
                    raise AssertionError(f"{exc.__name__} raised, but {str(e)!r} does not match {gist!r}")
                return
            except Exception as e:  # noqa: BLE001 - the wrong exception is the failure reported
                raise AssertionError(f"expected {exc.__name__}, got {type(e).__name__}: {e}") from e
            raise AssertionError(f"expected {exc.__name__} ({gist}), but nothing was raised")
    return run


def _ok(check, build):
    def run():
        with tempfile.TemporaryDirectory() as d:
            check(_open_all(build(Path(d))))
    return run


def _short_message(exc: type[Exception], gist: str, build):
    """`_raises`, and the message stays under 1000 characters."""
    def run():
        with tempfile.TemporaryDirectory() as d:
            try:
                _open_all(build(Path(d)))
            except exc as e:
                assert re.search(re.escape(gist), str(e)) and len(str(e)) < 1000, (len(str(e)), str(e)[-300:])
                return
            raise AssertionError(f"expected {exc.__name__}")
    return run


_CHILD = """
import sys, re
from workbench.checkpoints import open_checkpoint
from workbench.errors import WorkbenchError
try:
    ck = open_checkpoint(sys.argv[1])
    print("ok", len(ck.layers))
except WorkbenchError as e:
    print(type(e).__name__, e)
"""


def _in_child(expected: str, build, limit_s: float = 20.0):
    """Open in a child process: it must answer (start of stdout) within `limit_s`."""
    def run():
        with tempfile.TemporaryDirectory() as d:
            target = build(Path(d))
            try:
                out = subprocess.run([sys.executable, "-c", _CHILD, str(target)], capture_output=True,
                                     text=True, timeout=limit_s, cwd=_REPO)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"opening {target} hung for over {limit_s} s") from None
            assert out.stdout.startswith(expected), (out.stdout, out.stderr[-2000:])
    return run


# ----------------------------------------------------------------------------- builders


def _drop(sample: str, tensor: str, file: str = "model.safetensors"):
    def build(tmp):
        p = _copy(tmp, sample)
        _tensors(p, lambda t: t.pop(f"{D}.{tensor}"), file)
        if (p / _INDEX).exists():
            _config(p, lambda c: c["weight_map"].pop(f"{D}.{tensor}"), _INDEX)
        return p
    return build


def _moe_without_scale(tmp):
    p = _copy(tmp, CT)
    _tensors(p, lambda t: (t.update({f"{D}.weight": t[f"{D}.weight"].reshape(2, 128, 1024)}),
                           t.pop(f"{D}.weight_scale")))
    return p


def _fifo_weights(tmp):
    p = _copy(tmp, CT)
    (p / "model.safetensors").unlink()
    os.mkfifo(p / "model.safetensors")
    return p


def _fifo_config(tmp):
    p = _copy(tmp, CT)
    (p / "config.json").unlink()
    os.mkfifo(p / "config.json")
    return p


def _link_out(name: str, sample: str = CT):
    """`name` inside the checkpoint becomes a symlink to the same file outside it."""
    def build(tmp):
        p = _copy(tmp, sample)
        outside = tmp / "elsewhere"
        outside.mkdir()
        shutil.move(p / name, outside / name)
        os.symlink(outside / name, p / name)
        return p
    return build


def _shard_loop(tmp):
    p = _copy(tmp, SHARDED)
    (p / _SHARD1).unlink()
    os.symlink(p / _SHARD1, p / _SHARD1)
    return p


def _shard_dir(tmp):
    p = _copy(tmp, SHARDED)
    (p / _SHARD1).unlink()
    (p / _SHARD1).mkdir()
    return p


def _ignore_catastrophic(tmp):
    p = _copy(tmp, CT)
    # re needs about 2^28 steps to see that (a|aa)+$ does not match a^40 b; the next
    # pattern ignores the layer, so the listing is the sample's own.
    _qc(p, ignore=["lm_head", "re:(a|aa)+$", "re:a+b$"])
    _tensors(p, lambda t: t.update({"a" * 40 + "b.weight_scale": torch.ones(1, dtype=torch.bfloat16)}))
    return p


def _dynamic_catastrophic(tmp):
    p = _copy(tmp, GPTQ)
    _qc(p, dynamic={"-:(a|aa)+$": {}, "-:a+b$": {}})
    _tensors(p, lambda t: t.update({"a" * 40 + "b.qweight": torch.zeros(1, 8, dtype=torch.int32)}))
    return p


def _lookahead_catastrophic(tmp):
    p = _copy(tmp, CT)
    # Memoized lookahead runs took (name length)^2 x 1900 steps: hours for 989 characters.
    _qc(p, ignore=["lm_head", "re:(?:(?=(?:.?){1900}$).)*x"])
    _tensors(p, lambda t: t.update({"a" * 988 + "x.weight_scale": torch.ones(1, dtype=torch.bfloat16)}))
    return p


def _int4_g128(ck):
    spec = ck.spec(D)
    assert (spec.weight_args.num_bits, spec.weight_args.group_size, spec.weight_args.symmetric) == (
        4, 128, True), spec.weight_args
    assert len(ck.layers) == 7


def _scale_dtype_float16(ck):
    assert ck.spec(D).weight_args.scale_dtype == "float16", ck.spec(D).weight_args


def _ct_weights(**fields):
    return _edit(CT, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"]
                 .update(fields))


_W = '"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}'


def _st_header(text: str):
    """A one-tensor safetensors file (F32 [2]) whose header is `text`, beside the CT config."""
    return _header(text.encode("utf-8", "surrogatepass"), b"\0" * 8)


def _many_tensors(tmp):
    p = _copy(tmp, CT)
    header = {f"t{i}": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]} for i in range(150_000)}
    _raw_header(p, json.dumps(header).encode())
    return p


def _phantom_index(tmp):
    p = _copy(tmp, SHARDED)
    _config(p, lambda c: c["weight_map"].update({f"x{i}": _SHARD1 for i in range(1_200_000)}), _INDEX)
    return p


_HADAMARD = {"config_groups": {"u": {"type": "hadamard", "apply": [
    {"targets": ["Linear"], "location": "input"}, {"targets": ["Linear"], "location": "weight_input"}]}}}


def _transform_noted(ck):
    notes = ck.spec(D).notes
    assert any("CompressedTensorsLinearTransformMethod" in n and "u: input" in n for n in notes), notes


def _many_layers_many_ignores(tmp):
    """3000 channel-quantized layers (a sparse file: the listing reads headers only) and an
    ignore list of 300,000 exact names: matched one by one, 9 x 10^8 comparisons."""
    p = _copy(tmp, CT)
    header, at = {}, 0
    for i in range(3000):
        for suffix, dtype, shape, size in ((".weight", "I8", [8, 128], 1024), (".weight_scale", "BF16", [8, 1], 16)):
            header[f"model.layers.{i}.mlp.down_proj{suffix}"] = {
                "dtype": dtype, "shape": shape, "data_offsets": [at, at + size]}
            at += size
    _raw_header(p, json.dumps(header).encode())
    with open(p / "model.safetensors", "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.truncate(f.tell() + at)
    _weights(p, strategy="channel", group_size=None)
    _qc(p, ignore=["lm_head", *(f"model.x{i}" for i in range(300_000))])
    return p


def _many_layers_many_targets(tmp):
    """The 3000 layers, their group's targets 300,000 exact names no layer has, then 'Linear'
    (found by the class step): each layer used to walk the list twice."""
    p = _many_layers_many_ignores(tmp)
    _qc(p, ignore=["lm_head"])
    _config(p, lambda c: c["quantization_config"]["config_groups"]["group_0"].update(
        targets=[*(f"model.y{i}" for i in range(300_000)), "re:model\\.layers\\.7\\..*", "Linear"]))
    return p


def _gptq_qc(**fields):
    return _edit(GPTQ, lambda c: c["quantization_config"].update(fields))


def _gptq_listed(ck):
    assert len(ck.layers) == 7 and ck.spec(D).num_bits == 4, [(s.name, s.num_bits) for s in ck.layers]


def _fail(ck):
    raise AssertionError([(s.name, s.group_size) for s in ck.layers])


def _names(*expected):
    def check(ck):
        assert ck.layer_names() == sorted(expected), ck.layer_names()
    return check


_ALL = [f"model.layers.0.{m}" for m in ("mlp.down_proj", "mlp.gate_proj", "mlp.up_proj",
                                        "self_attn.k_proj", "self_attn.o_proj", "self_attn.q_proj",
                                        "self_attn.v_proj")]
_ROW = ["model.layers.0.mlp.down_proj", "model.layers.0.self_attn.o_proj"]


def _huge_weight_shape(tmp):
    p = _copy(tmp, PACK)
    _tensors(p, lambda t: t.update({f"{D}.weight_shape": torch.tensor([10**18, 10**18])}))
    return p


def _zero_rows(tmp):
    p = _copy(tmp, CT)
    _raw_header(p, json.dumps({
        f"{D}.weight": {"dtype": "I8", "shape": [0, 10**18], "data_offsets": [0, 0]},
        f"{D}.weight_scale": {"dtype": "BF16", "shape": [0, 1], "data_offsets": [0, 0]}}).encode())
    _weights(p, strategy="channel", group_size=None)
    return p


def _larger_than_memory(tmp):
    """A weight the header declares at twice the available memory, in a sparse file (no disk
    blocks, so nothing big is written): the memory guard refuses it before allocating."""
    from workbench.memory import available_bytes

    free = available_bytes()
    if free is None:
        pytest.skip("this machine does not say how much memory is available")
    k = -(-2 * free // 256)
    p = _copy(tmp, CT)
    _raw_header(p, json.dumps({
        f"{D}.weight_scale": {"dtype": "BF16", "shape": [256, 1], "data_offsets": [0, 512]},
        f"{D}.weight": {"dtype": "I8", "shape": [256, k], "data_offsets": [512, 512 + 256 * k]},
    }).encode(), b"\x80\x3f" * 256)  # bf16 ones: the scale is read (and checked) first
    with open(p / "model.safetensors", "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.truncate(f.tell() + 256 * k)
    _weights(p, strategy="channel", group_size=None)
    return p


def _gptq_empty_qweight(tmp):
    p = _copy(tmp, GPTQ)
    _qc(p, group_size=-1)
    _tensors(p, lambda t: t.update({f"{D}.qweight": torch.zeros(0, 256, dtype=torch.int32),
                                     f"{D}.scales": torch.ones(1, 256, dtype=torch.float16),
                                     f"{D}.qzeros": torch.zeros(1, 32, dtype=torch.int32)}))
    _tensors(p, lambda t: t.pop(f"{D}.g_idx"))
    return p


def _header(text: bytes, data: bytes = b""):
    def build(tmp):
        p = _copy(tmp, CT)
        _raw_header(p, text, data)
        return p
    return build


def _edit(sample: str, fn, file: str = "config.json"):
    def build(tmp):
        p = _copy(tmp, sample)
        _config(p, fn, file)
        return p
    return build


def _duplicate_across_shards(tmp):
    p = _copy(tmp, SHARDED)
    a, b = load_file(str(p / _SHARD1)), load_file(str(p / "model-00002-of-00002.safetensors"))
    name = next(iter(b))
    a[name] = b[name]
    save_file(a, str(p / _SHARD1))
    return p


def _big_int_config(tmp):
    p = _copy(tmp, CT)
    text = (p / "config.json").read_text().replace('"group_size": 128', '"group_size": ' + "9" * 5000)
    (p / "config.json").write_text(text)
    return p


def _negative_scales(tmp):
    p = _copy(tmp, CT)
    _tensors(p, lambda t: t[f"{D}.weight_scale"].mul_(-1))
    return p


def _check_negative_note(ck):
    notes = ck.load_layer(D).notes
    assert any("negative value" in n for n in notes), notes


def _ok_allowed():
    """The symlinked checkpoint opens once the link's target directory is an allowed root."""
    with tempfile.TemporaryDirectory() as d:
        path = _link_out("model.safetensors")(Path(d))
        ck = open_checkpoint(path, allowed_roots=(Path(d) / "elsewhere",))
        assert len(ck.layers) == 7 and ck.load_layer(D).out_features == 256


_CT_BIAS = torch.linspace(-1, 1, 256).to(torch.bfloat16)


def _with_ct_bias(bias: torch.Tensor):
    def build(tmp):
        p = _copy(tmp, CT)
        _tensors(p, lambda t: t.update({f"{D}.bias": bias}))
        return p
    return build


def _check_ct_bias(ck):
    layer = ck.load_layer(D)
    assert layer.bias is not None and torch.equal(layer.bias, _CT_BIAS), layer.bias
    assert ck.spec(D).provenance.tensors["bias"] == f"{D}.bias"


def _gist(*parts: str) -> str:
    return ".*".join(re.escape(p) for p in parts)


CATALOG = [
    # Every tensor the config names must exist: a layer that lost one is reported, not dropped.
    ("compressed-tensors int-quantized layer without its weight_scale",
     "MissingTensorError naming the layer, weight_scale and model.safetensors",
     _raises(MissingTensorError, _gist(f"layer {D}", f"{D}.weight_scale", "missing from model.safetensors"),
             _drop(CT, "weight_scale"))),
    ("GPTQ layer without its qweight (qzeros, scales, g_idx still there)",
     "MissingTensorError naming the layer, qweight and the file",
     _raises(MissingTensorError, _gist(f"{D}.qweight", "missing from model.safetensors"), _drop(GPTQ, "qweight"))),
    ("AutoRound (INC) layer without its scales", "MissingTensorError naming scales",
     _raises(MissingTensorError, _gist(f"{D}.scales", "missing"), _drop(AR, "scales"))),
    ("pack-quantized layer without weight_packed", "MissingTensorError naming weight_packed",
     _raises(MissingTensorError, _gist(f"{D}.weight_packed", "pack-quantized"), _drop(PACK, "weight_packed"))),
    ("sharded asymmetric pack-quantized layer without weight_zero_point",
     "MissingTensorError naming the shard that holds the layer",
     _raises(MissingTensorError, _gist("weight_zero_point", "model-00002-of-00002.safetensors"),
             _drop(SHARDED, "weight_zero_point", "model-00002-of-00002.safetensors"))),
    ("weights.actorder 'group' without weight_g_idx", "MissingTensorError naming weight_g_idx",
     _raises(MissingTensorError, _gist(f"{D}.weight_g_idx", "actorder 'group'"),
             _edit(CT, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"]
                   .update(actorder="group")))),
    ("GPTQ desc_act true without g_idx", "MissingTensorError naming g_idx (the act order is lost)",
     _raises(MissingTensorError, _gist(f"{D}.g_idx", "desc_act is true"),
             lambda tmp: (_drop(GPTQ, "g_idx")(tmp), _qc(tmp / "ckpt", desc_act=True))[0])),
    ("3-D (MoE) layer listed as not loadable, without weight_scale", "MissingTensorError naming weight_scale",
     _raises(MissingTensorError, _gist(f"{D}.weight_scale", "int-quantized"), _moe_without_scale)),
    # Only regular files under the allowed roots are opened.
    ("model.safetensors is a FIFO (open() used to block forever)", "NotAFileError: a FIFO, refused unopened",
     _in_child("NotAFileError", _fifo_weights)),
    ("config.json is a FIFO", "NotAFileError: a FIFO, refused unopened",
     _raises(NotAFileError, _gist("config.json", "FIFO", "refused unopened"), _fifo_config)),
    ("model.safetensors is a symlink to a file outside the checkpoint",
     "OutsideRootsError naming the link and its target",
     _raises(OutsideRootsError, _gist("model.safetensors (a symlink to", "elsewhere", "outside the allowed roots"),
             _link_out("model.safetensors"))),
    ("the same symlink, its target directory passed as an allowed root",
     "ok: 7 layers, the layer loads", _ok_allowed),
    ("config.json is a symlink to a file outside the checkpoint", "OutsideRootsError naming config.json",
     _raises(OutsideRootsError, _gist("config.json (a symlink to", "outside the allowed roots"),
             _link_out("config.json"))),
    ("an index shard is a symlink to a file outside the checkpoint", "OutsideRootsError naming the shard",
     _raises(OutsideRootsError, _gist(_SHARD1, "outside the allowed roots"), _link_out(_SHARD1, SHARDED))),
    ("an index shard is a symlink to itself (a loop)", "NotAFileError naming the shard",
     _raises(NotAFileError, _gist(_SHARD1, "cannot be resolved"), _shard_loop)),
    ("an index shard is a directory", "NotAFileError: a directory, refused unopened",
     _raises(NotAFileError, _gist(_SHARD1, "is a directory"), _shard_dir)),
    ("checkpoint path /dev/null", "NotAFileError: a character device",
     _raises(NotAFileError, _gist("/dev/null", "character device"), lambda tmp: "/dev/null")),
    ("checkpoint path with a NUL byte", "MissingWeightsError: not a usable path",
     _raises(MissingWeightsError, "not a usable path", lambda tmp: f"{tmp}/a\0b")),
    ("checkpoint path of 5000 characters", "MissingWeightsError: cannot be read (name too long)",
     _raises(MissingWeightsError, "cannot be read", lambda tmp: "/" + "x" * 5000)),
    ("checkpoint path given as the int 5", "MissingWeightsError: accepted a str or os.PathLike",
     _raises(MissingWeightsError, "str or os.PathLike", lambda tmp: 5)),
    # Regular expressions from the checkpoint run with bounded work.
    ("ignore 're:(a|aa)+$' and the layer name a^40 b (over 25 s in re)",
     "ok: answered in under 20 s, 7 layers", _in_child("ok 7", _ignore_catastrophic)),
    ("GPTQ dynamic '-:(a|aa)+$' and the layer name a^40 b", "ok: answered in under 20 s, 7 layers",
     _in_child("ok 7", _dynamic_catastrophic)),
    ("ignore 're:(?:(?=(?:.?){1900}$).)*x' and a 989-character layer name (a lookahead)",
     "ok: answered in under 20 s, 7 layers", _in_child("ok 7", _lookahead_catastrophic, 60.0)),
    ("ignore 're:.*layers\\.[[:digit:]]+\\.mlp\\..*' (a POSIX class, as vLLM's regex reads it)",
     "ok: the mlp layers are ignored, 4 attention layers listed",
     _ok(_names(*[n for n in _ALL if "self_attn" in n]),
         _edit(CT, lambda c: c["quantization_config"].update(
             ignore=["lm_head", "re:.*layers\\.[[:digit:]]+\\.mlp\\..*"])))),
    ("GPTQ dynamic '-:.*[[:digit:]]\\.mlp\\..*' (a POSIX class)",
     "ok: the mlp layers are left unquantized, 4 listed",
     _ok(_names(*[n for n in _ALL if "self_attn" in n]),
         _edit(GPTQ, lambda c: c["quantization_config"].update(dynamic={"-:.*[[:digit:]]\\.mlp\\..*": {}})))),
    ("CT targets ['RowParallelLinear'] (a vLLM module class)", "ok: o_proj and down_proj listed",
     _ok(_names(*_ROW), _edit(CT, lambda c: c["quantization_config"]["config_groups"]["group_0"]
                             .update(targets=["RowParallelLinear"])))),
    ("CT targets ['re:.*ParallelLinear$']", "ok: all 7 layers (every linear class ends so)",
     _ok(_names(*_ALL), _edit(CT, lambda c: c["quantization_config"]["config_groups"]["group_0"]
                             .update(targets=["re:.*ParallelLinear$"])))),
    ("CT targets ['QKVParallelLinear']", "ok: q/k/v_proj listed",
     _ok(_names(*[n for n in _ALL if n.endswith(("q_proj", "k_proj", "v_proj"))]),
         _edit(CT, lambda c: c["quantization_config"]["config_groups"]["group_0"]
               .update(targets=["QKVParallelLinear"])))),
    ("GPTQ bits 3 (sym)", "InvalidConfigError with vLLM's 'Unsupported quantization config: bits=3, sym=True', before any tensor",
     _raises(InvalidConfigError, re.escape("Unsupported quantization config: bits=3, sym=True"),
             _edit(GPTQ, lambda c: c["quantization_config"].update(bits=3)))),
    ("GPTQ dynamic override group_size \"64\" (a string)", "ok: ignored as vLLM ignores it, 7 layers",
     _ok(lambda ck: (len(ck.layers) == 7 and all(s.group_size == 128 for s in ck.layers)) or _fail(ck),
         _edit(GPTQ, lambda c: c["quantization_config"].update(
             dynamic={"+:.*down_proj": {"group_size": "64"}})))),
    ("INC extra_config {'...down_proj': {'bits': 16.0}}", "ok: down_proj unquantized (bits < 16 is false), 6 listed",
     _ok(_names(*[n for n in _ALL if "down_proj" not in n]),
         _edit(AR, lambda c: c["quantization_config"].update(
             extra_config={"model.layers.0.mlp.down_proj": {"bits": 16.0}})))),
    ("ignore 're:(a)\\1' (a backreference)", "PatternRefusedError quoting the pattern",
     _raises(PatternRefusedError, _gist("ignore", "'(a)\\\\1'", "backreference"),
             _edit(CT, lambda c: c["quantization_config"].update(ignore=["re:(a)\\1"])))),
    ("a 're:' target of 2000 characters", "PatternRefusedError: at most 1000 characters",
     _raises(PatternRefusedError, "at most 1000",
             _edit(CT, lambda c: c["quantization_config"]["config_groups"]["group_0"]
                   .update(targets=["re:" + "a" * 2000])))),
    # Hostile headers and shapes.
    ("pack-quantized weight_shape (10^18, 10^18)", "TensorMismatchError: weight_shape disagrees with weight_packed",
     _raises(TensorMismatchError, "weight_shape says", _huge_weight_shape)),
    ("int8 weight declared at twice the available memory (a sparse file)",
     "UnsupportedLayerError naming the tensor and the memory limit, before allocating",
     _raises(UnsupportedLayerError, _gist(f"tensor '{D}.weight' (I8 [256,", "needs about",
                                          "the limit here is", "of the available memory",
                                          "layers that fit in the memory available"),
             _larger_than_memory)),
    ("int8 weight of shape [0, 10^18] (zero bytes) with its scale", "TensorMismatchError: at least one row",
     _raises(TensorMismatchError, _gist("(0, 1000000000000000000)", "at least one row"), _zero_rows)),
    ("GPTQ qweight [0, 256] with group_size -1", "TensorMismatchError: K = 0",
     _raises(TensorMismatchError, _gist("K = 0", "at least one row"), _gptq_empty_qweight)),
    ("header dtype 'Q4'", "CorruptFileError listing the safetensors dtypes",
     _raises(CorruptFileError, _gist("dtype 'Q4'", "accepted: BOOL"),
             _header(b'{"x":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}}', b"ab"))),
    ("header shape holding an integer of 5000 digits", "CorruptFileError: header is not JSON",
     _raises(CorruptFileError, "header is not UTF-8 JSON",
             _header(b'{"x":{"dtype":"I8","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,0]}}'))),
    ("header data_offsets [NaN, 1]", "CorruptFileError: NaN is not JSON (the library's parser refuses it)",
     _raises(CorruptFileError, "NaN is not JSON",
             _header(b'{"x":{"dtype":"I8","shape":[1],"data_offsets":[NaN,1]}}', b"a"))),
    ("one tensor in two shards", "CorruptFileError naming both shards",
     _raises(CorruptFileError, _gist("appears in both", _SHARD1), _duplicate_across_shards)),
    ("index maps a tensor to '../x.safetensors'", "InvalidConfigError: a file name in the same directory",
     _raises(InvalidConfigError, _gist("weight_map", "'../x.safetensors'", "same directory"),
             _edit(SHARDED, lambda c: c["weight_map"].update(x="../x.safetensors"), _INDEX))),
    ("index maps a tensor to '/etc/x.safetensors'", "InvalidConfigError: a file name in the same directory",
     _raises(InvalidConfigError, _gist("'/etc/x.safetensors'", "same directory"),
             _edit(SHARDED, lambda c: c["weight_map"].update(x="/etc/x.safetensors"), _INDEX))),
    ("index maps a tensor to 'a\\x00.safetensors' (a NUL byte)", "InvalidConfigError: printable, no separators",
     _raises(InvalidConfigError, _gist("weight_map", "printable, no separators"),
             _edit(SHARDED, lambda c: c["weight_map"].update(x="a\0.safetensors"), _INDEX))),
    ("GPTQ bias of shape [3] for N = 256", "TensorMismatchError: expected float [N] = [256]",
     _raises(TensorMismatchError, _gist(f"{D}.bias is F32 [3]", "expected float [N] = [256]"),
             lambda tmp: (_copy(tmp, GPTQ), _tensors(tmp / "ckpt", lambda t: t.update(
                 {f"{D}.bias": torch.ones(3)})))[0])),
    ("compressed-tensors bias of shape [3] for N = 256", "TensorMismatchError: expected float [N] = [256]",
     _raises(TensorMismatchError, _gist(f"{D}.bias is F32 [3] in model.safetensors", "[N] = [256]"),
             _with_ct_bias(torch.ones(3)))),
    ("compressed-tensors bias stored as int8", "TensorMismatchError: expected float (F16, BF16, F32)",
     _raises(TensorMismatchError, _gist(f"{D}.bias is I8 [256]", "expected float (F16, BF16, F32)"),
             _with_ct_bias(torch.ones(256, dtype=torch.int8)))),
    ("compressed-tensors bias holding NaN at index 5", "TensorMismatchError: a bias must be finite",
     _raises(TensorMismatchError, _gist(f"{D}.bias holds nan at index 5", "must be finite"),
             _with_ct_bias(torch.zeros(256).index_fill(0, torch.tensor([5]), float("nan"))))),
    ("compressed-tensors bf16 bias [256]", "ok: the layer carries it, bit for bit",
     _ok(_check_ct_bias, _with_ct_bias(_CT_BIAS))),
    # Config values of the wrong type or out of range.
    ("config.json group_size of 5000 digits", "InvalidConfigError: config.json is not valid JSON",
     _raises(InvalidConfigError, "config.json is not valid JSON", _big_int_config)),
    ("quantization_config is a list", "InvalidConfigError: must be an object",
     _raises(InvalidConfigError, "'quantization_config' must be an object, got list",
             _edit(CT, lambda c: c.update(quantization_config=[1])))),
    ("weights.num_bits \"4\" (a string)", "ok: read as 4, as compressed-tensors' pydantic model "
     "coerces it (was refused)", _ok(_int4_g128, _edit(CT, lambda c: c["quantization_config"][
         "config_groups"]["group_0"]["weights"].update(num_bits="4")))),
    ("weights.num_bits \"four\"", "InvalidConfigError: expected an integer",
     _raises(InvalidConfigError, _gist("num_bits", "expected an integer, got 'four'"),
             _edit(CT, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"]
                   .update(num_bits="four")))),
    ("weights.num_bits 99", "InvalidConfigError: accepted 1..8",
     _raises(InvalidConfigError, _gist("num_bits 99", "1..8"),
             _edit(CT, lambda c: c["quantization_config"]["config_groups"]["group_0"]["weights"]
                   .update(num_bits=99)))),
    ("GPTQ desc_act \"false\" (a string)", "InvalidConfigError: expected bool",
     _raises(InvalidConfigError, _gist("desc_act", "expected bool"),
             _edit(GPTQ, lambda c: c["quantization_config"].update(desc_act="false")))),
    ("GPTQ group_size 0", "InvalidConfigError: -1 or a positive integer",
     _raises(InvalidConfigError, _gist("group_size: 0", "-1 or a positive integer"),
             _edit(GPTQ, lambda c: c["quantization_config"].update(group_size=0)))),
    ("GPTQ dynamic rule whose value is 5, not an object", "InvalidConfigError: an object of overrides",
     _raises(InvalidConfigError, _gist("dynamic['-:.*']", "an object of overrides"),
             _edit(GPTQ, lambda c: c["quantization_config"].update(dynamic={"-:.*": 5})))),
    ("AWQ modules_to_not_convert [1, null]", "InvalidConfigError: a list of module name strings",
     _raises(InvalidConfigError, "a list of module name strings",
             _edit(GPTQ, lambda c: c.update(quantization_config={
                 "quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True,
                 "modules_to_not_convert": [1, None]})))),
    ("negative weight_scale values", "ok: loads, with a note that they flip the sign",
     _ok(_check_negative_note, _negative_scales)),
    # A hostile value is quoted shortened, never whole.
    ("quant_method of a million characters", "UnknownFormatError quoting it shortened (message under 1000 "
     "characters), accepted methods listed", _short_message(UnknownFormatError, "accepted: compressed-tensors",
                                                          _edit(CT, lambda c: c["quantization_config"]
                                                                .update(quant_method="x" * 10**6)))),
    ("a tensor name of 5000 characters", "CorruptFileError: accepted at most 1024 characters",
     _short_message(CorruptFileError, "a tensor name of 5013 characters; accepted: at most 1024",
                    _header(json.dumps({"n" * 5000 + ".weight_scale": {
                        "dtype": "I8", "shape": [1], "data_offsets": [0, 1]}}).encode(), b"a"))),
    # Round 4: the header parsed as the safetensors library's serde_json parses it.
    ("header with __metadata__ twice", "CorruptFileError: __metadata__ given twice (the library refuses a "
     "repeated field; Python's json kept the last)",
     _raises(CorruptFileError, "__metadata__ given twice",
             _st_header('{' + _W + ', "__metadata__": {"a": "b"}, "__metadata__": {"a": "c"}}'))),
    ("header entry with 'dtype' twice (I8 then F32)", "CorruptFileError: field 'dtype' given twice",
     _raises(CorruptFileError, "entry 'w': field 'dtype' given twice",
             _st_header('{"w": {"dtype": "I8", "dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'))),
    ("tensor name repeated, the first entry's dtype 'Q4'", "CorruptFileError: dtype 'Q4' (the library "
     "parses every value of a repeated key)",
     _raises(CorruptFileError, "dtype 'Q4' is not a safetensors dtype",
             _st_header('{"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}, ' + _W + '}'))),
    ("tensor name holding a lone surrogate escape \\ud800", "CorruptFileError: a lone UTF-16 surrogate",
     _raises(CorruptFileError, "lone UTF-16 surrogate",
             _st_header('{"w\\ud800": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'))),
    ("an unknown entry field holding -Infinity", "CorruptFileError: -Infinity is not JSON",
     _raises(CorruptFileError, "-Infinity is not JSON",
             _st_header('{"w": {"dtype": "F32", "x": -Infinity, "shape": [2], "data_offsets": [0, 8]}}'))),
    ("an unknown entry field holding 1e400", "CorruptFileError: out of float64's range",
     _raises(CorruptFileError, "out of float64's range",
             _st_header('{"w": {"dtype": "F32", "x": 1e400, "shape": [2], "data_offsets": [0, 8]}}'))),
    ("an unknown entry field nested 126 deep (128 levels)", "CorruptFileError: nests 128 levels; "
     "accepted at most 127 (serde_json's limit)",
     _raises(CorruptFileError, "nests 128 levels deep; accepted: at most 127",
             _st_header('{"w": {"dtype": "F32", "x": ' + "[" * 126 + "]" * 126
                        + ', "shape": [2], "data_offsets": [0, 8]}}'))),
    ("data_offsets [-0, 8] (serde reads -0 as a float)", "CorruptFileError naming data_offsets",
     _raises(CorruptFileError, _gist("entry 'w'", "data_offsets [-0.0, 8]"),
             _st_header('{"w": {"dtype": "F32", "shape": [2], "data_offsets": [-0, 8]}}'))),
    ("shape [2^32, 2^32, 0] (zero bytes, but the element count overflows u64 first)",
     "CorruptFileError: the element count overflows 64 bits",
     _raises(CorruptFileError, "element count overflows 64 bits",
             _st_header('{"z": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": '
                        '[0, 0]}, ' + _W + '}'))),
    ("a header of 150,000 zero-byte tensors (11 MB; 13 s for 400,000 before)",
     "CorruptFileError: about N JSON values; accepted at most 1000000, answered at once",
     _in_child("CorruptFileError", _many_tensors, limit_s=20.0)),
    ("an index of 1,200,000 entries (54 MB) naming tensors no shard holds (a Path per entry: 12 s for 300,000)",
     "MissingTensorError naming the first, answered within 15 s",
     _in_child("MissingTensorError", _phantom_index, limit_s=15.0)),
    ("ignore of 2000 're:' patterns (each compiled once now; the cache keyed on the caller thrashed past 1024)",
     "ok: 7 layers, answered within 15 s",
     _in_child("ok 7", _edit(CT, lambda c: c["quantization_config"].update(
         ignore=[f"re:model\\.x{i}\\..*" for i in range(2000)])), limit_s=15.0)),
    ("ignore of 5000 're:' patterns (20 s for 7 layers)", "PatternRefusedError: 5000 regex patterns; accepted: "
     "at most 2000 (exact names are not counted)", _raises(PatternRefusedError, "5000 regex patterns; accepted: at most 2000",
                                       _edit(CT, lambda c: c["quantization_config"].update(
                                           ignore=[f"re:model\\.x{i}\\..*" for i in range(5000)])))),
    ("3000 layers and an ignore list of 300,000 exact names", "ok: 3000 layers, answered within 20 s (exact "
     "names are one set lookup; was 9 x 10^8 comparisons)",
     _in_child("ok 3000", _many_layers_many_ignores, limit_s=20.0)),
    ("3000 layers, targets of 300,000 exact names then a 're:' and 'Linear'", "ok: 3000 layers, answered "
     "within 20 s (the first matching target found by lookup, the class step once per class)",
     _in_child("ok 3000", _many_layers_many_targets, limit_s=20.0)),
    # Round 4: config values read as vLLM reads them.
    ("weights.symmetric \"true\", group_size 128.0, num_bits 4.0", "ok: pydantic's lax mode reads "
     "them as true, 128 and 4; the layer lists as int4 g128 (was refused)",
     _ok(_int4_g128, _ct_weights(symmetric="true", group_size=128.0, num_bits=4.0))),
    ("weights.scale_dtype \"nonsense\"", "InvalidConfigError: No such torch dtype (vLLM's pydantic "
     "refuses it; was accepted)",
     _raises(InvalidConfigError, r"No such torch dtype `torch\.nonsense`", _ct_weights(scale_dtype="nonsense"))),
    ("weights.scale_dtype \"half\" (a torch alias)", "ok: scale_dtype float16, as torch.half prints",
     _ok(_scale_dtype_float16, _ct_weights(scale_dtype="half"))),
    ("CT transform_config with an online input Hadamard (QuIP-style)", "ok: listed, each layer noting that "
     "vLLM wraps it in CompressedTensorsLinearTransformMethod (was silent)",
     _ok(_transform_noted, _edit(CT, lambda c: c["quantization_config"].update(transform_config=_HADAMARD)))),
    ("GPTQ sym 1, desc_act 0", "ok: 1 == True finds vLLM's TYPE_MAP entry, desc_act is read by its "
     "truth value (was refused)", _ok(_gptq_listed, _gptq_qc(sym=1, desc_act=0))),
    ("GPTQ desc_act null", "ok: falsy, as vLLM's `if desc_act` reads it", _ok(_gptq_listed, _gptq_qc(desc_act=None))),
    ("GPTQ sym null", "InvalidConfigError with vLLM's 'Unsupported quantization config: bits=4, sym=None'",
     _raises(InvalidConfigError, "Unsupported quantization config: bits=4, sym=None", _gptq_qc(sym=None))),
]


@pytest.mark.parametrize("row", CATALOG, ids=[row[0] for row in CATALOG])
def test_catalog_row(row):
    row[2]()
