"""The header reader refuses what the safetensors library refuses (its __metadata__ rules)."""
from __future__ import annotations

import json
import struct

import pytest

safetensors = pytest.importorskip("safetensors")

from workbench.checkpoints.errors import CorruptFileError  # noqa: E402
from workbench.checkpoints.safetensors_file import read_header  # noqa: E402


def _file(tmp_path, metadata):
    header = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    if metadata is not ...:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 8)
    return path


@pytest.mark.parametrize("metadata", [[], "", 5, {"a": 1}, {"a": None}, None, {}, {"a": "b"}, ...],
                         ids=repr)
def test_metadata_refused_as_the_library_refuses_it(tmp_path, metadata):
    path = _file(tmp_path, metadata)
    try:
        safetensors.safe_open(str(path), "numpy").keys()
        library_ok = True
    except Exception:  # noqa: BLE001 - the library's own error types vary by version
        library_ok = False
    if library_ok:
        read_header(path)
    else:
        with pytest.raises(CorruptFileError, match="__metadata__"):
            read_header(path)


# Header texts where Python's json module and the library's serde_json disagree, and their
# neighbours on the other side of each line: every one must be judged as the library judges it.
_W = '"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}'


def _entry(extra: str) -> str:
    return '{"w": {"dtype": "F32", ' + extra + '"shape": [2], "data_offsets": [0, 8]}}'


_TEXTS = {
    "metadata twice": '{' + _W + ', "__metadata__": {"a": "b"}, "__metadata__": {"a": "c"}}',
    "metadata null, then again": '{' + _W + ', "__metadata__": null, "__metadata__": {}}',
    "metadata twice, one key escaped": '{' + _W + ', "__metadata__": {}, "\\u005f_metadata__": {}}',
    "metadata key twice": '{' + _W + ', "__metadata__": {"a": "b", "a": "c"}}',
    "metadata key twice, first a number": '{' + _W + ', "__metadata__": {"a": 1, "a": "c"}}',
    "dtype twice": '{"w": {"dtype": "I8", "dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
    "shape twice": '{"w": {"dtype": "F32", "shape": [8], "shape": [2], "data_offsets": [0, 8]}}',
    "unknown field twice": _entry('"x": 1, "x": 2, '),
    "tensor twice": '{' + _W + ', ' + _W + '}',
    "tensor twice, first dtype Q4": '{"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}, ' + _W + '}',
    "tensor twice, first lacks shape": '{"w": {"dtype": "F32"}, ' + _W + '}',
    "tensor twice, first a number": '{"w": 5, ' + _W + '}',
    "tensor twice, first spans 9 bytes": '{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 9]}, ' + _W + '}',
    "lone high surrogate in a name": '{"w\\ud800": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
    "lone low surrogate in metadata": '{' + _W + ', "__metadata__": {"a": "\\udc00"}}',
    "lone surrogate in an unknown field": _entry('"x": "\\ud800", '),
    "surrogate pair": '{"w\\ud83d\\ude00": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
    "escaped backslash then ud800": '{"w\\\\ud800": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
    "NaN in an unknown field": _entry('"x": NaN, '),
    "-Infinity in an unknown field": _entry('"x": -Infinity, '),
    "1e400 in an unknown field": _entry('"x": 1e400, '),
    "1.8e308 in an unknown field": _entry('"x": 1.8e308, '),
    "1e300 in an unknown field": _entry('"x": 1e300, '),
    "1e-400 in an unknown field": _entry('"x": 1e-400, '),
    "-0.0 in an unknown field": _entry('"x": -0.0, '),
    "2^64 in an unknown field": _entry('"x": 18446744073709551616, '),
    "-2^63-1 in an unknown field": _entry('"x": -9223372036854775809, '),
    "40 digits in an unknown field": _entry('"x": ' + "9" * 40 + ', '),
    "4400 digits in an unknown field": _entry('"x": ' + "9" * 4400 + ', '),
    "offset -0": '{"w": {"dtype": "F32", "shape": [2], "data_offsets": [-0, 8]}}',
    "shape 2.0": '{"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}',
    "shape null": '{"w": {"dtype": "F32", "shape": null, "data_offsets": [0, 8]}}',
    "shape u64 max, 0": '{"z": {"dtype": "F32", "shape": [18446744073709551615, 0], "data_offsets": [0, 0]}, ' + _W + '}',
    "shape 2^64, 0": '{"z": {"dtype": "F32", "shape": [18446744073709551616, 0], "data_offsets": [0, 0]}, ' + _W + '}',
    "shape 2^32, 2^32, 0": '{"z": {"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]}, ' + _W + '}',
    "shape 2^62, 0": '{"z": {"dtype": "F32", "shape": [4611686018427387904, 0], "data_offsets": [0, 0]}, ' + _W + '}',
    "raw control character in a name": '{"w\x01": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
    "U+2028 in a name": '{"w\u2028": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}',
    "trailing newline and tab": '{' + _W + '}\n\t',
    "trailing form feed": '{' + _W + '}\x0c',
    "trailing NBSP": '{' + _W + '}\u00a0',
    "top-level number": '{' + _W + ', "x": 5}',
    "dtype with a space": '{"w": {"dtype": "F32 ", "shape": [2], "data_offsets": [0, 8]}}',
    **{f"unknown field nested {k} deep": _entry('"x": ' + "[" * k + "]" * k + ', ')
       for k in (124, 125, 126, 127, 200)},
    **{f"top-level value nested {k} deep": '{' + _W + ', "__metadata__": ' + "[" * k + "]" * k + '}'
       for k in (126, 127, 128)},
}


@pytest.mark.parametrize("label", sorted(_TEXTS))
def test_header_text_judged_as_the_library_judges_it(tmp_path, label):
    raw = _TEXTS[label].encode("utf-8", "surrogatepass")
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 8)
    try:
        with safetensors.safe_open(str(path), "numpy") as f:
            expected = sorted(f.keys())
    except Exception:  # noqa: BLE001 - the library's own error types vary by version
        with pytest.raises(CorruptFileError):
            read_header(path)
        return
    tensors, _ = read_header(path)
    assert sorted(tensors) == expected
