"""The performance model: hardware data, calibration on the results files, a cost model per
execution path (`predict`), what vLLM selects costed from its trace (`selected`), and their
validation (benchmarks/validate_perf.py)."""
from workbench.perf.predict import BASES, PREDICTED_PATHS, Prediction, predict, roofline_us

__all__ = ["Prediction", "predict", "PREDICTED_PATHS", "BASES", "roofline_us"]
