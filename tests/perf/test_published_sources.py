"""The published points are read as their sources state them, and the GPU families follow
the architecture and the kernel (workbench/perf/published.json, families.py, launch.py)."""
import json
import math

import pytest

from workbench.dispatch.types import Runtime
from workbench.errors import InvalidInputError
from workbench.perf.families import (FAMILIES, arch_of, family_eta, family_of, point_us,
                                     published_points)
from workbench.perf.launch import cublas_launch
from workbench.perf.predict import eta_of_point, predict
from workbench.perf.selected import SCHEMES, predict_selected
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
    a10 = predict_selected("sm86-a10", 1, 8192, 8192, -1, scheme="w4a16")
    h100 = predict_selected("sm90-h100", 1, 8192, 8192, -1, scheme="w4a16")
    # no Ampere point for the W4A16 kernels: a wider band than on the part of the points
    assert a10.high_us / a10.low_us > h100.high_us / h100.low_us
    assert "other architectures" in a10.note


def test_known_slow_kernels_are_slower():
    exllama = Runtime("ExllamaLinearKernel", "bf16", "uint4b8", "gptq_gemm", "x.py:1")
    assert family_of(exllama) == "w4a16_exllama"
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
    assert predict_selected("sm90-h200", 16, 4096, 4096, 128, scheme="w4a16").kernel.startswith(
        "MacheteLinearKernel")
    pc = predict_selected("sm90-h200", 16, 4096, 4096, -1)
    assert pc.kernel.startswith("HummingLinearKernel")  # its activation: the rule set decides
    assert predict_selected("sm90-h100", 16, 4096, 4096, 128, scheme="w4a8-fp8").kernel.startswith(
        "CutlassW4A8LinearKernel")
    with pytest.raises(InvalidInputError, match="accepted: w4a16, w4a8-int, w4a8-fp8"):
        predict_selected("sm90-h200", 16, 4096, 4096, 128, scheme="w4a4")


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



def test_points_span_five_parts_and_say_whether_one_weight_is_reread():
    pts = published_points()
    assert len(pts) >= 40 and len({p["part"] for p in pts}) >= 5
    for p in pts:
        assert p.get("weight_reused") in (None, True, False), p


def test_a_point_never_checks_a_sustained_rate_read_from_its_own_table(validate_perf):
    from workbench.perf.hardware import hardware_for

    a100 = hardware_for("sm80-a100")
    assert a100.sustained_link("int8") == "https://github.com/sgl-project/sglang/pull/2752"
    held, which = validate_perf._held_out_rates(a100, "https://github.com/sgl-project/sglang/pull/2752")
    assert which == ("int8",) and held.sustained_rate("int8") is None
    assert held.sustained_rate("bf16") == a100.sustained_rate("bf16")
    same, none = validate_perf._held_out_rates(a100, "https://github.com/vllm-project/vllm/pull/5275")
    assert none == () and same is a100


def test_every_sustained_rate_names_where_it_was_published_or_measured():
    from workbench.perf.hardware import HARDWARE_FILE

    for preset, d in json.loads(HARDWARE_FILE.read_text())["parts"].items():
        rates = {t for t, v in d.get("sustained", {}).items() if isinstance(v, (int, float))}
        if not rates:
            continue
        src = d["sustained"]["source"]
        links = d["sustained"].get("links", {})
        for t in rates:
            assert f"{t}:" in src or "measured here" in src, (preset, t)
            assert t in links or "measured here" in src, (preset, t)


def test_fp8_on_the_h200_runs_at_its_own_rate_not_int_mms():
    from dataclasses import replace

    from workbench.perf.hardware import hardware_for
    from workbench.perf.predict import predict_gpu

    h200 = hardware_for("sm90-h200")
    fp8 = predict_gpu(h200, "fp8_mm", 8192, 8192, 8192, -1).predicted_us
    int8 = predict_gpu(h200, "int8_mm", 8192, 8192, 8192, -1).predicted_us
    assert fp8 < 0.8 * int8  # compute-bound: the fp8 matmul's 1453 TFLOP/s against _int_mm's 895
    # Its own fp8 figure and the point it came from held out, the rate comes from the other
    # Hopper part's published fp8 GEMM (the H100's), not from _int_mm's efficiency: within 15%
    plain = replace(h200, sustained={t: v for t, v in h200.sustained.items() if t != "fp8"})
    mamf = next(p for p in published_points() if p["part"] == "sm90-h200" and "ml-engineering" in p["source"])
    held = predict_gpu(plain, "fp8_mm", 8192, 8192, 8192, -1, src=plain, exclude=mamf)
    assert held.predicted_us == pytest.approx(fp8, rel=0.15) and held.predicted_us < 0.8 * int8
    assert "the rate hopper parts' published dense GEMMs" in held.note


def test_a_weight_reread_from_the_l2_is_flagged_and_beats_the_dram_roofline(validate_perf):
    from workbench.perf.hardware import hardware_for
    from workbench.perf.predict import roofline_us

    l40s = hardware_for("sm89-l40s")
    p = next(p for p in published_points() if p["source"].endswith("/pull/6848") and p["m"] == 1
             and (p["n"], p["k"]) == (12288, 4096))
    assert validate_perf._l2_resident(p, l40s, point_us(p, None))
    assert point_us(p, None) < roofline_us(l40s, "int8_mm", 1, 12288, 4096, -1)
    big = next(p for p in published_points() if p["source"].endswith("/pull/2752") and p["n"] == 8192)
    assert not validate_perf._l2_resident(big, hardware_for("sm80-a100"), point_us(big, None))  # 178 MB against 40 MB
    # compute-bound: the weight's DRAM time is a small part of the call, wherever it is read from
    mamf = next(p for p in published_points() if p["part"] == "sm90-h200" and "ml-engineering" in p["source"])
    assert not validate_perf._l2_resident(mamf, hardware_for("sm90-h200"), point_us(mamf, None))


def test_families_come_from_the_runtime_value_not_from_names():
    def rt(method: str, activation: str) -> Runtime:
        return Runtime(method, activation, "uint4b8", "op", "x.py:1")

    # the activation the kernel runs decides between a family and its int8 / fp8 sibling
    assert family_of(rt("HummingLinearKernel", "bf16")) == "humming"
    assert family_of(rt("HummingLinearKernel", "int8")) == "humming_int8"
    assert family_of(rt("MarlinLinearKernel", "int8")) == "w4a8_int8"
    assert family_of(rt("CutlassW4A8LinearKernel", "fp8")) == "w4a8_fp8"
    # a class the map does not hold has no family, whatever its name says
    assert family_of(rt("SomeNewW4A16LinearKernel", "bf16")) is None
