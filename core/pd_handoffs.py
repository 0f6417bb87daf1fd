"""The hand-offs of one disaggregated run, one row a request sent from the prefill pool to
the decode pool, and the links they queue on: each prefill replica sends one transfer at
a time and each decode replica receives one at a time (its NICs carry one request's KV at
full rate), first come first served. Both worlds keep them (sim/disaggregated priced by
the link, backend/disaggregated measured), and both merge their pools' records into one
run the same way (merged_run)."""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from batchlab.core.metrics import MetricsRecorder
from batchlab.core.result import RunResult
from batchlab.core.run_meta import RunMeta

HANDOFF_COLUMNS = ("request_id", "prefill_replica", "decode_replica", "ready_s", "sent_s",
                   "arrived_s", "kv_bytes")


@dataclass
class HandOffLog:
    request_id: array = field(default_factory=lambda: array("q"))
    prefill_replica: array = field(default_factory=lambda: array("q"))
    decode_replica: array = field(default_factory=lambda: array("q"))
    ready_s: array = field(default_factory=lambda: array("d"))  # the prefill finished
    sent_s: array = field(default_factory=lambda: array("d"))  # both ends' links were free
    arrived_s: array = field(default_factory=lambda: array("d"))  # the KV is on the decode replica
    kv_bytes: array = field(default_factory=lambda: array("q"))
    # By request id: when a decode replica admitted it (its decode queue's end), noted as
    # it leaves; admitted_s in the table (NaN: not admitted by the end of the run).
    admitted: dict[int, float] = field(default_factory=dict)

    def add(self, request_id: int, prefill: int, decode: int, ready: float, sent: float,
            arrived: float, nbytes: int) -> None:
        self.request_id.append(request_id)
        self.prefill_replica.append(prefill)
        self.decode_replica.append(decode)
        self.ready_s.append(ready)
        self.sent_s.append(sent)
        self.arrived_s.append(arrived)
        self.kv_bytes.append(nbytes)

    def __len__(self) -> int:
        return len(self.request_id)

    def table(self) -> dict[str, np.ndarray]:
        """Columns as arrays, in the order the transfers were sent."""
        t = {c: np.frombuffer(getattr(self, c), dtype=np.int64 if getattr(self, c).typecode == "q"
                              else np.float64).copy() for c in HANDOFF_COLUMNS}
        t["admitted_s"] = np.array([self.admitted.get(int(i), np.nan) for i in t["request_id"]], dtype=float)
        return t


class LinkQueues:
    """When each replica's link is next free: a transfer from prefill replica p to decode
    replica d starts once both are, and holds both until it ends."""

    def __init__(self, prefill_replicas: int, decode_replicas: int) -> None:
        self.send_free = [0.0] * prefill_replicas
        self.recv_free = [0.0] * decode_replicas

    def reserve(self, p: int, d: int, ready: float, seconds: float, not_before: float = 0.0) -> tuple[float, float]:
        """(start, end) of a transfer of `seconds` ready at `ready`, ending no sooner than
        not_before (a layer-wise transfer cannot end before the prefill's last layer)."""
        start = max(ready, self.send_free[p], self.recv_free[d])
        end = max(start + seconds, not_before)
        self.send_free[p] = self.recv_free[d] = end
        return start, end


def merged_run(requests: MetricsRecorder, prefill: MetricsRecorder, decode: MetricsRecorder,
               meta: RunMeta) -> RunResult:
    """One run: the requests' rows (the client's, in `requests`), both pools' steps
    (prefill replicas first, as the step table orders replicas), every inter-token gap,
    both pools' step totals."""
    steps = None
    p_steps, d_steps = prefill.step_table(), decode.step_table()
    if p_steps is not None and d_steps is not None:
        steps = {c: np.concatenate([p_steps[c], d_steps[c]]) for c in p_steps}
    (pg, pc), (dg, dc) = prefill.itl(), decode.itl()
    totals = {k: prefill.totals[k] + decode.totals[k] for k in decode.totals}
    return RunResult(requests.request_table(), steps, np.concatenate([pg, dg]), np.concatenate([pc, dc]),
                     meta, totals)
