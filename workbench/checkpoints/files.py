"""Finding a checkpoint's files: config JSON, safetensors shards, the shard index.

Nothing here reads tensor data. Pickle weights (`pytorch_model.bin`, `*.pt`, ...) are
refused by name, unopened.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from workbench.checkpoints.errors import (
    CorruptFileError, InvalidConfigError, MissingConfigError, MissingTensorError,
    MissingWeightsError, NotAFileError, PickleRefusedError, shown,
)
from workbench.checkpoints.paths import checkpoint_roots, file_kind, open_file
from workbench.checkpoints.safetensors_file import TensorInfo, read_header

__all__ = ["CheckpointFiles", "find_files", "read_json", "PICKLE_SUFFIXES", "INDEX_NAME"]

INDEX_NAME = "model.safetensors.index.json"
# Suffixes of weight files that only a pickle loader can read.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
# A config file bigger than this is not a config; refuse before reading it all.
_MAX_JSON_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class CheckpointFiles:
    """The checkpoint directory, its safetensors files and every tensor's header entry."""

    root: Path
    weight_files: tuple[Path, ...]
    tensors: dict[str, TensorInfo]
    sharded: bool
    roots: tuple[Path, ...]  # every file opened lies under one of these


def read_json(path: Path, what: str, roots: tuple[Path, ...]) -> dict:
    """A JSON object from `path` (a regular file under `roots`); InvalidConfigError says
    where the JSON breaks."""
    try:
        with open_file(path, roots, MissingConfigError) as f:
            if os.fstat(f.fileno()).st_size > _MAX_JSON_BYTES:
                raise InvalidConfigError(f"{path}: {what} is over {_MAX_JSON_BYTES} bytes")
            text = f.read(_MAX_JSON_BYTES + 1).decode("utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise InvalidConfigError(f"{path}: {what} is not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(
            f"{path}: {what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise InvalidConfigError(f"{path}: {what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidConfigError(f"{path}: {what} nests too deeply to be a config") from None
    except OSError as exc:
        raise MissingConfigError(f"{path}: {what} cannot be read: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise InvalidConfigError(f"{path}: {what} must be a JSON object, got {type(data).__name__}")
    return data


def _refuse_pickles(root: Path, names: list[str]) -> None:
    pickles = sorted(n for n in names if n.endswith(PICKLE_SUFFIXES))
    if pickles:
        raise PickleRefusedError(
            f"{root}: holds only pickle weights ({', '.join(pickles[:4])}); refused unread. "
            "The workbench reads safetensors only (never unpickles); save the model with "
            "safe_serialization=True.")
    raise MissingWeightsError(f"{root}: no *.safetensors file and no {INDEX_NAME}")


def _index_files(root: Path, roots: tuple[Path, ...]) -> dict[str, Path]:
    """tensor name -> shard path, from model.safetensors.index.json."""
    index = read_json(root / INDEX_NAME, INDEX_NAME, roots)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise InvalidConfigError(f"{root / INDEX_NAME}: 'weight_map' must be a non-empty object "
                                 "mapping tensor names to shard file names")
    out: dict[str, Path] = {}
    # A big model's index maps 10^5 tensors to a few shards: each shard name is checked and
    # made a Path once (a Path per entry took 12 s for 300,000 entries here).
    shards: dict[object, Path] = {}
    for name, shard in weight_map.items():
        path = shards.get(shard) if isinstance(shard, str) else None
        if path is None:
            # Shard names are plain file names beside the index; anything else could point
            # outside the checkpoint.
            if (not isinstance(shard, str) or not shard.endswith(".safetensors")
                    or os.path.basename(shard) != shard or shard in (".", "..")
                    or not shard.isprintable() or "\\" in shard):
                raise InvalidConfigError(
                    f"{root / INDEX_NAME}: weight_map[{shown(name)}] = {shown(shard)}; accepted: the "
                    "file name of a .safetensors shard in the same directory (printable, no separators)")
            path = shards[shard] = root / shard
        out[name] = path
    return out


def _stat(p: Path) -> os.stat_result:
    """stat of the path the user gave, every OS refusal a named error."""
    try:
        return os.stat(p)
    except FileNotFoundError:
        raise MissingWeightsError(f"{p}: no such file or directory") from None
    except ValueError as exc:  # an embedded NUL byte
        raise MissingWeightsError(f"{str(p)!r}: not a usable path ({exc})") from None
    except OSError as exc:  # ENAMETOOLONG, EACCES, ELOOP, ...
        raise MissingWeightsError(f"{str(p)[:200]!r}: cannot be read: {exc.strerror or exc}") from None


def find_files(path: str | os.PathLike,
               allowed_roots: tuple[str | os.PathLike, ...] | None = None) -> CheckpointFiles:
    """Locate the safetensors files of a checkpoint directory (or one file) and read
    their headers. Every file must lie under the checkpoint's roots (`paths.checkpoint_roots`)."""
    if not isinstance(path, (str, os.PathLike)):
        raise MissingWeightsError(f"checkpoint path {path!r}: accepted: a directory or .safetensors "
                                  f"file path (str or os.PathLike), got {type(path).__name__}")
    p = Path(path)
    mode = _stat(p).st_mode
    if stat.S_ISREG(mode):
        if p.name.endswith(PICKLE_SUFFIXES):
            raise PickleRefusedError(
                f"{p}: a pickle weight file; refused unread (the workbench reads safetensors "
                "only and never unpickles)")
        if not p.name.endswith(".safetensors"):
            raise MissingWeightsError(f"{p}: not a .safetensors file or a checkpoint directory")
        root, files, index = p.absolute().parent, [p], None
        roots = checkpoint_roots(root, allowed_roots)
    elif stat.S_ISDIR(mode):
        root = p
        roots = checkpoint_roots(root, allowed_roots)
        try:
            names = sorted(os.listdir(root))
        except OSError as exc:
            raise MissingWeightsError(f"{root}: cannot be listed: {exc.strerror or exc}") from None
        if INDEX_NAME in names:
            index = _index_files(root, roots)
            files = sorted(set(index.values()))
            absent = [f.name for f in files if not os.path.lexists(f)]
            if absent:
                raise MissingWeightsError(
                    f"{root / INDEX_NAME} names shard(s) that are absent: "
                    f"{', '.join(shown(a) for a in absent[:4])}")
        else:
            index = None
            files = [root / n for n in names if n.endswith(".safetensors")]
            if not files:
                _refuse_pickles(root, names)
    else:
        raise NotAFileError(f"{p}: is {file_kind(mode)}; accepted: a checkpoint directory or a "
                            ".safetensors file (refused unopened)")
    tensors: dict[str, TensorInfo] = {}
    for f in files:
        found, _ = read_header(f, roots)
        for name, info in found.items():
            if name in tensors:
                raise CorruptFileError(f"tensor {name!r} appears in both {tensors[name].file.name} "
                                       f"and {f.name}")
            tensors[name] = info
    if index is not None:
        for name, shard in index.items():
            info = tensors.get(name)
            if info is None or (info.file is not shard and info.file != shard):
                where = f"is in {info.file.name}" if info else "is in no shard"
                raise MissingTensorError(
                    f"{root / INDEX_NAME} maps tensor {name!r} to {shard.name}, but it {where}")
    return CheckpointFiles(root, tuple(files), tensors, index is not None, roots)


def find_config(root: Path, roots: tuple[Path, ...]) -> tuple[dict, dict, str]:
    """(config.json, its quantization config, the file that held it).

    The quantization config comes from config.json's `quantization_config`, else from a
    standalone `quantize_config.json` (AutoGPTQ) or `quantization_config.json` (INC).
    """
    config_path = root / "config.json"
    # lexists: a config.json that is a FIFO or a dangling link is refused by name, not skipped.
    config = read_json(config_path, "config.json", roots) if os.path.lexists(config_path) else None
    qc = config.get("quantization_config") if config is not None else None
    if qc is not None:
        if not isinstance(qc, dict):
            raise InvalidConfigError(f"{config_path}: 'quantization_config' must be an object, "
                                     f"got {type(qc).__name__}")
        return config, qc, "config.json"
    for name in ("quantize_config.json", "quantization_config.json"):
        if os.path.lexists(root / name):
            return config or {}, read_json(root / name, name, roots), name
    if config is None:
        raise MissingConfigError(
            f"{root}: no config.json (nor quantize_config.json); a quantized checkpoint needs "
            "one to say how its tensors are quantized")
    raise MissingConfigError(
        f"{config_path}: has no 'quantization_config' and there is no quantize_config.json; "
        "this is not a quantized checkpoint the workbench can read")
