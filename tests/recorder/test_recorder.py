"""The recorded fixtures: their format, the workbench's agreement with them, and (with the
sdist at hand) that re-recording reproduces them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import dispatch
from workbench.dispatch.versions import available
from workbench.recorder import (CASE_KEYS, FIXED_FILES, GENERATED_LEVELS, PROVENANCE_FILE,
                                fixture_dir, read_cases)

ROOT_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURES = fixture_dir(ROOT_FIXTURES, dispatch.DEFAULT_VERSION)
VERSIONS = available()
PLATFORM_KEYS = {"device", "capability", "cpu_arch", "gfx", "zen", "amx", "packages", "torch_ops"}
LAYER_KEYS = {"quantization", "method", "inner", "error", "error_type", "kernel"}
EXPECTED_KEYS = {"gptq": LAYER_KEYS, "awq": LAYER_KEYS, "inc": LAYER_KEYS,
                 "config-gate": {"quantization", "error", "error_type"},
                 "runtime": {"route_error", "kernel", "kernel_act_type", "fails_at", "error",
                             "error_type", "load_op", "layer_state", "isa_hint", "activation"}}
KERNEL_KEYS = {"mp_config", "selected", "reasons", "error", "error_type"}


def _level_cases(level: str, version: str = dispatch.DEFAULT_VERSION) -> list[dict]:
    return read_cases(fixture_dir(ROOT_FIXTURES, version) / GENERATED_LEVELS[level][0])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("level", sorted(GENERATED_LEVELS))
def test_generated_fixture_rows_are_in_the_oracle_format(level, version):
    cases = _level_cases(level, version)
    from workbench.recorder.cases import FIXED
    assert len(cases) == GENERATED_LEVELS[level][1] + len(FIXED.get(level, []))
    assert len({c["id"] for c in cases}) == len(cases)
    for c in cases:
        assert tuple(c) == CASE_KEYS and c["level"] == level
        assert set(c["platform"]) - {"ark_backend_lib", "triton"} == PLATFORM_KEYS
        assert set(c["expected"]) == EXPECTED_KEYS[level]
        kernel = c["expected"].get("kernel")
        if isinstance(kernel, dict):
            assert KERNEL_KEYS <= set(kernel)
            assert (kernel["mp_config"] is None) == ("candidates" not in kernel)
        # an error is vLLM's exception: a type name and its text, together or not at all
        assert (c["expected"]["error"] is None) == (c["expected"]["error_type"] is None)


def test_new_levels_hold_over_1200_cases_and_every_outcome():
    cases = [c for level in GENERATED_LEVELS for c in _level_cases(level)]
    assert len(cases) >= 1200
    types = {c["expected"]["error_type"] for c in cases}
    assert {None, "ValueError", "NotImplementedError"} <= types


@pytest.mark.parametrize("version", VERSIONS)
def test_provenance_names_every_stub(version):
    prov = json.loads((fixture_dir(ROOT_FIXTURES, version) / PROVENANCE_FILE).read_text())
    assert prov["vllm_version"] == version
    assert "vllm._C" in prov["stubbed_compiled"] and "conch" in prov["stubbed_optional_packages"]
    # humming runs for real (its schemas decide the activation), at the version vLLM pins
    assert prov["real_optional_packages"] == {"humming": "0.1.19"}
    assert prov["stubbed_hardware_queries"]
    assert sum(prov["files"].values()) >= 1200 + 2786


# The workbench's agreement with these cases, per level with a floor each, is
# tests/dispatch/test_oracle_levels.py (and tests/dispatch/test_oracle.py for mp and scheme).


# -- with the sdist: re-recording reproduces the committed fixtures --------------------------
SRC = os.environ.get("WORKBENCH_VLLM_SRC")


def _src_version() -> str | None:
    from workbench.recorder.sdist import RecorderError, sdist_version
    try:
        return sdist_version(Path(SRC)) if SRC else None
    except RecorderError:
        return None


# The --against-vllm checks trace with the default rule set: they need that release's sdist.
needs_default_sdist = pytest.mark.skipif(
    _src_version() != dispatch.DEFAULT_VERSION,
    reason=f"WORKBENCH_VLLM_SRC is not an unpacked vLLM {dispatch.DEFAULT_VERSION} sdist")


@pytest.mark.skipif(not SRC, reason="WORKBENCH_VLLM_SRC (an unpacked vLLM sdist) is not set")
def test_re_recording_reproduces_a_sample_of_every_fixture_file():
    from workbench.recorder import record_all
    files = list(FIXED_FILES) + [name for name, _ in GENERATED_LEVELS.values()]
    from workbench.recorder.sdist import sdist_version
    folder = fixture_dir(ROOT_FIXTURES, sdist_version(Path(SRC)))  # that release's fixtures
    sample = [c for name in files for c in read_cases(folder / name)[::97]]
    committed = [c["expected"] for c in sample]
    record_all(SRC, sample)
    assert [c["expected"] for c in sample] == committed


# -- trace --against-vllm ----------------------------------------------------------------------
MP = ('{"weight_type": "int4", "act_type": "bfloat16", "group_size": 128, "zero_points": false, '
      '"out_type": null, "full_weight_shape": [4096, 4096], '
      '"partition_weight_shape": [4096, 4096]}')


@pytest.mark.parametrize("argv,message", [
    (["--mp-config", MP, "--against-vllm", "{tmp}"],
     "no PKG-INFO; expected an unpacked vLLM sdist"),
    (["--mp-config", MP, "--against-vllm", "{tmp}/nowhere"], "not a directory"),
    (["--batch", "-", "--against-vllm", "{tmp}"], "takes one case, not --batch"),
])
def test_against_vllm_refuses_what_it_cannot_compare(argv, message, tmp_path, capsys):
    from workbench.__main__ import main
    code = main(["trace"] + [a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and message in capsys.readouterr().err


def test_against_vllm_refuses_an_sdist_of_another_version(tmp_path, capsys):
    from workbench.__main__ import main
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 99.0.0\n")
    assert main(["trace", "--mp-config", MP, "--against-vllm", str(tmp_path)]) == 2
    assert (f"that sdist is vLLM 99.0.0, the trace used the {dispatch.DEFAULT_VERSION} rules"
            in capsys.readouterr().err)


@needs_default_sdist
def test_against_vllm_exits_0_when_the_workbench_says_what_vllm_says(capsys):
    from workbench.__main__ import main
    assert main(["trace", "--platform", "x86-avx512", "--mp-config", MP,
                 "--against-vllm", SRC]) == 0
    assert "same as vLLM" in capsys.readouterr().out
    # A GPTQ g256 layer on an H200: the workbench and vLLM both refuse it in the same words.
    assert main(["trace", "--platform", "sm90-h200", "--gptq",
                 '{"bits": 4, "group_size": 256, "desc_act": false, "sym": true}',
                 "--against-vllm", SRC]) == 0


@needs_default_sdist
def test_against_vllm_names_the_fields_that_differ():
    """The x86 trace held against vLLM on an H200: the kernel and the reasons differ."""
    from workbench.platforms import resolve_platform
    from workbench.recorder.against import compare
    mp = json.loads(MP)
    trace = dispatch.trace_mp(mp, "x86-avx512")
    _, diffs = compare("mp_config", mp, resolve_platform("sm90-h200"), {}, trace, SRC)
    assert [d.field for d in diffs] == ["selected", "reasons"]
    assert (diffs[0].workbench, diffs[0].vllm) == ("Dynamic4bitLinearKernel",
                                                   "HummingLinearKernel")


# -- what the tree or this Python lacks is named, not recorded as vLLM's answer ----------------
def _trace_in_a_fresh_python(src: str, prelude: str = "") -> subprocess.CompletedProcess:
    """`trace --mp-config ... --against-vllm src` in its own interpreter (one vLLM per process)."""
    code = (f"{prelude}\nimport sys\nfrom workbench.__main__ import main\n"
            f"sys.exit(main(['trace', '--mp-config', {MP!r}, '--against-vllm', {src!r}]))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def _sdist_copy(tmp_path: Path, files: dict[str, str]) -> str:
    """A tree holding the pinned PKG-INFO and only `files` (path -> text)."""
    tmp_path.mkdir()
    (tmp_path / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: vllm\n"
                                       f"Version: {dispatch.DEFAULT_VERSION}\n")
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return str(tmp_path)


def test_against_vllm_names_the_file_an_incomplete_sdist_lacks(tmp_path):
    empty = _sdist_copy(tmp_path / "a", {})
    run = _trace_in_a_fresh_python(empty)
    assert run.returncode == 2, run.stderr
    assert "incomplete: no vllm/__init__.py beside its PKG-INFO" in run.stderr
    # vllm/__init__.py alone: its first import (the version module) is missing
    init = ("from .version import __version__\n" if not SRC
            else (Path(SRC) / "vllm" / "__init__.py").read_text())
    partial = _sdist_copy(tmp_path / "b", {"vllm/__init__.py": init})
    run = _trace_in_a_fresh_python(partial)
    assert run.returncode == 2, run.stderr
    assert ("incomplete: module vllm.version (vllm/version.py or vllm/version/__init__.py) is "
            "missing; unpack the whole sdist") in run.stderr
    assert "internal error" not in run.stderr
    cut = _sdist_copy(tmp_path / "c", {"vllm/__init__.py": init,
                                       "vllm/version.py": "__version__ = (\n"})
    run = _trace_in_a_fresh_python(cut)
    assert run.returncode == 2 and "vllm/version.py line 1 does not parse" in run.stderr, run.stderr


@needs_default_sdist
def test_against_vllm_names_an_import_dependency_this_python_lacks():
    # As in a venv without vLLM's requirements: `import cbor2` fails (vllm/utils/hashing.py:12).
    run = _trace_in_a_fresh_python(SRC, "import sys; sys.modules['cbor2'] = None")
    assert run.returncode == 2, run.stderr
    assert "imports 'cbor2', which is not installed in this Python" in run.stderr
    assert "internal error" not in run.stderr


# -- the linear method and Humming's activation are compared -----------------------------------
GPTQ = {"bits": 4, "group_size": 128, "desc_act": False, "sym": True}


@needs_default_sdist
def test_against_vllm_compares_the_linear_method():
    """A trace that selects a kernel, held against a layer vLLM leaves unquantized (a GPTQ
    `dynamic` exclusion): the linear method differs, though no error and no MP config do."""
    from workbench.platforms import resolve_platform
    from workbench.recorder.against import compare
    trace = dispatch.trace_gptq(GPTQ, "sm90-h200")
    assert trace.selected and trace.method != "UnquantizedLinearMethod"
    excluded = {**GPTQ, "dynamic": {r"-:model\.layers\.[[:digit:]]+\.mlp\.down_proj": {}}}
    expected, diffs = compare("gptq", excluded, resolve_platform("sm90-h200"), {}, trace, SRC)
    assert expected["method"] == "UnquantizedLinearMethod"
    method = [d for d in diffs if d.field == "method"]
    assert method and (method[0].workbench, method[0].vllm) == (trace.method,
                                                                "UnquantizedLinearMethod")
    # the workbench's own trace of that layer agrees with vLLM field by field
    own = dispatch.trace_gptq(excluded, "sm90-h200")
    assert compare("gptq", excluded, resolve_platform("sm90-h200"), {}, own, SRC)[1] == []


HUMMING_W4A8 = {"format": "pack-quantized",
                "weights": {"num_bits": 4, "type": "int", "symmetric": True, "dynamic": False,
                            "strategy": "channel", "group_size": None},
                "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                                      "dynamic": True, "strategy": "token", "group_size": None},
                "output_activations": None, "layer_name": "model.layers.0.mlp.down_proj",
                "in_features": 4096, "out_features": 4096, "params_dtype": "bfloat16"}


def _humming_diffs(capability: int) -> tuple[str, list[list]]:
    """The SM 9.0 trace of HUMMING_W4A8 against vLLM on `capability`, in a fresh interpreter:
    vLLM's humming facade binds the package at its first import, so a process that imported
    vLLM for a platform without Humming cannot answer for one with it."""
    code = f"""
import json
from workbench import dispatch
from workbench.platforms import resolve_platform
from workbench.recorder.against import compare
env = {{"linear_backend": "humming"}}
trace = dispatch.trace_scheme({HUMMING_W4A8!r}, {{"device": "cuda", "capability": 90,
                              "packages": ["humming"]}}, env)
assert trace.selected == "HummingLinearKernel", trace.selected
expected, diffs = compare("scheme", {HUMMING_W4A8!r}, resolve_platform({{"device": "cuda",
                          "capability": {capability}, "packages": ["humming"]}}), env, trace, {SRC!r})
print(json.dumps([trace.runtime_detail.activation, expected["runtime"]["activation"],
                  [[d.field, d.workbench, d.vllm] for d in diffs]]))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    mine, vllms, diffs = json.loads(run.stdout.splitlines()[-1])
    return mine, vllms, diffs


@needs_default_sdist
def test_against_vllm_compares_hummings_activation():
    """Humming's input schema runs int8 activations on SM 9.0 and falls back to bf16 on SM
    10.0 (the recorded runtime cases): the SM 9.0 trace held against SM 10.0 differs there."""
    mine, vllms, diffs = _humming_diffs(90)
    assert (mine, vllms, diffs) == ("int8", "int8", [])
    _, vllms, diffs = _humming_diffs(100)
    assert vllms == "bf16" and ["runtime.activation", "int8", "bf16"] in diffs


@pytest.mark.skipif(not SRC, reason="WORKBENCH_VLLM_SRC (an unpacked vLLM sdist) is not set")
def test_mxfp8_loop_selects_what_vllms_init_mxfp8_linear_kernel_selects():
    """The recorded INC MXFP8 cases hold the scheme, method and errors; the kernel their
    MXFP8 loop picks is no recorded field, so it is asked of vLLM here, case by case
    (the cases without Humming: the humming facade binds the package at its first import)."""
    from workbench.recorder import open_vllm
    from workbench.recorder.cases import FIXED
    cases = [c for c in FIXED["inc"] if c["input"]["in_features"] % 32 == 0
             and not c["platform"]["packages"]]
    rec, v = open_vllm(SRC)
    for c in cases:
        i = c["input"]
        with v.on(c["platform"], c["env"], i["params_dtype"]):
            try:
                got = type(v.linear.init_mxfp8_linear_kernel(
                    weight_shape=(i["out_features"], i["in_features"]))).__name__
            except ValueError as exc:
                got = str(exc)
        t = dispatch.trace_inc(i, c["platform"], c["env"], rules=_src_version())  # its rules
        assert (t.selected or t.error) == got, c["id"]
