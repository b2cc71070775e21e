"""Bad input to the recorder (`python -m workbench.recorder`) and `trace --against-vllm`.

None of these rows needs a vLLM sdist: each is refused before vLLM would be imported.
"""
from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

import pytest

from workbench import dispatch
from workbench.__main__ import main as workbench_main
from workbench.recorder.__main__ import main as recorder_main

SURFACE = "recorder"
MP = ('{"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": false, '
      '"out_type": null, "full_weight_shape": [4096, 4096], '
      '"partition_weight_shape": [4096, 4096]}')


def _folder(pkg_info: str | None = None) -> str:
    d = Path(tempfile.mkdtemp())
    if pkg_info is not None:
        (d / "PKG-INFO").write_text(pkg_info)
    return str(d)


def _run(main, argv, code: int, needle: str):
    def run():
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            got = main(argv() if callable(argv) else argv)
        assert got == code and needle in err.getvalue(), (got, err.getvalue())
    return run


CATALOG = [
    ("--vllm-src /nonexistent", "RecorderError: not a directory",
     _run(recorder_main, ["--vllm-src", "/nonexistent/vllm", "--out", "/tmp"], 2,
          "--vllm-src /nonexistent/vllm: not a directory")),
    ("--vllm-src a folder without PKG-INFO", "RecorderError: expected an unpacked vLLM sdist",
     _run(recorder_main, lambda: ["--vllm-src", _folder(), "--out", _folder()], 2,
          "no PKG-INFO; expected an unpacked vLLM sdist")),
    ("--vllm-src whose PKG-INFO has no Version", "RecorderError: PKG-INFO has no Version line",
     _run(recorder_main, lambda: ["--vllm-src", _folder("Name: vllm\n"), "--out", _folder()], 2,
          "PKG-INFO has no Version line")),
    ("--vllm-src of a version with no rule set (99.0.0)",
     "RecorderError: no rule set to record for; names the versions there are",
     _run(recorder_main, lambda: ["--vllm-src", _folder("Version: 99.0.0\n"), "--out", _folder()],
          2, f"vLLM 99.0.0: no rule set to record for")),
    ("--levels mp,runtim", "RecorderError: unknown level, lists the levels",
     _run(recorder_main, lambda: ["--vllm-src", _folder("Version: 99.0.0\n"), "--levels",
                                  "mp,runtim"], 2, "--levels: unknown level(s) ['runtim']")),
    ("trace --against-vllm with --batch", "InvalidInputError: takes one case, not --batch",
     _run(workbench_main, lambda: ["trace", "--batch", "-", "--against-vllm", _folder()], 2,
          "--against-vllm: takes one case, not --batch")),
    ("trace --against-vllm with --checkpoint",
     "InvalidInputError: takes one case, not --checkpoint",
     _run(workbench_main, lambda: ["trace", "--checkpoint", "sample_models", "--layer", "x",
                                   "--against-vllm", _folder()], 2, "not --checkpoint")),
    ("trace --against-vllm DIR of vLLM 99.0.0", "InvalidInputError: that sdist is another version",
     _run(workbench_main, lambda: ["trace", "--mp-config", MP, "--against-vllm",
                                   _folder("Version: 99.0.0\n")], 2,
          f"that sdist is vLLM 99.0.0, the trace used the {dispatch.DEFAULT_VERSION} rules")),
]


@pytest.mark.parametrize("row", CATALOG, ids=[r[0] for r in CATALOG])
def test_catalog(row):
    row[2]()
