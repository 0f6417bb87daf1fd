"""How much one command may be asked to do, refused up front with the figure: a sweep
grid or a seed count that could not finish in memory or in reasonable time (a
1000 x 1000 grid, --seeds 1000000) is one line before anything runs, not a silent start."""
from __future__ import annotations

import math

from batchlab.core.sizes import BYTES_PER_REQUEST, require_memory
from batchlab.experiments.errors import UserError

MAX_SWEEP_POINTS = 10_000  # each point is a full simulation (or a search of several)
MAX_SAMPLES = 1_000  # seeds (x windows): each one a full run of the workload
BYTES_PER_POINT = 64 * 1024  # a point's config, hash and result row, held until the end


def check_grid(where: str, sizes: list[int]) -> None:
    n = math.prod(sizes)
    shape = " x ".join(f"{s:,}" for s in sizes)
    if n > MAX_SWEEP_POINTS:
        raise UserError(f"{where}: [grid] makes {n:,} points ({shape}); at most "
                        f"{MAX_SWEEP_POINTS:,} per sweep (each point is a full run): thin the "
                        f"lists or split the grid into several sweeps")
    try:
        require_memory(n * BYTES_PER_POINT, f"{where}: [grid] of {n:,} points")
    except ValueError as e:
        raise UserError(str(e)) from None


def check_samples(what: str, n: int, requests: int | None = None) -> None:
    """`what` (e.g. '--seeds 1000000') asks for n full runs of `requests` requests each."""
    if n > MAX_SAMPLES:
        raise UserError(f"{what}: {n:,} runs of the workload; at most {MAX_SAMPLES:,} (each is a "
                        f"full run)")
    if requests is not None:
        try:
            require_memory(n * requests * BYTES_PER_REQUEST,
                           f"{what}: {n:,} workloads of {requests:,} requests")
        except ValueError as e:
            raise UserError(str(e)) from None
