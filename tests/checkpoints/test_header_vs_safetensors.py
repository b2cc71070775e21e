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
