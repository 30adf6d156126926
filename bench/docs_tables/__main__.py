"""``python -m bench.docs_tables``."""

import sys

from bench.docs_tables import main

sys.exit(main())
