"""Platform presets, JSON overrides and detection of this machine."""
from __future__ import annotations

import pytest

from workbench.errors import InvalidInputError, UnknownPresetError
from workbench.platforms import PRESETS, capability_from_gfx, detect_host, resolve_platform


def test_presets_state_their_packages():
    assert PRESETS["sm90-h200"].packages == ("humming",)
    assert PRESETS["rocm-mi300x"].packages == ("conch",) and PRESETS["rocm-mi300x"].capability == 94
    assert PRESETS["zen4-zentorch"].zen and "zentorch" in PRESETS["zen4-zentorch"].packages
    assert PRESETS["x86-spr-amx"].amx and not PRESETS["x86-avx512"].amx
    assert "aten._dyn_quant_matmul_4bit" not in PRESETS["arm-no-dyn-quant"].torch_ops


def test_json_overrides_every_field_on_a_preset():
    p = resolve_platform('{"preset": "sm90-h200", "capability": 100, "packages": ["conch"]}')
    assert (p.device, p.capability, p.packages) == ("cuda", 100, ("conch",))
    r = resolve_platform({"device": "rocm", "gfx": "gfx1101"})
    assert r.capability == 110 and r.packages == ()


def test_gfx_capabilities_as_hip_derives_them():
    assert [capability_from_gfx(g) for g in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1200")] == \
        [90, 94, 95, 110, 120]


@pytest.mark.parametrize("spec,err", [("sm42-unknown", UnknownPresetError),
                                      ('{"device": "tpu"}', InvalidInputError),
                                      ('{"preset": "xpu", "amx": "yes"}', InvalidInputError),
                                      ('{"device": "cpu", "cpu_arch": "mips"}', InvalidInputError),
                                      ("{oops", InvalidInputError)])
def test_bad_platforms_are_named_errors(spec, err):
    with pytest.raises(err):
        resolve_platform(spec)


def test_detect_host_reads_this_machine():
    host = detect_host()
    flags = open("/proc/cpuinfo").read()
    assert host.device in ("cpu", "cuda", "rocm", "xpu")
    if host.device == "cpu":
        assert host.avx512 == (" avx512f" in flags)
        assert host.avx512_bf16 == ("avx512_bf16" in flags)
        assert host.amx == (" amx_tile" in flags)
    import torch

    has_op = hasattr(torch.ops.aten, "_dyn_quant_matmul_4bit")
    assert ("aten._dyn_quant_matmul_4bit" in host.torch_ops) == has_op


def test_detect_host_without_torch_equals_the_torch_probe():
    # The app's first page reads this machine without importing torch; it must see what
    # probing torch sees (device, AMX, ops, everything).
    assert detect_host() == detect_host(import_torch=True)


def test_torch_build_is_read_from_its_version_file():
    import torch

    from workbench.platforms import _torch_build

    build = _torch_build()
    assert build == {"__version__": torch.__version__, "cuda": torch.version.cuda,
                     "hip": torch.version.hip, "xpu": getattr(torch.version, "xpu", None)}


def test_host_cpu_is_this_machines_cpu_even_with_a_gpu():
    cpu = resolve_platform("host-cpu")
    assert cpu.device == "cpu" and cpu.name == "host-cpu"
    host = detect_host()
    if host.device == "cpu":  # no GPU here: the two differ by name only
        from dataclasses import replace
        assert replace(cpu, name="host") == host


def test_a_gpu_host_stands_for_the_preset_its_name_or_capability_gives():
    from workbench.platforms import platform_from_json, preset_for_host

    def gpu(desc, cap):
        return platform_from_json({"device": "cuda", "capability": cap, "name": "host",
                                   "description": f"this machine: {desc}"})

    assert preset_for_host(gpu("NVIDIA H200", 90)) == "sm90-h200"
    assert preset_for_host(gpu("NVIDIA A100-SXM4-80GB", 80)) == "sm80-a100"
    assert preset_for_host(gpu("Some SM 8.9 card", 89)) == "sm89-l40s"  # by capability
    assert preset_for_host(gpu("a future card", 130)) is None
    assert preset_for_host(PRESETS["x86-avx512"]) is None
    assert preset_for_host(detect_host(cpu=True)) is None
