#!/usr/bin/env python
"""biomoe command line: ``python cli.py fit --config configs/default.yaml`` (see README)."""

import sys

from biomoe.cli import main

if __name__ == "__main__":
    sys.exit(main())
