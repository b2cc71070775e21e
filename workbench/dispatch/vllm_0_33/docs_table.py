"""This release's documented Implementation x Hardware table, cell by cell.

From `docs/features/quantization/README.md:67-79` of the sdist ("Supported Hardware"): the
columns, the rows (True: the docs say supported), and the note mapping each GPU architecture
to compute capabilities, as [lo, hi) ranges.
"""
from __future__ import annotations

HARDWARE = ("Volta", "Turing", "Ampere", "Ada", "Hopper", "AMD GPU", "Intel GPU", "x86 CPU",
            "Arm CPU")
# README.md:79: "Volta refers to SM 7.0, Turing to SM 7.5, Ampere to SM 8.0/8.6, Ada to SM 8.9,
# and Hopper to SM 9.0."
CUDA_COLUMNS = ((70, 75, "Volta"), (75, 80, "Turing"), (80, 89, "Ampere"), (89, 90, "Ada"),
                (90, 100, "Hopper"))

_Y, _N = True, False
DOCS_TABLE: dict[str, tuple[bool, ...]] = {
    "AWQ": (_N, _Y, _Y, _Y, _Y, _N, _Y, _Y, _N),
    "GPTQ": (_Y, _Y, _Y, _Y, _Y, _N, _Y, _Y, _N),
    "Marlin (GPTQ/AWQ/FP8/FP4)": (_N, _Y, _Y, _Y, _Y, _N, _N, _N, _N),
    "llm-compressor INT8 (W8A8)": (_N, _Y, _Y, _Y, _Y, _N, _N, _Y, _Y),
    "llm-compressor INT8 (W4A8)": (_N, _N, _N, _N, _N, _N, _N, _N, _Y),
    "llm-compressor FP8 (W8A8)": (_N, _N, _N, _Y, _Y, _Y, _N, _N, _N),
    "bitsandbytes": (_Y, _Y, _Y, _Y, _Y, _N, _N, _N, _N),
    "DeepSpeedFP": (_Y, _Y, _Y, _Y, _Y, _N, _N, _N, _N),
    "GGUF": (_Y, _Y, _Y, _Y, _Y, _Y, _N, _N, _N),
}
