"""The all-reduce table a GPU profile carries: Vidur's NCCL timings summarised per GPU
count into medians over bins of message size (a factor of 2 wide: single timings of small
messages scatter by 2-3x), and a latency + bandwidth fallback for GPU counts not measured
(from the table's own largest messages, or from point-to-point send/recv)."""
from __future__ import annotations

from typing import NamedTuple
from collections.abc import Sequence

import numpy as np

from batchlab.calibration.operators.vidur import CollectiveTiming
from batchlab.core.cost.gpu_form import AllReduce
from batchlab.core.cost.gpu_profile import Collectives, ErrorStats


def error_stats(errors: Sequence[float]) -> ErrorStats:
    e = np.asarray(errors, dtype=float)
    if not len(e):
        return ErrorStats(n=0, median=0.0, p90=0.0, share_high=0.0)
    a = np.abs(e)
    return ErrorStats(n=len(e), median=round(float(np.median(a)), 4), p90=round(float(np.percentile(a, 90)), 4),
                      share_high=round(float((e > 0).mean()), 3))


def binned_table(rows: Sequence[CollectiveTiming]) -> list[tuple[float, float]]:
    """(median bytes, median seconds) per factor-2 bin of message size, times made
    non-decreasing in size (a larger message never costs less)."""
    sizes = np.array([r.nbytes for r in rows], dtype=float)
    times = np.array([r.time_s for r in rows])
    bins = np.floor(np.log2(sizes)).astype(int)
    out, floor = [], 0.0
    for b in sorted(set(bins.tolist())):
        m = bins == b
        floor = max(floor, float(np.median(times[m])))
        out.append((float(np.median(sizes[m])), floor))
    return out


class CollectiveFit(NamedTuple):
    collectives: Collectives
    error: ErrorStats | None  # the table against the raw rows it summarises


def allreduce_collectives(interconnect: str, rows: Sequence[CollectiveTiming]) -> CollectiveFit:
    """Tables per GPU count, from the rows whose GPUs all sit in one node."""
    by_gpus: dict[int, list[CollectiveTiming]] = {}
    for r in rows:
        if r.devices_per_node == r.gpus:
            by_gpus.setdefault(r.gpus, []).append(r)
    table = {g: binned_table(rs) for g, rs in sorted(by_gpus.items())}
    biggest = max(table)
    size, t = table[biggest][-1]
    bandwidth = 2 * (biggest - 1) / biggest * size / t  # ring bytes per GPU over the time
    latency = table[biggest][0][1]
    c = Collectives(interconnect=interconnect, allreduce=table, latency_s=latency, bandwidth=bandwidth,
                    fallback=f"latency and bandwidth of the {biggest}-GPU table's smallest and largest messages")
    ar = AllReduce({g: (tuple(b for b, _ in v), tuple(x for _, x in v)) for g, v in table.items()},
                   latency, bandwidth)
    errs = [ar.time(r.nbytes, r.gpus) / r.time_s - 1 for rs in by_gpus.values() for r in rs]
    return CollectiveFit(c, error_stats(errs))


def send_recv_fallback(interconnect: str, rows: Sequence[CollectiveTiming]) -> Collectives:
    """No all-reduce measured: a ring all-reduce priced from point-to-point timings within a
    node (2 x the small-message time as its latency, the large messages' bandwidth)."""
    local = [r for r in rows if r.devices_per_node >= r.gpus] or list(rows)
    table = binned_table(local)
    size, t = table[-1]
    return Collectives(interconnect=interconnect, allreduce={}, latency_s=2 * table[0][1], bandwidth=size / t,
                       fallback=f"no all-reduce measured: a ring over {interconnect} send/recv "
                       f"(latency 2 x its smallest messages', bandwidth of its largest)")


def datasheet_collectives(interconnect: str, bandwidth: float, latency_s: float) -> Collectives:
    return Collectives(interconnect=interconnect, allreduce={}, latency_s=latency_s, bandwidth=bandwidth,
                       fallback="no collective measured: the preset's datasheet interconnect bandwidth "
                       "and assumed latency")
