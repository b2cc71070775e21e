"""Pure compute: int4 packing, int8 activation quantization, reference GEMMs and fast kernels.

Nothing here imports the workbench or any UI library.
"""
