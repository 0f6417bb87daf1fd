"""The metrics table of a validation: every latency statistic and throughput of the real
run next to the simulated one, with the relative error (sim - real) / real, and the
accuracy targets of the validation study (issue 6)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

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


def target_legend() -> str:
    """What a `*` in the printed table means, built from the targets above so the header
    names exactly the rows that are judged."""
    labels = dict(LATENCIES)
    by_target: dict[float, list[str]] = {}
    for stat, stat_label in STATS:
        by_target.setdefault(STAT_TARGET[stat], []).append(stat_label)
    stats = ", ".join(f"{t * 100:g}% {'/'.join(names)}" for t, names in by_target.items())
    unjudged = " and ".join(label for stem, label in LATENCIES if stem not in TARGETED)
    return (f"! = overloaded run, not judged; * = over target ({', '.join(labels[s] for s in TARGETED)}: {stats}; throughput "
            f"{THROUGHPUT_TARGET * 100:g}%; {unjudged} are not judged)")


def rel_error(real: float, sim: float) -> float:
    """(sim - real) / real; 0 when equal (a run against itself), NaN when undefined."""
    if real == sim:
        return 0.0
    if real is None or sim is None or not (math.isfinite(real) and math.isfinite(sim)) or real == 0:
        return math.nan
    return (sim - real) / abs(real)


@dataclass(frozen=True)
class Cell:
    key: str  # the summary key, e.g. p99_ttft_ms
    metric: str  # label of the quantity, e.g. TTFT
    stat: str  # mean | p50 | p90 | p99 | value
    real: float
    sim: float
    error: float  # relative, signed
    target: float | None  # allowed |error|, None where not targeted
    overloaded: bool = False  # a latency of an overloaded run: not judged as steady state

    @property
    def ok(self) -> bool | None:
        if self.target is None or self.overloaded:
            return None
        return bool(math.isfinite(self.error) and abs(self.error) <= self.target)

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def _cell(key: str, metric: str, stat: str, real: dict, sim: dict, target: float | None,
          overloaded: bool = False) -> Cell:
    r, s = float(real.get(key, math.nan)), float(sim.get(key, math.nan))
    return Cell(key, metric, stat, r, s, rel_error(r, s), target, overloaded)


def compare_summaries(real: dict[str, float], sim: dict[str, float],
                      overloaded: bool = False) -> list[Cell]:
    """One cell per latency statistic (ms), then one per throughput figure. overloaded
    (either run's queue grew through it): latencies are flagged, not judged."""
    cells = []
    for stem, label in LATENCIES:
        for stat, stat_label in STATS:
            target = STAT_TARGET[stat] if stem in TARGETED else None
            cells.append(_cell(f"{stat}_{stem}_ms", label, stat_label, real, sim, target, overloaded))
    for key, label in THROUGHPUTS:
        cells.append(_cell(key, label, "value", real, sim, THROUGHPUT_TARGET))
    return cells


def misses(cells: list[Cell]) -> list[Cell]:
    """Targeted cells whose error is over the target (or undefined)."""
    return [c for c in cells if c.ok is False]


def worst(cells: list[Cell]) -> float:
    """Largest |error| over the targeted cells (NaN if there is none defined)."""
    errs = [abs(c.error) for c in cells if c.target is not None and math.isfinite(c.error)]
    return max(errs) if errs else math.nan
