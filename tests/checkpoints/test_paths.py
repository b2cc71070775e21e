"""Allowed roots and regular files: what the readers open, and what they refuse unopened."""
from __future__ import annotations

import os
import shutil
import socket

import pytest

from workbench.checkpoints import CorruptFileError, NotAFileError, OutsideRootsError, open_checkpoint
from workbench.checkpoints.paths import ROOTS_ENV
from workbench.checkpoints.safetensors_file import read_header
from workbench.errors import InvalidInputError
from workbench.layer import WeightPacking

DOWN = "model.layers.0.mlp.down_proj"


def _linked_out(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    (tmp_path / "blobs").mkdir()
    shutil.move(path / "model.safetensors", tmp_path / "blobs" / "x")
    os.symlink(tmp_path / "blobs" / "x", path / "model.safetensors")
    return path


def test_roots_from_the_environment_admit_a_symlinked_cache(tools, tmp_path, monkeypatch):
    # A Hugging Face cache: snapshot files are symlinks into blobs/.
    path = _linked_out(tools, tmp_path)
    monkeypatch.delenv(ROOTS_ENV, raising=False)
    with pytest.raises(OutsideRootsError, match="blobs/x"):
        open_checkpoint(path)
    monkeypatch.setenv(ROOTS_ENV, f"/nonexistent{os.pathsep}{tmp_path / 'blobs'}")
    assert open_checkpoint(path).load_layer(DOWN).out_features == 256


def test_explicit_roots_replace_the_environment(tools, tmp_path, monkeypatch):
    path = _linked_out(tools, tmp_path)
    monkeypatch.setenv(ROOTS_ENV, str(tmp_path / "blobs"))
    with pytest.raises(OutsideRootsError):
        open_checkpoint(path, allowed_roots=())


def test_read_header_alone_stays_in_the_files_directory(tools, tmp_path):
    path = _linked_out(tools, tmp_path)
    with pytest.raises(OutsideRootsError):
        read_header(path / "model.safetensors")
    assert read_header(path / "model.safetensors", (tmp_path,))[0]


def test_file_replaced_after_listing_is_refused(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    ck = open_checkpoint(path)
    other = tools.copy_sample("ct-w4a8-int-channel-asym-input", tmp_path)
    os.replace(other / "model.safetensors", path / "model.safetensors")  # a new inode
    with pytest.raises(CorruptFileError, match="changed since its header was read"):
        ck.load_layer(DOWN)


def test_socket_named_like_weights_is_refused_unopened(tools, tmp_path):
    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    (path / "model.safetensors").unlink()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path / "model.safetensors"))
        with pytest.raises(NotAFileError, match="is a socket"):
            open_checkpoint(path)
    finally:
        sock.close()


def test_layer_inputs_of_the_wrong_kind(tools):
    ck = open_checkpoint(tools.samples / "ct-w4a8-int-g128")
    layer = ck.load_layer(DOWN)
    with pytest.raises(InvalidInputError, match="packing 'zip'; accepted: int8"):
        layer.packed("zip")
    with pytest.raises(InvalidInputError, match="tp_size: True"):
        layer.partition_shape(True)
    import torch

    with pytest.raises(InvalidInputError, match="dequantize dtype torch.bfloat16"):
        layer.dequantize(torch.bfloat16)
    assert layer.packed(WeightPacking.GPTQ).shape == (1024 // 8, 256)



def test_open_walk_follows_no_link_in_any_component(tools, tmp_path):
    # What a directory swapped for a symlink after the realpath check would look like:
    # the walk that opens the checked path refuses the link instead of following it.
    from workbench.checkpoints.paths import _open_no_links

    path = tools.copy_sample("ct-w4a8-int-g128", tmp_path)
    os.symlink(path, tmp_path / "swapped")
    os.close(_open_no_links(path / "config.json"))
    with pytest.raises(OSError):
        _open_no_links(tmp_path / "swapped" / "config.json")
