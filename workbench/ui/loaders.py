"""Cached access to the core: layers (`st.cache_resource`), traces and tables (`st.cache_data`).

Every loader raises the core's named errors (`workbench.errors.USER_ERRORS`); pages catch
them and show the message. A layer is identified by a string key built from its source
(sample name and layer, directory and mtime, upload digest, synthetic spec), so a cached
trace never outlives the layer it was computed for.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from workbench.checkpoints.errors import shown
from workbench.checkpoints.paths import ROOTS_ENV, checkpoint_roots
from workbench.errors import InvalidInputError
from workbench.limits import check_path
from workbench.paths import SAMPLE_ROOT

# The platform fields the trace page edits (Platform's own field names).
PLATFORM_FIELDS = ("device", "capability", "cpu_arch", "gfx", "zen", "amx", "packages",
                   "torch_ops", "avx2", "avx512", "avx512_bf16", "avx512_vnni", "vendor")

# Uploads above this many MiB (all files together) are refused before they are parsed.
# `.streamlit/config.toml` sets `server.maxUploadSize` to the same number (a test holds them
# equal), so Streamlit refuses a larger file before it buffers it in the server's memory.
MAX_UPLOAD_MB = 200
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * 2**20
MAX_NAME_BYTES = 255  # a file name's limit on Linux and macOS file systems
# Longer than any path the OS accepts (PATH_MAX is 4096 on Linux, 1024 on macOS).
UPLOAD_SUFFIXES = (".safetensors", ".json")


class PathNotAllowedError(InvalidInputError):
    """A checkpoint directory outside the roots the user allowed."""


class UploadRefusedError(InvalidInputError):
    """An upload that is too large or is not safetensors / JSON."""


# --------------------------------------------------------------------------- platforms


@st.cache_resource(show_spinner=False)
def host_platform():
    """This machine as vLLM sees it (probes torch once per server)."""
    from workbench.platforms import detect_host

    return detect_host()


def preset_platform(name: str):
    from workbench.platforms import get_preset

    return host_platform() if name == "host" else get_preset(name)


def preset_fields(name: str) -> dict[str, Any]:
    """The editable fields of a preset; lists (not tuples) so multiselects can hold them."""
    p = preset_platform(name)
    return {f: list(getattr(p, f)) if f in ("packages", "torch_ops") else getattr(p, f)
            for f in PLATFORM_FIELDS}


def preset_names() -> list[str]:
    from workbench.platforms import PRESETS

    return ["host", *PRESETS]


def preset_label(name: str) -> str:
    if name == "host":
        return f"this machine ({host_platform().description.removeprefix('this machine: ')})"
    from workbench.platforms import PRESETS

    return f"{name}: {PRESETS[name].description}"


def build_platform(preset: str, fields: dict[str, Any]):
    """A Platform from a preset and edited fields, validated by the core's JSON reader."""
    from workbench.platforms import platform_from_json

    base = preset_platform(preset)
    data = {f: fields[f] for f in PLATFORM_FIELDS}
    edited = any(data[f] != (list(getattr(base, f)) if f in ("packages", "torch_ops")
                             else getattr(base, f)) for f in PLATFORM_FIELDS)
    data["name"] = base.name + (" (edited)" if edited else "")
    data["description"] = base.label() + (" (edited)" if edited else "")
    return platform_from_json(data)


# --------------------------------------------------------------------------- checkpoints


def sample_names() -> list[str]:
    if not SAMPLE_ROOT.is_dir():
        return []
    return sorted(p.name for p in SAMPLE_ROOT.iterdir() if (p / "config.json").is_file())


def allowed_roots() -> list[Path]:
    """The bundled samples, plus what WORKBENCH_ALLOWED_ROOTS names (the readers' own rule)."""
    return list(checkpoint_roots(SAMPLE_ROOT))


def check_directory(raw: str) -> Path:
    """Resolve a user-typed directory (symlinks followed) and require it under an allowed root."""
    if not raw.strip():
        raise InvalidInputError("checkpoint directory: empty; type the path of a directory "
                                "holding config.json and *.safetensors")
    check_path(raw.strip(), "checkpoint directory")
    try:
        path = Path(raw.strip()).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # a component too long, a symlink loop
        raise InvalidInputError(f"checkpoint directory {raw.strip()[:200]!r}: cannot be resolved "
                                f"({exc.strerror or exc}); accepted: an existing directory") from None
    roots = allowed_roots()
    if not any(path == r or path.is_relative_to(r) for r in roots):
        raise PathNotAllowedError(
            f"checkpoint directory {str(path)!r} is not under an allowed root; allowed: "
            f"{', '.join(map(str, roots))}. Add roots with {ROOTS_ENV}=/path/a{os.pathsep}/path/b "
            "before starting the app")
    if not path.is_dir():
        raise InvalidInputError(f"checkpoint directory {str(path)!r}: not a directory")
    return path


def _mtime(path: Path) -> float:
    """Newest mtime of the directory's files: a rewritten checkpoint is read again."""
    return max((p.stat().st_mtime for p in path.iterdir() if p.is_file()), default=0.0)


@st.cache_resource(show_spinner=False, max_entries=16)
def _open(path: str, mtime: float):
    from workbench.checkpoints import open_checkpoint

    return open_checkpoint(path)


def open_dir(path: Path):
    """The opened checkpoint (config + headers, no tensor data), cached per path and mtime."""
    return _open(str(path), _mtime(path))


@st.cache_resource(show_spinner=False, max_entries=8)
def _load(path: str, mtime: float, name: str):
    return _open(path, mtime).load_layer(name)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@st.cache_resource(show_spinner=False)
def upload_root() -> Path:
    """This server's private upload directory (mode 0700), removed when the server stops.

    `mkdtemp` makes a new directory only this user can enter, so no folder planted or left
    by another server or user is ever read in place of an upload.
    """
    root = Path(tempfile.mkdtemp(prefix=f"w4a8-workbench-uploads-{os.getpid()}-"))
    atexit.register(_remove, root)
    return root


class _SessionUploads:
    """One session's upload directory; removed when the session's state is dropped."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="session-", dir=upload_root()))
        weakref.finalize(self, _remove, self.path)


def session_upload_dir(ss: Any) -> Path:
    """The session's own upload directory (made on the first upload)."""
    holder = ss.get("_uploads")
    if holder is None or not holder.path.is_dir():
        holder = ss["_uploads"] = _SessionUploads()
    return holder.path


def _digest(files: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, data in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def _digest_on_disk(folder: Path, names: list[str]) -> str:
    return _digest([(n, (folder / n).read_bytes()) for n in names])


def check_upload(files: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """The uploaded files by their base names; refuses what the checkpoint readers would not read."""
    if not files:
        raise UploadRefusedError("upload: no file; upload config.json and the *.safetensors file(s)")
    total = sum(len(data) for _, data in files)
    if total > MAX_UPLOAD_BYTES:
        raise UploadRefusedError(
            f"upload: {total / 2**20:.1f} MiB in all; the limit is {MAX_UPLOAD_MB} MiB. "
            f"Use a local directory under an allowed root ({ROOTS_ENV}) for larger checkpoints")
    named = [(Path(name).name, data) for name, data in files]
    names = [n for n, _ in named]
    # A browser sends whatever name it likes: a NUL byte, a 300-character name or a control
    # character would fail the write (ValueError, ENAMETOOLONG) or reach every message.
    odd = [n for n in names if not n.isprintable() or "\\" in n
           or len(n.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES]
    if odd:
        raise UploadRefusedError(f"upload: file name {shown(odd[0], 80)} refused; accepted: a "
                                 f"printable name of at most {MAX_NAME_BYTES} bytes, without "
                                 "control characters or backslashes")
    bad = [n for n in names if not n.endswith(UPLOAD_SUFFIXES) or n.startswith(".")]
    if bad:
        raise UploadRefusedError(f"upload: {', '.join(bad)} refused; accepted: *.safetensors and "
                                 "config.json / quantize_config.json / *.index.json (never pickles)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UploadRefusedError(f"upload: {', '.join(twice)} uploaded more than once; accepted: one "
                                 "file per name (remove the extra copy from the upload list)")
    if not any(n == "config.json" or n == "quantize_config.json" for n in names):
        raise UploadRefusedError("upload: config.json is missing; the checkpoint readers take the "
                                 "quantization config from it (upload it with the safetensors files)")
    if not any(n.endswith(".safetensors") for n in names):
        raise UploadRefusedError("upload: no *.safetensors file; accepted: the model's safetensors "
                                 "file(s) with its config.json")
    return named


def save_upload(files: list[tuple[str, bytes]], folder: Path) -> Path:
    """Write uploaded config.json + *.safetensors under `folder`, atomically, and verify them.

    The files go to a fresh temporary directory, which is renamed to the upload's digest only
    once what is on disk hashes to what was uploaded; an existing folder of that name is
    replaced, never trusted. Only the names the checkpoint readers look for are accepted; the
    readers then parse the safetensors headers themselves (they never unpickle anything).
    """
    named = check_upload(files)
    expected = _digest(named)
    staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder))
    try:
        for name, data in named:
            try:
                with open(staging / name, "xb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:  # ENOSPC, EDQUOT: the server's disk, said so
                raise UploadRefusedError(f"upload: {shown(name, 80)} cannot be written on this "
                                         f"server: {exc.strerror or exc}") from None
        if _digest_on_disk(staging, [n for n, _ in named]) != expected:
            raise UploadRefusedError("upload: the files read back from disk differ from what was "
                                     "uploaded (disk full or another writer); upload them again")
        out = folder / expected[:24]
        if out.exists():
            _remove(out)
        os.rename(staging, out)
    except BaseException:
        _remove(staging)
        raise
    return out


def accept_upload(files: list[tuple[str, bytes]], folder: Path) -> Path:
    """`save_upload`, then the checkpoint opened (config and headers): a set the readers refuse
    is removed again and raises their named error, so it never becomes the current layer."""
    from workbench.errors import USER_ERRORS

    out = save_upload(files, folder)
    try:
        open_dir(out)
    except USER_ERRORS:
        _remove(out)
        raise
    return out


# --------------------------------------------------------------------------- the current layer


@dataclass(frozen=True)
class LayerRef:
    """Where the current layer comes from; `key` identifies its content for the caches."""

    source: str
    key: str
    label: str
    path: Path | None = None
    name: str | None = None


def current_ref(ss: Any) -> LayerRef:
    """The layer the user picked (no loading yet); raises a named error if it cannot be located."""
    source = ss["layer.source"]
    if source in ("sample", "directory", "upload"):
        if source == "sample":
            if ss["layer.sample"] not in sample_names():
                raise InvalidInputError(
                    f"sample {ss['layer.sample']!r}: not in {SAMPLE_ROOT}; accepted: "
                    f"{', '.join(sample_names()) or 'none found (run sample_models/generate.py)'}")
            path = SAMPLE_ROOT / ss["layer.sample"]
        elif source == "directory":
            path = check_directory(ss["layer.dir"])
        else:
            if not ss["layer.upload_dir"]:
                raise InvalidInputError("upload: nothing uploaded yet; upload config.json and the "
                                        "*.safetensors file(s) on the Layer page")
            path = Path(ss["layer.upload_dir"])
        ckpt = open_dir(path)
        name = ss["layer.name"]
        if name not in ckpt.layer_names():
            name = ckpt.layer_names()[0] if ckpt.layers else name
            ss["layer.name"] = name
        # An upload's folder is named by its digest: label it by the files the user chose.
        shown = (ss["layer.upload_label"] or path.name) if source == "upload" else path.name
        label = f"{shown} / {name}"
        return LayerRef(source, f"{source}:{path}:{_mtime(path)}:{name}", label, path, name)
    if source == "synthetic":
        spec = synthetic_spec_dict(ss)
        return LayerRef(source, "synthetic:" + json.dumps(spec, sort_keys=True),
                        f"synthetic {spec['out_features']}x{spec['in_features']} {spec['scheme']}"
                        f" g{spec['group_size']}", name="synthetic")
    if source == "trained":
        spec = trained_spec_dict(ss)
        return LayerRef(source, "trained:" + json.dumps(spec, sort_keys=True),
                        f"all-MiniLM-L6-v2 {spec['name']} {spec['scheme']} g{spec['group_size']}",
                        name=spec["name"])
    raise InvalidInputError(f"layer source {source!r}; accepted: sample, directory, upload, "
                            "synthetic, trained")


def synthetic_spec_dict(ss: Any) -> dict[str, Any]:
    keys = ("out_features", "in_features", "group_size", "symmetric", "scheme", "distribution",
            "outlier_channels", "params_dtype", "seed")
    return {k: ss[f"syn.{k}"] for k in keys}


# The synthetic layer's name: the Llama down_proj it stands in for.
SYNTHETIC_NAME = "model.layers.0.mlp.down_proj"


@st.cache_resource(show_spinner=False, max_entries=8)
def _synthetic(spec_json: str):
    from workbench.contained import layer_from_source, layer_source_synthetic

    return layer_from_source(layer_source_synthetic(json.loads(spec_json), SYNTHETIC_NAME))


@st.cache_resource(show_spinner=False, max_entries=4)
def _trained(spec_json: str):
    from workbench.contained import layer_from_source, layer_source_trained

    return layer_from_source(layer_source_trained(json.loads(spec_json)))


def trained_spec_dict(ss: Any) -> dict[str, Any]:
    return {k: ss[f"trained.{k}"] for k in ("name", "scheme", "group_size", "symmetric", "params_dtype")}


def layer_spec(ref: LayerRef):
    """The LayerSpec (shapes and args, no tensor data): all a trace needs."""
    if ref.path is not None:
        return open_dir(ref.path).spec(ref.name)
    return load_layer(ref)


def layer_source(ref: LayerRef) -> dict:
    """What a measurement's child process rebuilds the layer from (`workbench.contained`):
    the checkpoint's path and layer name, or the synthetic / trained spec; never the tensors."""
    from workbench import contained

    if ref.path is not None:
        return contained.layer_source_checkpoint(ref.path, ref.name)
    if ref.source == "synthetic":
        return contained.layer_source_synthetic(json.loads(ref.key.removeprefix("synthetic:")), SYNTHETIC_NAME)
    return contained.layer_source_trained(json.loads(ref.key.removeprefix("trained:")))


def load_layer(ref: LayerRef):
    """The QuantizedLayer with its tensors (read once per server, then shared)."""
    if ref.path is not None:
        return _load(str(ref.path), _mtime(ref.path), ref.name)
    if ref.source == "synthetic":
        return _synthetic(ref.key.removeprefix("synthetic:"))
    return _trained(ref.key.removeprefix("trained:"))


# --------------------------------------------------------------------------- traces and tables


@st.cache_data(show_spinner=False, max_entries=256)
def trace(layer_key: str, _spec, platform_json: str, env_json: str, tp_size: int,
          parallel: str | None, version: str | None = None):
    """The dispatch trace of a layer (keyed by its content key, not the spec object), with the
    rules of vLLM `version` (the sidebar's)."""
    from workbench.checkpoints import trace_layer
    from workbench.platforms import platform_from_json

    platform = platform_from_json(json.loads(platform_json))
    return trace_layer(_spec, platform, json.loads(env_json), tp_size=tp_size, parallel=parallel,
                       version=version)


@st.cache_data(show_spinner=False)
def docs_matrix(env_json: str, version: str) -> list[dict]:
    """The docs table of vLLM `version`'s rule set beside what that rule set computes."""
    from workbench.dispatch.docs_matrix import compute_matrix

    return compute_matrix(json.loads(env_json) or None, version)
