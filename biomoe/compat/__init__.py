"""Every reach into a dependency's private internals, one small module per dependency.

biomoe uses public APIs wherever they exist. Where none does (fused multi-tensor kernels, grouped
GEMMs, LightningCLI's subcommand parser, Transformer Engine's op fuser), the private names are
used only here, each module says which versions it was tested with, and ``tests/compat/test_compat.py``
(CPU) and ``tests/gpu/test_te.py`` (Transformer Engine) fail when a dependency renames one.
"""
