"""`python -m batchlab ...`: the `batchlab` command."""
import sys

from batchlab.experiments.cli import main

sys.exit(main())
