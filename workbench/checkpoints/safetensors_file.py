"""Safetensors files, read lazily: the header is parsed and checked here, tensors are
read one at a time by seeking to their byte range, so loading a layer touches only that
layer's bytes. Files are opened through `paths.open_file` (allowed roots, regular files only).

The header is checked before any tensor is read, so a truncated file, a header
that claims more bytes than the file holds, or a malformed entry becomes a
`CorruptFileError` naming the file and the entry, never a crash in the reader.

Layout (the safetensors spec): 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the data section; offsets are relative to its start and the tensors must tile it
exactly (what the safetensors library itself enforces).
"""
from __future__ import annotations

import json
import math
import os
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.checkpoints.errors import (
    CorruptFileError, MissingTensorError, MissingWeightsError, PickleRefusedError,
    UnsupportedLayerError, shown,
)
from workbench.checkpoints.paths import open_file
from workbench.checkpoints.patterns import MAX_NAME_CHARS

if TYPE_CHECKING:
    import torch

__all__ = ["TensorInfo", "read_header", "read_tensor", "read_small_ints", "need_tensor",
           "SAFETENSORS_DTYPES"]

# The safetensors library refuses headers over 100 MB; so do we, before allocating.
MAX_HEADER_BYTES = 100_000_000

# safetensors dtype name -> (bits per element, torch dtype name or None when torch has none).
# Names, not dtypes: listing a checkpoint must not import torch (the app's first page).
SAFETENSORS_DTYPES: dict[str, tuple[int, str | None]] = {
    "BOOL": (8, "bool"), "U8": (8, "uint8"), "I8": (8, "int8"), "I16": (16, "int16"),
    "U16": (16, "uint16"), "I32": (32, "int32"), "U32": (32, "uint32"), "I64": (64, "int64"),
    "U64": (64, "uint64"), "F16": (16, "float16"), "BF16": (16, "bfloat16"), "F32": (32, "float32"),
    "F64": (64, "float64"), "F8_E4M3": (8, "float8_e4m3fn"), "F8_E5M2": (8, "float8_e5m2"),
    "F8_E8M0": (8, "float8_e8m0fnu"), "F4": (4, None), "F6_E2M3": (6, None), "F6_E3M2": (6, None),
    "C64": (64, "complex64"),
}
# Little-endian struct codes of the integer dtypes a metadata tensor may use.
_INT_CODES = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I", "I64": "q",
              "U64": "Q"}

# First bytes of files that must never be handed to a deserializer that runs code.
_PICKLE_PROTOCOL_MARK = 0x80
_ZIP_MAGIC = b"PK\x03\x04"


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: file, dtype, shape and byte range (data section offsets)."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int
    data_start: int  # file offset of the data section that begin/end are relative to
    roots: tuple[Path, ...] = ()  # the allowed roots the file was opened under
    ident: tuple[int, int, int] = (0, 0, 0)  # (device, inode, size) when the header was read

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def torch_dtype(self) -> torch.dtype | None:
        import torch

        name = SAFETENSORS_DTYPES[self.dtype][1]
        return None if name is None else getattr(torch, name, None)


def need_tensor(tensors: dict[str, TensorInfo], name: str, layer: str, why: str) -> TensorInfo:
    """The tensor the layer's format requires; MissingTensorError names the layer, the
    tensor and the file(s) holding the layer's other tensors (where it should have been)."""
    info = tensors.get(name)
    if info is None:
        files = sorted({t.file.name for t in tensors.values() if t.name.startswith(f"{layer}.")})
        raise MissingTensorError(f"layer {layer}: tensor {name!r} is missing from "
                                 f"{', '.join(files) or 'every file'} ({why})")
    return info


def _refuse_if_pickle(path: Path, head: bytes) -> None:
    # A safetensors header starts right after the length with "{"; only a file that does
    # not look like that is judged by its first bytes (a length byte may be 0x80 too).
    if head[8:9] == b"{":
        return
    pickle_mark = head[:1] == bytes([_PICKLE_PROTOCOL_MARK]) and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")
    if pickle_mark or head[:4] == _ZIP_MAGIC:
        kind = "a torch zip archive" if head[:4] == _ZIP_MAGIC else "a pickle stream"
        raise PickleRefusedError(
            f"{path}: starts like {kind}, not safetensors; refused unread (the workbench "
            "never unpickles checkpoint files). Convert it to .safetensors first.")


def _entry_error(path: Path, name: str, what: str) -> CorruptFileError:
    return CorruptFileError(f"{path}: header entry {name!r}: {what}")


# The safetensors library reads the header with serde_json into its own types, which refuses
# what Python's json module lets through; the reader refuses the same, so a file is a
# checkpoint here exactly when it is one for the library (and for vLLM, which loads with it).
_U64_MAX = 2**64 - 1
_MAX_DEPTH = 127  # serde_json's recursion limit: a 128th nested array or object is refused
_ENTRY_FIELDS = ("dtype", "shape", "data_offsets")
# Every JSON value costs a Python object and parser work that the library, skipping unknown
# fields, does not spend; values are counted by their separators and brackets before parsing.
MAX_HEADER_VALUES = 1_000_000
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _Object(dict):
    """A JSON object that keeps the values its repeated keys replaced (serde keeps the last
    of a repeated map key, but parses every value, and refuses a repeated struct field)."""

    __slots__ = ("replaced",)


def _object(pairs: list[tuple[str, object]]) -> _Object:
    obj = _Object()
    obj.replaced = []
    for key, value in pairs:
        if key in obj:
            obj.replaced.append((key, obj[key]))
        obj[key] = value
    return obj


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} is out of float64's range")
    return value


def _int(text: str) -> int | float:
    # serde_json reads integers outside i64/u64, and "-0", as floats (a float is no shape or
    # offset); more than 20 digits never fits, and int() of thousands of digits is slow.
    if len(text) <= 20:
        value = int(text)
        if -2**63 <= value <= _U64_MAX and text != "-0":
            return value
    return _float(text)


def _check_tree(path: Path, header: dict, raw: bytes) -> None:
    """serde_json's nesting limit, and its refusal of lone UTF-16 surrogate escapes."""
    surrogates = _SURROGATE_ESCAPE.search(raw) is not None
    stack: list[tuple[object, int]] = [(header, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > _MAX_DEPTH:
                raise CorruptFileError(f"{path}: header nests {depth} levels deep; accepted: at "
                                       f"most {_MAX_DEPTH} (the safetensors library's JSON limit)")
            items = list(value.items()) + list(getattr(value, "replaced", ())) if isinstance(
                value, dict) else [(None, v) for v in value]
            for key, item in items:
                if surrogates and key is not None:
                    _utf8(path, key)
                if isinstance(item, (dict, list)) or (surrogates and isinstance(item, str)):
                    stack.append((item, depth + 1))
        elif isinstance(value, str):
            _utf8(path, value)


def _utf8(path: Path, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CorruptFileError(f"{path}: header string {shown(text, 60)} holds a lone UTF-16 "
                               "surrogate escape, which is no Unicode text") from None


def _entry_types(path: Path, name: str, entry: object) -> None:
    """What the library's TensorInfo deserializer checks: an object with a known dtype, a
    shape of u64s and two u64 offsets, no field given twice."""
    if not isinstance(entry, dict):
        raise _entry_error(path, name, f"expected an object, got {type(entry).__name__}")
    twice = sorted({k for k, _ in getattr(entry, "replaced", ()) if k in _ENTRY_FIELDS})
    if twice:
        raise _entry_error(path, name, f"field {twice[0]!r} given twice")
    missing = [k for k in _ENTRY_FIELDS if k not in entry]
    if missing:
        raise _entry_error(path, name, f"lacks {', '.join(missing)}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
        raise _entry_error(path, name, f"dtype {shown(dtype)} is not a safetensors dtype; accepted: "
                           f"{', '.join(SAFETENSORS_DTYPES)}")
    if not isinstance(shape, list) or not all(type(d) is int and 0 <= d <= _U64_MAX for d in shape):
        raise _entry_error(path, name, f"shape {shown(shape)} must be a list of non-negative ints")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(o) is int and 0 <= o <= _U64_MAX for o in offsets)
            or offsets[0] > offsets[1]):
        raise _entry_error(path, name, f"data_offsets {shown(offsets)} must be [begin, end] with "
                           "0 <= begin <= end")


def _parse_entry(path: Path, name: str, entry: object) -> tuple[str, tuple[int, ...], int, int]:
    _entry_types(path, name, entry)
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    bits = SAFETENSORS_DTYPES[dtype][0]
    elements = 1
    for d in shape:  # the library multiplies in u64 and refuses an overflow, even before a 0
        elements *= d
        if elements > _U64_MAX:
            raise _entry_error(path, name, f"shape {shown(shape)}: the element count overflows "
                               "64 bits")
    need = elements * bits
    if need > _U64_MAX:
        raise _entry_error(path, name, f"{dtype} {shown(shape)}: the size in bits overflows 64 bits")
    if need % 8:
        raise _entry_error(path, name, f"{dtype} {shape} is not a whole number of bytes")
    if offsets[1] - offsets[0] != need // 8:
        raise _entry_error(path, name, f"{dtype} {shape} needs {need // 8} bytes but "
                           f"data_offsets {offsets} span {offsets[1] - offsets[0]}")
    return dtype, tuple(shape), offsets[0], offsets[1]


def _open_checked(info: TensorInfo):
    """The tensor's file, opened again under its roots; it must be the file whose header was read."""
    f = open_file(info.file, info.roots, MissingWeightsError)
    st = os.fstat(f.fileno())
    if (st.st_dev, st.st_ino, st.st_size) != info.ident:
        f.close()
        raise CorruptFileError(f"{info.file}: changed since its header was read (replaced or "
                               "rewritten); open the checkpoint again")
    return f


def read_header(path: str | os.PathLike, roots: tuple[Path, ...] | None = None,
                ) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Parse and check a safetensors header without reading tensor data.

    `roots`: where the file's real path may lie (default: its own directory). Returns
    (tensors by name, __metadata__).
    """
    path = Path(path)
    if roots is None:
        roots = (Path(os.path.realpath(path.absolute().parent)),)
    try:
        with open_file(path, roots, MissingWeightsError) as f:
            st = os.fstat(f.fileno())
            size = st.st_size
            head = f.read(9)
            _refuse_if_pickle(path, head)
            head = head[:8]
            f.seek(8)
            if len(head) < 8:
                raise CorruptFileError(
                    f"{path}: {size} bytes, too short for the 8-byte header length of a "
                    "safetensors file (truncated?)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES:
                raise CorruptFileError(
                    f"{path}: header length field claims {n} bytes; accepted: at most "
                    f"{MAX_HEADER_BYTES} (a corrupt or non-safetensors file)")
            if 8 + n > size:
                raise CorruptFileError(
                    f"{path}: header claims {n} bytes but only {size - 8} follow the length "
                    "field (truncated file)")
            raw = f.read(n)
    except OSError as exc:
        raise CorruptFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if len(raw) != n:
        raise CorruptFileError(f"{path}: header cut short while reading (the file shrank)")
    ident = (st.st_dev, st.st_ino, size)
    values = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
    if values > MAX_HEADER_VALUES:
        raise CorruptFileError(
            f"{path}: header holds about {values} JSON values; accepted: at most "
            f"{MAX_HEADER_VALUES} (about 100000 tensors a file; shard a larger checkpoint)")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_object,
                            parse_constant=_refuse_constant, parse_float=_float, parse_int=_int)
    except (ValueError, RecursionError) as exc:  # bad UTF-8, bad JSON, NaN, 1e400
        raise CorruptFileError(f"{path}: header is not UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict):
        raise CorruptFileError(f"{path}: header must be a JSON object, got {type(header).__name__}")
    _check_tree(path, header, raw)
    if any(k == "__metadata__" for k, _ in header.replaced):
        raise CorruptFileError(f"{path}: __metadata__ given twice (the safetensors library "
                               "refuses a repeated field)")
    # null is no metadata (the library's Option); [] or "" are refused as the library refuses them
    metadata = header.pop("__metadata__", None)
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str)
            for k, v in [*metadata.items(), *getattr(metadata, "replaced", ())]):
        raise CorruptFileError(f"{path}: __metadata__ must map strings to strings")
    for name, shadowed in header.replaced:  # a repeated tensor name: the last one counts
        _entry_types(path, name, shadowed)
    data_start = 8 + n
    data_size = size - data_start
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if len(name) > MAX_NAME_CHARS:
            # No module path is this long; refusing it bounds every message and match that
            # quotes a tensor or layer name.
            raise CorruptFileError(f"{path}: header entry {shown(name, 60)}: a tensor name of "
                                   f"{len(name)} characters; accepted: at most {MAX_NAME_CHARS}")
        dtype, shape, begin, end = _parse_entry(path, name, entry)
        if end > data_size:
            raise _entry_error(path, name, f"needs bytes [{begin}, {end}) of the data section "
                               f"but the file holds only {data_size} (truncated file)")
        tensors[name] = TensorInfo(name, path, dtype, shape, begin, end, data_start, roots, ident)
    # The tensors must tile the data section: no holes, no overlaps, nothing after the
    # last one (the safetensors library rejects such files as incomplete).
    cursor = 0
    for info in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if info.begin != cursor:
            what = "overlaps the previous tensor" if info.begin < cursor else "leaves a hole before it"
            raise _entry_error(path, info.name, f"data_offsets [{info.begin}, {info.end}) {what} "
                               f"(expected begin {cursor})")
        cursor = info.end
    if cursor != data_size:
        raise CorruptFileError(
            f"{path}: tensors cover {cursor} bytes of a {data_size}-byte data section "
            "(trailing bytes or a wrong header)")
    return tensors, metadata


def read_tensor(info: TensorInfo) -> torch.Tensor:
    """Read one tensor's bytes (only those) from the file whose header was checked.

    The bytes are read through the descriptor `open_file` checked, not by reopening the
    path in another library, so the file read is the file judged; the header parser has
    already proved the byte range lies inside the data section.
    """
    import torch

    dtype = info.torch_dtype
    if dtype is None:
        raise CorruptFileError(f"{info.file}: tensor {info.name!r} has dtype {info.dtype}, "
                               "which torch cannot hold")
    if sys.byteorder != "little":
        raise CorruptFileError(f"{info.file}: safetensors data is little-endian; this "
                               f"{sys.byteorder}-endian host would read it wrongly")
    from workbench.memory import check_fits

    # Refused before the buffer exists: under overcommit a huge one is granted, then its
    # pages fill as the file is read until the kernel kills the process.
    check_fits(info.nbytes, f"{info.file}: tensor {info.name!r} ({info.dtype} {list(info.shape)})",
               "accepted: layers that fit in the memory available", UnsupportedLayerError)
    try:
        with _open_checked(info) as f:
            f.seek(info.data_start + info.begin)
            raw = bytearray(info.nbytes)
            got = f.readinto(raw)
    except MemoryError:
        raise UnsupportedLayerError(
            f"{info.file}: tensor {info.name!r} ({info.dtype} {list(info.shape)}) needs "
            f"{info.nbytes / 2**30:.2f} GiB, which this process cannot allocate; accepted: "
            "layers that fit in the memory available") from None
    except OSError as exc:
        raise CorruptFileError(f"{info.file}: tensor {info.name!r} cannot be read: "
                               f"{exc.strerror or exc}") from None
    if got != info.nbytes:
        raise CorruptFileError(f"{info.file}: tensor {info.name!r} is cut short (truncated file)")
    if not raw:
        return torch.empty(info.shape, dtype=dtype)
    return torch.frombuffer(raw, dtype=dtype).reshape(info.shape)


def read_small_ints(info: TensorInfo, limit: int = 4096) -> tuple[int, ...]:
    """Read a tiny integer metadata tensor (e.g. `weight_shape`) by seeking to its bytes."""
    code = _INT_CODES.get(info.dtype)
    if info.nbytes > limit or code is None:
        raise CorruptFileError(f"{info.file}: tensor {info.name!r} ({info.dtype} {list(info.shape)}) "
                               f"is not a small integer metadata tensor (at most {limit} bytes)")
    with _open_checked(info) as f:
        f.seek(info.data_start + info.begin)
        raw = f.read(info.nbytes)
    if len(raw) != info.nbytes:
        raise CorruptFileError(f"{info.file}: tensor {info.name!r} is cut short (truncated file)")
    return struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw)
