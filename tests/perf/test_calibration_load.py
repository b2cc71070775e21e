"""The host calibration measures the load it ran under and flags a loaded run: measured
again while loaded, the unloaded attempt kept, a warning when every attempt was loaded,
and the host predictions say so."""
from __future__ import annotations

import warnings

import pytest

from workbench.noise import CpuSample, load_check
from workbench.perf.cpu import (CalibrationLoadWarning, HostCalibration, LinearFit,
                                calibrated_with_retries, loaded_calibration)
from workbench.perf.predict import predict_cpu


def _check(others: float) -> dict:
    """The load check of a 2-thread run on 2 cores while others took `others` cores."""
    return load_check(CpuSample(0.0, 0.0, 0.0, 1.0, 2), CpuSample(10.0, 10 * (1.0 + others), 10.0, 1.0, 2),
                      2).to_dict()


def _cal(others: float | None) -> HostCalibration:
    fit = LinearFit((5.0, 1e-4, 3e-7, 0.0, 0.0), 9, 0.01, -0.02, 0.02)
    prov = {} if others is None else {"load_check": _check(others)}
    return HostCalibration("k", 1, 1, 1, 1, 2, 0, {"dense": fit}, prov)


def test_a_loaded_calibration_is_measured_again_and_the_quiet_one_kept():
    runs = iter([_cal(1.0), _cal(0.1)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationLoadWarning)
        cal = calibrated_with_retries(lambda: next(runs))
    assert loaded_calibration(cal) is None and cal.provenance["spread"]["attempts"] == 2
    assert cal.provenance["load_check"]["others_cores"] == 0.1


def test_every_attempt_loaded_is_warned_about_and_predictions_say_so():
    runs = iter([_cal(1.0), _cal(0.9), _cal(1.2)])
    with pytest.warns(CalibrationLoadWarning, match=r"other processes kept 0\.9 of its 2 cores busy\) "
                                                    r"in all 3 attempts"):
        cal = calibrated_with_retries(lambda: next(runs))
    # the least loaded attempt is kept
    assert cal.provenance["load_check"]["others_cores"] == 0.9 and cal.provenance["spread"]["attempts"] == 3
    p = predict_cpu(None, "dense", 16, 1024, 1024, 128, "host", cal=cal)
    assert "calibrated under load (other processes kept 0.9 of its 2 cores busy" in p.note
    quiet = predict_cpu(None, "dense", 16, 1024, 1024, 128, "host", cal=_cal(0.1))
    assert "under load" not in quiet.note


def test_a_calibration_without_a_load_check_is_not_called_loaded():
    # calibrations cached before the check existed carry none: unknown, not loaded
    assert loaded_calibration(_cal(None)) is None
    assert "under load" not in predict_cpu(None, "dense", 1, 512, 512, 128, "host", cal=_cal(None)).note


def test_a_loaded_calibration_is_never_labelled_measured():
    # Issue 34.5: two host calibrations disagreed 8x with bands that did not overlap, both "measured".
    from workbench.perf.predict import BASES, UNDER_LOAD

    loaded = predict_cpu(None, "dense", 16, 1024, 1024, 128, "host", cal=_cal(0.9))
    quiet = predict_cpu(None, "dense", 16, 1024, 1024, 128, "host", cal=_cal(0.1))
    assert (loaded.basis, quiet.basis) == (UNDER_LOAD, "measured") and UNDER_LOAD in BASES
    assert loaded.high_us / loaded.low_us > quiet.high_us / quiet.low_us  # its band is wider


def test_a_loaded_calibration_never_replaces_a_quiet_one(tmp_path, monkeypatch):
    import json

    from workbench.perf import cpu

    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path))
    quiet = _cal(0.1)
    assert cpu._write(quiet)
    with pytest.warns(cpu.CalibrationRefusedWarning, match="refused, the quiet one cached before stands"):
        assert not cpu._write(_cal(1.2))
    kept = json.loads((tmp_path / "perf" / "host-k.json").read_text())
    assert kept["provenance"]["load_check"]["others_cores"] == 0.1
    # a loaded one is stored (as such) where no quiet one stands, and a quiet one replaces it
    (tmp_path / "perf" / "host-k.json").unlink()
    assert cpu._write(_cal(1.2)) and cpu._write(quiet)


def test_the_key_changes_with_the_isa_cap_and_the_thread_count(monkeypatch):
    from workbench.perf import cpu

    monkeypatch.delenv("W4A8_KERNELS_MAX_ISA", raising=False)
    base = cpu.host_key()
    assert any(str(v).startswith("threads=") for v in cpu.runs_here())
    assert any(isinstance(v, list) for v in cpu.runs_here())  # the engines' verdicts
    monkeypatch.setenv("W4A8_KERNELS_MAX_ISA", "avx2")
    capped = cpu.host_key()
    assert capped != base  # a capped run no longer overwrites the uncapped one
    monkeypatch.delenv("W4A8_KERNELS_MAX_ISA")
    monkeypatch.setattr(cpu, "host_threads", lambda: 7)
    assert cpu.host_key() not in (base, capped)
