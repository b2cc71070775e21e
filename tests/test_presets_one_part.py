"""Every preset is one part; aliases resolve to their own part, case-insensitively."""
import pytest

from workbench.errors import InvalidInputError
from workbench.perf.hardware import hardware_for
from workbench.perf.predict import predict
from workbench.perf.selected import predict_selected
from workbench.platforms import ALIASES, PRESETS, get_preset


@pytest.mark.parametrize("name", ["h100", "H100", "sm90-h100", "SM90-H100"])
def test_h100_is_the_h100(name):
    assert get_preset(name).name == "sm90-h100"
    hw = hardware_for(name)
    assert hw.preset == "sm90-h100" and hw.mem_gbs == 3350.0
    h100 = predict(name, "bf16_dense", 1, 8192, 8192, -1).predicted_us
    h200 = predict("sm90-h200", "bf16_dense", 1, 8192, 8192, -1).predicted_us
    assert h100 > 1.2 * h200  # 3.35 against 4.8 TB/s
    assert predict_selected(name, 1, 8192, 8192, -1).predicted_us is not None


def test_every_alias_names_a_preset_with_hardware():
    for alias, key in ALIASES.items():
        assert alias == alias.lower() and key in PRESETS
        assert get_preset(alias.upper()).name == key
        assert hardware_for(alias).preset == key


def test_accepted_lists_the_aliases():
    with pytest.raises(InvalidInputError) as e:
        get_preset("h300")
    assert "h100 (sm90-h100)" in str(e.value) and "sm90-h100" in str(e.value)
    with pytest.raises(InvalidInputError, match="h100 \\(sm90-h100\\)"):
        hardware_for("h300")


def test_no_preset_names_two_parts():
    for p in PRESETS.values():
        assert " / " not in p.description, p.description


def test_rtx5090_float_rates_share_one_accumulator():
    hw = hardware_for("sm120-rtx5090")
    # fp32 accumulation for both: fp8 twice bf16 (838 is the fp16-accumulate fp8 rate)
    assert hw.peak("fp8") == 2 * hw.peak("bf16")
