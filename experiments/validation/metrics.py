"""The numbers a validation judges: every latency statistic and throughput figure of a
run's summary, the relative error (sim - real) / real, and the accuracy targets
(docs/validation.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass

# (summary key stem, label); the summary holds mean_, median_, p90_ and p99_<stem>_ms.
LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency"),
             ("queueing_delay", "queueing delay"))
STATS = (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99"))
THROUGHPUTS = (("request_throughput", "requests/s"), ("output_throughput", "output tokens/s"),
               ("total_token_throughput", "total tokens/s"))
# Targets: |relative error| on these latencies and on throughput (the three throughput
# figures share one error: the same work over the run's duration). ITL and queueing delay
# are reported but not targeted (queueing delay is near zero at light load, so its
# relative error says little).
TARGETED = ("ttft", "tpot", "e2el")
STAT_TARGET = {"mean": 0.05, "median": 0.05, "p90": 0.05, "p99": 0.10}
THROUGHPUT_TARGET = 0.05
LATENCY_SUFFIX = "_ms"  # the summary keys of latency statistics


@dataclass(frozen=True)
class Number:
    """One number of a summary that a validation reports."""
    key: str  # the summary key, e.g. p99_ttft_ms
    metric: str  # label of the quantity, e.g. TTFT
    stat: str  # mean | p50 | p90 | p99 | value
    target: float | None  # allowed |error|, None where not targeted
    latency: bool  # a latency statistic (flagged, not judged, in an overloaded run)


def numbers() -> list[Number]:
    """Every latency statistic (ms), then every throughput figure."""
    out = [Number(f"{stat}_{stem}_ms", label, stat_label, STAT_TARGET[stat] if stem in TARGETED else None, True)
           for stem, label in LATENCIES for stat, stat_label in STATS]
    return out + [Number(key, label, "value", THROUGHPUT_TARGET, False) for key, label in THROUGHPUTS]


def rel_error(real: float, sim: float) -> float:
    """(sim - real) / real; 0 when equal (a run against itself), NaN when undefined."""
    if real == sim:
        return 0.0
    if real is None or sim is None or not (math.isfinite(real) and math.isfinite(sim)) or real == 0:
        return math.nan
    return (sim - real) / abs(real)


def targets_text() -> str:
    """The targets, as the totals line ends: 'mean 5%, median 5%, p90 5%, p99 10%, throughput 5%'."""
    return ", ".join(f"{k} {t * 100:g}%" for k, t in STAT_TARGET.items()) + f", throughput {THROUGHPUT_TARGET * 100:g}%"


# Reported beside the judged numbers, not judged (no target): the hand-off and the decode queue.
POOL_NUMBERS = (Number("mean_kv_transfer_ms", "KV hand-off", "mean", None, True),
                Number("p99_kv_transfer_ms", "KV hand-off", "p99", None, True),
                Number("mean_decode_queue_ms", "decode queue", "mean", None, True))
