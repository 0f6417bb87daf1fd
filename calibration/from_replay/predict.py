"""An observed request list simulated under a candidate price: the same requests, sent
at the same times, through the engine settings given; per request its simulated TTFT and
TPOT next to the observed ones.

Between a client's send and the engine's arrival lies the server's front end (HTTP,
parsing, tokenising), which a client's TTFT holds and the engine's does not: `FrontEnd`
models it as a fixed delay a request plus a single-server queue of its own handling time (a
burst sent at once reaches the engine one by one: on batchlab serve on a busy machine, 16
requests sent together were scheduled over several steps; core/front_end.py). TTFT is then
from the send, as the client measured it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.calibration.from_replay.observed import ObservedReplay
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import CostModel
from batchlab.core.front_end import FrontEnd
from batchlab.core.workload.workload import Workload
from batchlab.sim.simulate import simulate


NO_FRONT_END = FrontEnd()


@dataclass
class Case:
    """One replay ready to simulate: its workload and observed per-request timings."""
    where: str
    workload: Workload
    ttft: np.ndarray  # observed, seconds
    tpot: np.ndarray  # observed, seconds; NaN for one-token replies

    @classmethod
    def of(cls, r: ObservedReplay) -> Case:
        reqs = r.requests
        w = Workload(np.array([q.send_s for q in reqs]), np.array([q.prompt_len for q in reqs]),
                     np.array([q.output_len for q in reqs]), description=[f"observed: {r.where}"])
        tpot = np.array([np.nan if q.tpot_s is None else q.tpot_s for q in reqs])
        return cls(r.where, w, np.array([q.ttft_s for q in reqs]), tpot)

    def __len__(self) -> int:
        return len(self.workload)


def engine_workload(case: Case, front: FrontEnd) -> tuple[Workload, np.ndarray]:
    """The case's workload as the engine receives it, and each request's serial links."""
    arrival, links = front.arrivals(case.workload.arrival)
    return case.workload.replace(arrival=arrival), links


def predict(case: Case, sched: SchedulerConfig, cost: CostModel,
            front: FrontEnd = NO_FRONT_END) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT from the send, TPOT) of each request simulated, in the case's order; NaN where
    the simulator did not finish it (rejected: longer than the engine takes)."""
    w, _ = engine_workload(case, front)
    res = simulate(w, sched, cost, sched.num_kv_blocks, record_steps=False)
    q = res.requests
    n = len(case)
    ttft, tpot = np.full(n, np.nan), np.full(n, np.nan)
    done = q["status"] == "finished"
    ids = q["request_id"][done].astype(np.int64)
    first, finish = q["first_token_s"][done], q["finish_s"][done]
    out = q["output_len"][done]
    ttft[ids] = first - case.workload.arrival[ids]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot[ids] = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    return ttft, tpot
