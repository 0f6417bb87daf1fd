"""How far a replica's fast-forward run goes (sim/engine.py's _plan): the decode group's
next steps priced up to the next arrival that could join them, and cut where KV memory
ends. No replica state: the engine reads the arrival and the policy's plan."""
from __future__ import annotations

import math
from typing import Final

from batchlab.core.batch import Batch
from batchlab.core.cost.form import CostModel
from batchlab.core.decode_group import DecodeGroup
from batchlab.core.fast_forward import DecodeRun

MIN_FAST_FORWARD: Final = 2  # shorter runs are cheaper stepped one by one
WHOLE_RUN: Final = 64  # runs of at most this many steps are priced whole, without a guess


def price_run(group: DecodeGroup, spare_blocks: int, batch: Batch, t0: float, context: tuple[int, int],
              cost: CostModel, k: int, sensitive_from: int, arrival: float, ahead: bool,
              record_steps: bool) -> tuple[DecodeRun, int] | None:
    """The run of k steps that `batch` starts at t0 (Scheduler.steady_decode_run's k and
    sensitive_from), priced with its first step in `context`: (the run, its steps to
    apply), or None to step. Steps from sensitive_from on must start before `arrival`;
    ahead (priced ahead, sim/pending_run.py): the run ends where its pricing does, about
    `arrival` (then a later one, only sizing it), as only an arrival routed here cuts it."""
    if sensitive_from <= k:
        # The next arrival usually comes long before step k: price a guess of the steps
        # up to it first, all k if that falls short. The guess only sizes the pricing; a
        # decode step of the group as it stands (its context aside) is near enough. A
        # short run is priced whole: a few instructions a step (core/run_clock.c), less
        # than sizing the guess.
        guess = k
        if k > WHOLE_RUN or ahead:
            g = batch.group_decodes
            first = cost.decode_times(g, batch.group_kv + g, 1)[0]
            if first > 0 and arrival < math.inf:
                guess = max(sensitive_from, int((arrival - t0) / first) + 1) + 2
        while True:
            run = group.price(cost, min(k, guess), context, record_steps, t0)
            steps = len(run.clock)
            if run.clock.time(steps - 1) >= arrival or guess >= k:
                break
            guess *= 2
        if ahead:
            m = steps
        else:
            m = max(sensitive_from - 1, run.clock.bisect(arrival, steps))
            if m < MIN_FAST_FORWARD:
                return None
    else:
        m = k
        run = group.price(cost, k, context, record_steps, t0)
    # Spare blocks only: a run never evicts a cached block (which one stepping would
    # evict depends on when finishing members free theirs).
    m = group.kv_steps(m, spare_blocks)
    return None if m < MIN_FAST_FORWARD else (run, m)
