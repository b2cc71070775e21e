"""W4A8 dispatch workbench: which vLLM kernel runs a quantized layer, why, and at what cost."""
