"""Throughput and memory benchmark of biomoe against Hugging Face Mixtral (``make bench``)."""
