"""Pure compute: int4 packing, int8 activation quantization, reference GEMMs and fast kernels.

Nothing here imports the workbench or any UI library.
"""

# Public surface: import the modules, e.g. `from w4a8_kernels import cpu_w4a8, reference`.
__all__ = [
    "quant", "packing", "reference", "cpu_w4a8", "cpu_w4a16", "engine_paths", "int8_gemm",
    "registry", "errors", "cpu_dense",
]
