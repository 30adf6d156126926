"""Throughput and memory benchmark of biomoe against Hugging Face Mixtral (``make bench``), the
multi-GPU scaling runner and the expert-variant study.

It lives beside the library, not inside it, so that ``pip install biomoe`` ships the product only;
run it from a clone, at the repository root (``python -m bench ...``). Nothing in ``biomoe``
imports it (tests/product/test_layers.py checks)."""
