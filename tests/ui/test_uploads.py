"""Uploads: a private per-server folder, atomic verified writes, removed with the session and the server."""
from __future__ import annotations

import gc
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

from workbench.ui.state import REPO_ROOT

CFG = ("config.json", b"{}")


def test_streamlit_refuses_what_the_app_would_refuse():
    # One limit: Streamlit's own (checked before a file is buffered) is the app's.
    from workbench.ui import loaders

    cfg = tomllib.loads((REPO_ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["maxUploadSize"] == loaders.MAX_UPLOAD_MB
    assert loaders.MAX_UPLOAD_BYTES == loaders.MAX_UPLOAD_MB * 2**20


def test_the_upload_root_is_private_and_this_servers_own():
    from workbench.ui import loaders

    root = loaders.upload_root()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert root.name.startswith(f"w4a8-workbench-uploads-{os.getpid()}-")
    assert loaders.upload_root() == root  # one per server process


def test_a_folder_already_there_is_replaced_not_trusted(tmp_path):
    from workbench.ui import loaders

    files = [CFG, ("model.safetensors", b"the upload")]
    planted = tmp_path / loaders._digest(files)[:24]
    planted.mkdir()
    (planted / "model.safetensors").write_bytes(b"planted")
    (planted / "extra.safetensors").write_bytes(b"planted")
    out = loaders.save_upload(files, tmp_path)
    assert out == planted
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert (out / "model.safetensors").read_bytes() == b"the upload"
    # written under a temporary name, then renamed: no staging folder is left behind
    assert [p.name for p in tmp_path.iterdir()] == [planted.name]


def test_the_server_removes_its_uploads_when_it_stops():
    probe = ("from workbench.ui import loaders; r = loaders.upload_root(); "
             "(r / 'x.safetensors').write_bytes(b'x'); print(r)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    root = Path(out.stdout.strip().splitlines()[-1])
    assert root.name.startswith("w4a8-workbench-uploads-") and not root.exists()


def test_a_session_removes_its_uploads_when_it_ends(ui):
    sample = ui.ROOT / "sample_models" / "ct-w4a8-int-g128"
    at = ui.open_app("layer", state={"layer.source": "upload"})
    at.file_uploader(key="w:upload").set_value([
        ("config.json", (sample / "config.json").read_bytes(), "application/json"),
        ("model.safetensors", (sample / "model.safetensors").read_bytes(), "application/octet-stream"),
    ]).run()
    assert not ui.errors(at)
    folder = Path(at.session_state["layer.upload_dir"])
    session_dir = folder.parent
    assert folder.is_dir() and session_dir.parent.name.startswith("w4a8-workbench-uploads-")
    assert stat.S_IMODE(session_dir.stat().st_mode) == 0o700
    del at
    gc.collect()
    assert not session_dir.exists()
