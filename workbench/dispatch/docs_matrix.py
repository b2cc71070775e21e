"""vLLM's documented Implementation x Hardware table next to what the pinned rules compute.

The docs table is the pinned release's "Supported Hardware" table
(`docs/features/quantization/README.md:43`), held cell by cell in its rule set
(`docs_table`). For the rows this workbench models, each cell is recomputed by
tracing a representative layer on a preset of that hardware; a cell where the docs and the
code disagree names the kernel (or the error) that makes the difference.
"""
from __future__ import annotations

from dataclasses import dataclass

from workbench.dispatch import trace_scheme
from workbench.dispatch.trace import Trace
from workbench.dispatch.versions import rule_module

_DOCS = rule_module("docs_table")
HARDWARE, DOCS_TABLE = _DOCS.HARDWARE, _DOCS.DOCS_TABLE
# The preset each documented hardware column is computed on.
HARDWARE_PRESET = {"Volta": "sm70-v100", "Turing": "sm75-t4", "Ampere": "sm80-a100",
                   "Ada": "sm89-l40s", "Hopper": "sm90-h200", "AMD GPU": "rocm-mi300x",
                   "Intel GPU": "xpu", "x86 CPU": "x86-avx512", "Arm CPU": "arm-kleidiai"}

# The docs name GPU architectures; vLLM checks compute capabilities: [lo, hi) per column.
_CUDA_COLUMNS = _DOCS.CUDA_COLUMNS
_DEVICE_COLUMNS = {"rocm": "AMD GPU", "xpu": "Intel GPU"}
_CPU_COLUMNS = {"x86": "x86 CPU", "arm": "Arm CPU"}


def hardware_column(platform) -> str | None:
    """The docs table's hardware column for a platform (None: the table has no column for it)."""
    if platform.device == "cuda":
        cap = platform.capability
        return next((c for lo, hi, c in _CUDA_COLUMNS if cap is not None and lo <= cap < hi), None)
    if platform.device == "cpu":
        return _CPU_COLUMNS.get(platform.cpu_arch)
    return _DEVICE_COLUMNS.get(platform.device)


def docs_row(spec) -> str | None:
    """The docs table's row for a layer's scheme (None: the table has no row for it).

    GPTQ and AWQ checkpoints are their own rows; a compressed-tensors layer is the
    llm-compressor row of its weight and activation types, or, weight-only, the GPTQ row
    (symmetric int4) or the AWQ row (with zero points), as `MODELLED_ROWS` models them.
    """
    fmt = getattr(spec.format, "value", spec.format)
    if fmt in ("gptq", "awq"):
        return fmt.upper()
    if fmt not in ("compressed-tensors", "synthetic"):
        return None
    w, a = spec.weight_args or {}, spec.input_args or {}
    if not a:
        if w.get("type") == "int" and w.get("num_bits") == 4:
            return "GPTQ" if w.get("symmetric", True) else "AWQ"
        return None
    if a.get("type") == "float" and a.get("num_bits") == 8 and w.get("type") == "float":
        return "llm-compressor FP8 (W8A8)"
    if a.get("type") == "int" and a.get("num_bits") == 8 and w.get("type") == "int":
        return {4: "llm-compressor INT8 (W4A8)", 8: "llm-compressor INT8 (W8A8)"}.get(w.get("num_bits"))
    return None


_INT4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "dynamic": False}
_TOKEN_INT8 = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "symmetric": True}


def _layer(weights: dict, inputs: dict | None, fmt: str) -> dict:
    return {"weights": weights, "input_activations": inputs, "output_activations": None,
            "format": fmt, "layer_name": "model.layers.0.mlp.down_proj", "in_features": 4096,
            "out_features": 4096, "params_dtype": "bfloat16"}


# Rows the rules model, with the compressed-tensors layer that stands for each.
MODELLED_ROWS: dict[str, tuple[dict, str]] = {
    "llm-compressor INT8 (W4A8)": (
        _layer({**_INT4, "symmetric": True}, _TOKEN_INT8, "int-quantized"),
        "llm-compressor preset W4A8: int4 g128 symmetric weights, dynamic per-token int8 input, "
        "int-quantized"),
    "GPTQ": (_layer({**_INT4, "symmetric": True}, None, "pack-quantized"),
             "symmetric int4 g128 weight-only (GPTQ-style, uint4b8), pack-quantized"),
    "AWQ": (_layer({**_INT4, "symmetric": False}, None, "pack-quantized"),
            "asymmetric int4 g128 weight-only (AWQ-style, uint4 + zero points), pack-quantized"),
    "Marlin (GPTQ/AWQ/FP8/FP4)": (_layer({**_INT4, "symmetric": True}, None, "pack-quantized"),
                                  "symmetric int4 g128 weight-only; YES only when Marlin is chosen"),
}


@dataclass(frozen=True)
class Cell:
    hardware: str
    preset: str
    docs: bool
    code: bool | None  # None: row not modelled
    selected: str | None
    weight_only: bool
    error: str | None
    explanation: str
    # Where vLLM fails for this cell: "selection" (no kernel), "load" (weight processing) or
    # "forward" (the first forward), from the trace's runtime value; None when it runs.
    fails_at: str | None = None

    @property
    def disagrees(self) -> bool:
        return self.code is not None and self.code != self.docs

    def to_json(self) -> dict:
        return {"hardware": self.hardware, "preset": self.preset, "docs": self.docs,
                "code": self.code, "selected": self.selected, "weight_only": self.weight_only,
                "error": self.error, "disagrees": self.disagrees, "explanation": self.explanation,
                "fails_at": self.fails_at}


def _explain(row: str, t: Trace, docs: bool, code: bool) -> str:
    if t.selected:
        what = f"{t.scheme} -> {t.selected}" + (f": {t.runtime}" if t.runtime else "")
        if row.startswith("Marlin") and not code:
            return f"Docs say YES, but {t.selected} is chosen ahead of Marlin ({what})"
        return f"Docs say NO, but the code selects {what}" if code and not docs else what
    if not t.steps:  # the scheme itself was refused before any kernel was tried
        return (("Docs say YES, but " if docs else "") + f"{t.error_type}: {t.error}")
    last = t.reasons[-1].strip() if t.reasons else t.error
    return (("Docs say YES, but " if docs else "")
            + f"{t.error_type}: every candidate rejects; last: {last}")


def _weight_only(t: Trace) -> bool:
    return t.runtime_detail is not None and t.runtime_detail.weight_only


# A cell's `fails_at` in the words the faces show: "code YES" alone would read as "runs".
FAILS_AT_WORDS = {"selection": "fails at selection", "load": "fails at load",
                  "forward": "fails at first forward"}


def _fails_at(row: str, t: Trace) -> str | None:
    if t.selected is None:
        return "selection"
    if row.startswith("Marlin") and t.selected != "MarlinLinearKernel":
        return None  # another kernel is chosen and runs: the row's NO is not a failure
    return t.runtime_detail.fails_at if t.runtime_detail is not None else None


def compute_matrix(env: dict | None = None) -> list[dict]:
    """Every row of the docs table with, where modelled, the computed cell beside it."""
    rows = []
    for row, docs_cells in DOCS_TABLE.items():
        cells = []
        for hw, docs in zip(HARDWARE, docs_cells):
            preset = HARDWARE_PRESET[hw]
            if row not in MODELLED_ROWS:
                cells.append(Cell(hw, preset, docs, None, None, False, None,
                                  "not modelled by this workbench"))
                continue
            t = trace_scheme(MODELLED_ROWS[row][0], preset, env)
            code = t.selected is not None
            if row.startswith("Marlin"):
                code = t.selected == "MarlinLinearKernel"
            cells.append(Cell(hw, preset, docs, code, t.selected, _weight_only(t),
                              t.error, _explain(row, t, docs, code), _fails_at(row, t)))
        rows.append({"implementation": row,
                     "layer": MODELLED_ROWS[row][1] if row in MODELLED_ROWS else None,
                     "cells": [c.to_json() for c in cells],
                     "disagreements": sum(c.disagrees for c in cells)})
    return rows
