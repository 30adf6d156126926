"""The ``quack`` expert backend: quack-kernels' grouped GEMMs with the token gather folded into the
GEMM's operand load and SwiGLU (forward and backward) in its epilogue (:mod:`.experts`)."""
