"""The C kernels' build as other packages read it: the ISA cap in force, this CPU's flags, the
library caps that pair with the cap, and which variants were admitted after their self-test
(or why not).

Building and loading the libraries stay in `_native_lib`, the engines' own business.
"""
from __future__ import annotations

from w4a8_kernels._native_lib import (AVX2_LIBRARY_CAPS, ISA_CAP_ENV, VARIANTS, cpu_flags, isa_cap,
                                      verdicts, why_unavailable)

__all__ = ["isa_cap", "cpu_flags", "why_unavailable", "verdicts", "VARIANTS", "ISA_CAP_ENV",
           "AVX2_LIBRARY_CAPS"]
