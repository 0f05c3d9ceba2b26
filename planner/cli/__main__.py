"""`python -m planner.cli`, as the `pulsar-rebalance` script."""

import sys

from planner.cli import main

sys.exit(main())
