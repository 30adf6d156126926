import sys

from biomoe.bench.run import main

sys.exit(main())
