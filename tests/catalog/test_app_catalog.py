"""Bad input to the Streamlit app (AppTest): links, the directory box, uploads.

Every row runs the real app. A refused link value is a warning and its default, never a
traceback; a bad path or upload is one named error, in the main area only; and after each
bad input the app still loads the bundled sample.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

SURFACE = "app"
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_models" / "ct-w4a8-int-g128"
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")


def _app(query: dict | None = None, state: dict | None = None, page: str | None = None) -> AppTest:
    os.environ["WORKBENCH_UI_RAISE"] = "1"  # a bug raises (AppTest records it), not a red box
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    for k, v in (state or {}).items():
        at.session_state[k] = v
    at.run()
    if page:
        at.switch_page(f"workbench/ui/pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _read(elements) -> list[str]:
    return [_ESCAPED.sub(r"\1", str(e.value)).replace("\u2060", "") for e in elements]


def _still_loads_the_sample(at: AppTest) -> None:
    at.session_state["layer.source"] = "sample"
    at.session_state["layer.sample"] = SAMPLE.name
    at.switch_page("workbench/ui/pages/layer.py").run()
    assert not at.exception and not at.error, _read(at.error)
    assert any(f"Loaded **{SAMPLE.name} / " in s for s in _read(at.success))


def _link(query: dict, gist: str, *, check=None):
    """A link that must give a warning matching `gist` (in the sidebar), and the defaults."""
    def run():
        at = _app(query)
        warnings = _read(at.sidebar.warning)
        assert len(warnings) == 1 and re.search(gist, warnings[0]), warnings
        assert not at.error, _read(at.error)
        if check:
            check(at)
        _still_loads_the_sample(at)
    return run


def _field(state: dict, gist: str):
    """Values typed into the Layer page: exactly one named error, in the main area."""
    def run():
        at = _app(state=state, page="layer")
        assert not at.sidebar.error, _read(at.sidebar.error)
        errors = _read(at.main.error)
        assert len(errors) == 1 and re.search(gist, errors[0]), errors
        _still_loads_the_sample(at)
    return run


def _preset_is(name: str):
    def check(at):
        assert at.session_state["pf.preset"] == name
        assert at.session_state["pf.capability"] == at.session_state["pf.fields.base"]["capability"]
    return check


def _link_ok(query: dict, check):
    """A link the app takes: no warning, and `check` holds."""
    def run():
        at = _app(query)
        assert not at.sidebar.warning, _read(at.sidebar.warning)
        check(at)
    return run


def _state_is(key: str, value):
    def check(at):
        assert at.session_state[key] == value, at.session_state[key]
    return check


def _upload(files: list[tuple[str, bytes]], gist: str, *, refused: bool = True):
    """An upload: one named error; refused (by the checks or the reader), it never becomes the layer."""
    def run():
        at = _app(state={"layer.source": "upload"}, page="layer")
        at.file_uploader(key="w:upload").set_value(
            [(n, d, "application/octet-stream") for n, d in files]).run()
        assert not at.exception
        errors = _read(at.error)
        assert len(errors) == 1 and re.search(gist, errors[0]), errors
        assert bool(at.session_state["layer.upload_dir"]) is not refused
        _still_loads_the_sample(at)
    return run


_CFG = (SAMPLE / "config.json").read_bytes()

CATALOG = [
    ("link ?platform=bogus", "warning: platform='bogus' ignored, not a platform preset (accepted listed); "
     "platform stays this machine", _link({"platform": "bogus"}, r"platform='bogus' ignored: not a platform "
                                           r"preset; accepted: host, ", check=_preset_is("host"))),
    ('link ?pf={"capability":"x"}', "warning: pf ignored with the platform reader's message; no field edited",
     _link({"pf": '{"capability":"x"}'}, r"link parameter pf=.* ignored: .*capability",
           check=_preset_is("host"))),
    ("link ?pf=not-json", "warning: pf ignored, not JSON", _link({"pf": "{capability"}, r"ignored: not JSON")),
    ("link ?pf=[1,2] (a list)", "warning: pf ignored, a JSON list, not an object",
     _link({"pf": "[1,2]"}, r"a JSON list, not an object")),
    ('link ?pf={"bogus_field":1}', "warning: unknown field(s) bogus_field; accepted fields listed",
     _link({"pf": '{"bogus_field":1}'}, r"unknown field\(s\) bogus_field; accepted: device")),
    ('link ?env={"VLLM_CPU_INT4_W4A8":"maybe"}', "warning: env ignored, not an integer (accepted: 0 or 1); "
     "knob stays at vLLM's default", _link({"env": '{"VLLM_CPU_INT4_W4A8":"maybe"}'},
                                           r"accepted: 0 or 1",
                                           check=_state_is("env.VLLM_CPU_INT4_W4A8", "1"))),
    ('link ?env={"PATH":"/x"}', "warning: env ignored, unknown key(s) PATH",
     _link({"env": '{"PATH":"/x"}'}, r"unknown key\(s\) PATH")),
    ("link ?tp=0", "warning: tp out of range (accepted 1 to 64); TP stays 1",
     _link({"tp": "0"}, r"tp='0' ignored: out of range; accepted: 1 to 64", check=_state_is("tp.size", 1))),
    ("link ?tp=two", "warning: tp not an integer", _link({"tp": "two"}, r"not an integer")),
    ("link ?step=99 (tour)", "warning: step out of range (accepted 1 to 6); tour opens at step 1",
     _link({"step": "99"}, r"step='99' ignored: out of range; accepted: 1 to 6",
           check=_state_is("tour.step", 0))),
    ("link ?m=1,x", "warning: m ignored with the token-count message ('x'; accepted: an integer from 1 to 16384)",
     _link({"m": "1,x"}, r"'x'; accepted: an integer from 1 to 16384", check=_state_is("kern.m_list", "1,4,16,64,256"))),
    ("link ?m=1,,16", "warning: m ignored: has an empty entry (it was read as 1,16)",
     _link({"m": "1,,16"}, r"has an empty entry \(entry 2\)", check=_state_is("kern.m_list", "1,4,16,64,256"))),
    ("link ?source=pickle", "warning: not a layer source; accepted: sample, directory, upload, ...",
     _link({"source": "pickle"}, r"not a layer source; accepted: sample, directory",
           check=_state_is("layer.source", "sample"))),
    ("link ?sample=../../etc", "warning: not a bundled sample (accepted listed)",
     _link({"sample": "../../etc"}, r"not a bundled sample; accepted: ")),
    ("link ?model=bogus", "warning: not a model preset (accepted listed)",
     _link({"model": "bogus"}, r"not a model preset; accepted: ")),
    ("link ?parallel=diagonal", "warning: not a parallel style; accepted: auto, column, row",
     _link({"parallel": "diagonal"}, r"not a parallel style; accepted: auto, column, row")),
    ("link ?layer= 5000 characters", "warning: longer than 2000 characters (value shown shortened)",
     _link({"layer": "a" * 5000}, r"5000 characters\)' ignored: longer than 2000 characters")),
    ("directory box: a path with a NUL byte", "InvalidInputError: contains a NUL byte; "
     "accepted: a path without NUL bytes (main area only)",
     _field({"layer.source": "directory", "layer.dir": "/tmp/a\0b"}, r"contains a NUL byte; accepted: a path without")),
    ("directory box: a 5000-character path", "InvalidInputError: 5000 characters long; accepted: at most 4096",
     _field({"layer.source": "directory", "layer.dir": "/" + "a" * 4999},
            r"the path is 5000 characters long; accepted: at most 4096")),
    ("directory box: a path outside the allowed roots", "PathNotAllowedError: not under an allowed root; "
     "roots listed", _field({"layer.source": "directory", "layer.dir": "/etc"}, r"is not under an allowed root")),
    ("upload: a pickle renamed model.safetensors", "named error quoting model.safetensors (not a safetensors "
     "header); nothing unpickled", _upload([("config.json", _CFG), ("model.safetensors", b"\x80\x04K\x01.")],
                                          r"model\.safetensors")),
    ("upload: config.json twice", "UploadRefusedError: config.json uploaded more than once",
     _upload([("config.json", _CFG), ("config.json", b"{}"),
              ("model.safetensors", (SAMPLE / "model.safetensors").read_bytes())],
             r"^upload: config\.json uploaded more than once")),
    ("upload: safetensors without config.json", "UploadRefusedError: config.json is missing",
     _upload([("model.safetensors", (SAMPLE / "model.safetensors").read_bytes())], r"config.json is missing")),
    # A preset name as the CLI reads it: aliases, any letter case.
    ("link ?platform=H200 (upper case; the CLI takes it)", "ok: preset sm90-h200, no warning (was refused)",
     _link_ok({"platform": "H200"}, _preset_is("sm90-h200"))),
    ("link ?compare=SM90-H100", "ok: compare preset sm90-h100, no warning (was refused)",
     _link_ok({"compare": "SM90-H100"}, _state_is("pf.compare", "sm90-h100"))),
    # A client names its files as it likes: these failed the write (ValueError, ENAMETOOLONG).
    *[(f"upload: a safetensors file named {label}", "UploadRefusedError: file name refused; accepted: a "
       "printable name of at most 255 bytes (was an internal error)",
       _upload([("config.json", _CFG), (name, (SAMPLE / "model.safetensors").read_bytes())],
               r"^upload: file name .* refused; accepted: a printable name of at most 255 bytes"))
      for label, name in (("'a<NUL>.safetensors'", "a\x00.safetensors"),
                          ("with 300 characters", "m" * 288 + ".safetensors"),
                          ("'x<ESC>[2J.safetensors'", "x\x1b[2J.safetensors"))],
]


@pytest.mark.parametrize("row", CATALOG, ids=[r[0] for r in CATALOG])
def test_app_bad_input(row):
    row[2]()
