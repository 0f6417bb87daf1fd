"""What calibrate does when its serving phase is contended a second time
(calibration/sweep/contention.py): refuse, writing nothing (the default), or keep it, warning,
for a machine that is never quiet (a shared CI runner: the test suite sets keep, so that
it passes on a busy machine, only slower). No heavy import: the command line's parser
reads the choices."""
from __future__ import annotations

import os

ON_CONTENTION = ("refuse", "keep")
ON_CONTENTION_ENV = "BATCHLAB_ON_CONTENTION"


def on_contention_mode(given: str | None = None) -> str:
    """`given`, else $BATCHLAB_ON_CONTENTION, else refuse; ValueError (one line) if unknown."""
    mode = given or os.environ.get(ON_CONTENTION_ENV) or "refuse"
    if mode not in ON_CONTENTION:
        source = "--on-contention" if given else ON_CONTENTION_ENV
        raise ValueError(f"{source} is {mode!r}; expected one of {', '.join(ON_CONTENTION)}")
    return mode
