"""Test-only callbacks and scripts (importable as ``helpers.*`` with ``tests/`` on the path)."""
