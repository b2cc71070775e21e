"""`trace --moe-scheme`: the W4A8-INT8 MoE layer of the issue on the three platforms it names."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from workbench.__main__ import main
from workbench.dispatch.moe import MOE_VERSIONS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "moe_w4a8_int8.json"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("version", MOE_VERSIONS)
def test_w4a8_int8_moe_on_arm_x86_and_h200(version):
    rc, out, _ = run_cli("trace", "--moe-scheme", f"@{EXAMPLE}", "--platform", "arm-kleidiai",
                         "--vllm-version", version, "--json")
    t = json.loads(out)
    assert rc == 0 and t["experts"] == "CPUExpertsInt4" and t["backend"] == "CPU_INT4"
    assert t["method"] == "CompressedTensorsW4A8Int8MoEMethod" and t["vllm_version"] == version
    rc, out, _ = run_cli("trace", "--moe-scheme", f"@{EXAMPLE}", "--platform", "x86-avx512",
                         "--vllm-version", version)
    assert rc == 0
    assert "CPUExpertsInt4                   rejected  kernel only supports Arm CPU" in out
    assert ("NotImplementedError: No W4A8 Int8 MoE backend supports the deployment "
            "configuration.") in out
    rc, out, _ = run_cli("trace", "--moe-scheme", f"@{EXAMPLE}", "--platform", "sm90-h200",
                         "--vllm-version", version)
    assert "NotImplementedError: W4A8 Int8 MoE is only supported on CPU platforms" in out


def test_moe_backend_flag_and_its_misuse():
    rc, out, _ = run_cli("trace", "--moe-scheme", f"@{EXAMPLE}", "--platform", "arm-kleidiai",
                         "--moe-backend", "triton")
    assert ("ValueError: moe_backend='triton' is not supported for W4A8 Int8 MoE. "
            "Expected one of ['cpu'].") in out
    rc, out, err = run_cli("trace", "--scheme", "{}", "--moe-backend", "triton")
    assert rc == 2 and "--moe-backend: given without --moe-scheme" in err
    rc, out, err = run_cli("trace", "--moe-scheme", '{"weights": {}}')
    assert rc == 2 and "moe_scheme.num_experts: missing" in err


def test_markdown_names_the_sources():
    rc, out, _ = run_cli("trace", "--moe-scheme", f"@{EXAMPLE}", "--platform", "arm-kleidiai",
                         "--markdown")
    assert rc == 0 and "vllm/model_executor/layers/fused_moe/experts/cpu_int4_moe.py:" in out
