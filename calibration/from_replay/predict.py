"""An observed request list simulated under a candidate price: the same requests, sent
at the same times, through the engine settings given; per request its simulated TTFT and
TPOT next to the observed ones."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.calibration.from_replay.observed import ObservedReplay
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost import CostModel
from batchlab.core.workload.workload import Workload
from batchlab.sim.simulate import simulate


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


def predict(case: Case, sched: SchedulerConfig, cost: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) of each request simulated, in the case's order; NaN where the simulator
    did not finish it (rejected: longer than the engine takes)."""
    res = simulate(case.workload, sched, cost, sched.num_kv_blocks, record_steps=False)
    q = res.requests
    n = len(case)
    ttft, tpot = np.full(n, np.nan), np.full(n, np.nan)
    done = q["status"] == "finished"
    ids = q["request_id"][done].astype(np.int64)
    first, finish, arrival = q["first_token_s"][done], q["finish_s"][done], q["arrival_s"][done]
    out = q["output_len"][done]
    ttft[ids] = first - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot[ids] = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    return ttft, tpot
