"""The performance model: hardware data, calibration on the results files, a cost model per
execution path, and their validation (benchmarks/validate_perf.py)."""
from workbench.perf.predict import BASES, PREDICTED_PATHS, Prediction, predict, predict_many, roofline_us

__all__ = ["Prediction", "predict", "predict_many", "PREDICTED_PATHS", "BASES", "roofline_us"]
