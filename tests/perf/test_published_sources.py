"""The published points are read as their sources state them, and the GPU families follow
the architecture and the kernel (workbench/perf/published.json, families.py, launch.py)."""
import json
import math

import pytest

from workbench.errors import InvalidInputError
from workbench.perf.families import (FAMILIES, arch_of, family_eta, family_of, point_us,
                                     published_points)
from workbench.perf.launch import cublas_launch
from workbench.perf.predict import SCHEMES, eta_of_point, predict
from workbench.results import write_results


def test_every_point_states_its_source_normalisation_and_copies():
    for p in published_points():
        assert p["source"].startswith("https://"), p
        assert p["normalisation"] and isinstance(p["copies"], int) and p["copies"] >= 1, p
        assert p["family"] in FAMILIES, p


def test_benchmark_machete_copies_are_its_own_formula():
    # vLLM benchmarks/kernels/benchmark_machete.py:122-124: enough int4 weight copies to
    # exceed 2 x 50 MiB, every column of a row timed over the same L copies.
    for p in published_points():
        if p["source"].endswith("/pull/23198"):
            want = math.ceil(2 * 50 * 1024 ** 2 * 8 / (p["k"] * p["n"] * 4))
            assert p["copies"] == want, p
            assert point_us(p, None) == pytest.approx(p["value"] / want)


def test_ideals_are_not_points():
    from workbench.perf.families import PUBLISHED_FILE

    doc = json.loads(PUBLISHED_FILE.read_text())
    assert any("ideal" in d["why"] for d in doc["dropped"])
    assert not any(p["unit"] == "speedup_vs_fp16" and p["part"] == "sm86-a10" for p in doc["points"])


def test_arch_classes():
    assert [arch_of(p) for p in ("sm80-a100", "sm86-a10", "sm89-l40s", "sm90-h100", "sm100-b200",
                                 "sm120-rtx5090", "rocm-mi300x", "rocm-rdna3", "x86-avx2")] == [
        "ampere", "ampere", "ada", "hopper", "blackwell", "blackwell", "cdna", "rdna", "other"]


def test_eta_comes_from_the_parts_class_or_widens_across_classes():
    own = family_eta("w4a8_int8", eta_of_point, part="sm80-a100")
    assert own.arch == "ampere" and own.n_points == 2 and not own.measured
    other = family_eta("w4a8_int8", eta_of_point, part="sm90-h200")
    assert other.arch == "all" and other.spread >= 0.3
    a10 = predict("sm86-a10", "selected", 1, 8192, 8192, -1, scheme="w4a16")
    h100 = predict("sm90-h100", "selected", 1, 8192, 8192, -1, scheme="w4a16")
    # no Ampere point for the W4A16 kernels: a wider band than on the part of the points
    assert a10.high_us / a10.low_us > h100.high_us / h100.low_us
    assert "other architectures" in a10.note


def test_known_slow_kernels_are_slower():
    assert family_of("ExllamaLinearKernel", "bf16") == "w4a16_exllama"
    slow = family_eta("w4a16_exllama", eta_of_point, part="sm90-h100").value
    assert slow == pytest.approx(0.54 * family_eta("w4a16", eta_of_point, part="sm90-h100").value)


def test_measured_records_of_vllms_kernels_replace_published_points(tmp_path):
    recs = [{"path": "vllm_humming", "kernel": "humming", "n": 8192, "k": 8192, "group_size": -1,
             "m": m, "median_us": us, "p20_us": us, "p80_us": us} for m, us in ((1, 12.0), (16, 13.0))]
    f = write_results(tmp_path / "gpu.json", {"platform": "sm90-h200"}, recs)
    got = family_eta("humming", eta_of_point, part="sm90-h200", measured_from=f)
    assert got.measured and got.n_points == 2
    assert not family_eta("machete", eta_of_point, part="sm90-h200", measured_from=f).measured
    pub = family_eta("humming", eta_of_point, part="sm90-h200", measured_from=tmp_path / "none.json")
    assert not pub.measured


def test_cublas_splits_k_when_tiles_leave_sms_idle():
    small = cublas_launch(1, 2112, 7168, 128, 128, sms=132)
    assert small.split > 1 and small.programs <= 132
    assert cublas_launch(16384, 28672, 8192, 128, 128, sms=132).split == 1


def test_scheme_selects_the_kernel_vllm_runs():
    assert SCHEMES == ("w4a16", "w4a8-int", "w4a8-fp8")
    assert predict("sm90-h200", "selected", 16, 4096, 4096, 128, scheme="w4a16").kernel.startswith(
        "MacheteLinearKernel")
    pc = predict("sm90-h200", "selected", 16, 4096, 4096, -1)
    assert pc.kernel.startswith("HummingLinearKernel")  # its activation: the rule set decides
    assert predict("sm90-h100", "selected", 16, 4096, 4096, 128, scheme="w4a8-fp8").kernel.startswith(
        "CutlassW4A8LinearKernel")
    with pytest.raises(InvalidInputError, match="accepted: w4a16, w4a8-int, w4a8-fp8"):
        predict("sm90-h200", "selected", 16, 4096, 4096, 128, scheme="w4a4")


def test_predict_cli_takes_the_scheme():
    import io
    from contextlib import redirect_stdout

    from workbench.__main__ import main

    def selected(scheme):
        out = io.StringIO()
        with redirect_stdout(out):
            assert main(["predict", "--platform", "H100", "--n", "4096", "--k", "4096", "--m", "16",
                         "--paths", "selected", "--json", "--scheme", scheme]) in (0, None)
        return json.loads(out.getvalue().splitlines()[0])

    assert selected("w4a16")["kernel"].startswith("MacheteLinearKernel")
    assert selected("w4a8-fp8")["kernel"].startswith("CutlassW4A8LinearKernel")
    assert selected("w4a8-int")["platform"] == "sm90-h100"
