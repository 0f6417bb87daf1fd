"""A benchmark row's closed loop, simulated once and kept as its steps, so that any price
of those steps gives the row's mean TTFT and TPOT without simulating again.

Under the lockstep and perturbed clients (client.py) a step's batch does not depend on how
long steps take: every send follows a reply at a step's end, and the scheduler decides at step
boundaries, so the same steps run in the same order whatever they cost. A request's TTFT
is then the sum of the durations of the steps from its send to its first token, its TPOT
that of the steps from its first token to its last over its output length less one: the
row's means are fixed weights on the step durations (check_reproduces proves it against
the simulator's own summary)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab import sim
from batchlab.calibration.served_bench.client import DEFAULT_CLIENT, ROUNDS, benchmark_workload
from batchlab.calibration.served_bench.read import BenchmarkRow
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import CostModel
from batchlab.core.cost.served.host import async_by_default
from batchlab.core.features import FEATURE_NAMES, StepFeatures
from batchlab.core.step_table import step_features

# The clients whose users all send at t=0 and re-send at a step's end: the others (a spread
# start, a front end's delay) put sends between step boundaries, where a price moves them.
RECORDABLE = ("perturbed", "lockstep")


# A step's price is, in every GPU form, a function of its batch (these features) plus
# terms linear in its attention counts (the rest); RecordedRow prices each distinct batch
# once and the counts by their coefficients, and checks that against step-by-step pricing.
BATCH = ("num_seqs", "num_prefill_seqs", "prefill_tokens", "decode_tokens", "after_prefill", "after_idle")
LINEAR = tuple(n for n in FEATURE_NAMES if n not in BATCH)
PROBE = 1_000_000  # counts the coefficients are measured over (well above rounding)


@dataclass(frozen=True)
class RecordedRow:
    row: BenchmarkRow
    batches: list[StepFeatures]  # each distinct batch, its attention counts 0
    batch_of: np.ndarray  # per step: its index in batches
    counts: np.ndarray  # per step: its LINEAR features
    ttft_weights: np.ndarray  # mean TTFT = weights . step durations
    tpot_weights: np.ndarray

    def means(self, durations: np.ndarray) -> tuple[float, float]:
        """(mean TTFT, mean TPOT) in seconds for these step durations. Summed products, not
        `@`: a threaded BLAS on a shared 2-core machine takes 50x longer over a vector."""
        return float((self.ttft_weights * durations).sum()), float((self.tpot_weights * durations).sum())

    def durations(self, cost: CostModel) -> np.ndarray:
        zero = self.batches[0]
        at_zero = cost.step_time(zero)
        coef = np.array([(cost.step_time(zero._replace(**{n: PROBE})) - at_zero) / PROBE for n in LINEAR])
        return np.array([cost.step_time(f) for f in self.batches])[self.batch_of] + (self.counts * coef).sum(axis=1)

    def priced(self, cost: CostModel) -> tuple[float, float]:
        return self.means(self.durations(cost))


def _split(steps: list[StepFeatures]) -> tuple[list[StepFeatures], np.ndarray, np.ndarray]:
    keys: dict[StepFeatures, int] = {}
    batch_of = np.empty(len(steps), dtype=np.int64)
    for i, f in enumerate(steps):
        batch = f._replace(**{n: 0 for n in LINEAR})
        batch_of[i] = keys.setdefault(batch, len(keys))
    counts = np.array([[getattr(f, n) for n in LINEAR] for f in steps], dtype=float).reshape(len(steps), len(LINEAR))
    return list(keys), batch_of, counts


def _covering(steps: int, first: np.ndarray, last: np.ndarray, weight: np.ndarray | float = 1.0) -> np.ndarray:
    """Per step: the summed weight of the spans [first, last] (step indices) covering it."""
    w = np.zeros(steps + 1)
    np.add.at(w, first, weight)
    np.add.at(w, last + 1, -weight)
    return np.cumsum(w)[:-1]


def record(row: BenchmarkRow, cost: CostModel, scheduler: SchedulerConfig, blocks: int,
           rounds: int = ROUNDS, client: str = DEFAULT_CLIENT) -> RecordedRow:
    """The row's loop under `client` (the judge's, validate --served-benchmarks, by default),
    `rounds` requests a user, as its steps and the weights giving its means; on an engine
    that schedules asynchronously by default (its version, host.py), a request reaching it
    busy joins a step later (sim/admission.py), in step counts, so still step-locked."""
    if client not in RECORDABLE:
        raise ValueError(f"client model {client!r} cannot be recorded: its sends fall between steps "
                         f"(expected one of {', '.join(RECORDABLE)})")
    result = sim.simulate(benchmark_workload(row, client, rounds=rounds), scheduler, cost, blocks,
                          async_scheduling=async_by_default(row.engine_version))
    steps, req = result.steps, result.requests
    starts = np.asarray(steps["start_s"], dtype=float)
    durations = np.asarray(steps["duration_s"], dtype=float)
    ends = starts + durations
    done = req["status"] == "finished"
    if not done.all():
        raise ValueError(f"{row.describe()} ({row.place}): {int((~done).sum())} requests not served in "
                         f"the simulation (KV pool or seats too small for the benchmark)")
    eps = 1e-9 * max(1.0, float(ends[-1]))
    # A request's steps: from the first starting at or after its send to the one ending at its token.
    sent = np.searchsorted(starts, req["arrival_s"] - eps, side="left")
    first = np.searchsorted(ends, req["first_token_s"] - eps, side="left")
    last = np.searchsorted(ends, req["finish_s"] - eps, side="left")
    ttft = _covering(len(ends), sent, first) / len(sent)
    outputs = np.asarray(req["output_len"], dtype=float)
    many = outputs > 1
    tpot = np.zeros(len(ends))
    if many.any():  # the steps after the first token, each request's share over its gaps
        tpot = _covering(len(ends), first[many] + 1, last[many], 1.0 / (outputs[many] - 1)) / int(many.sum())
    recorded = RecordedRow(row, *_split(step_features(steps)), ttft, tpot)
    check_reproduces(recorded, durations, result.summary())
    if not np.allclose(recorded.durations(cost), durations, rtol=1e-7, atol=0):
        raise AssertionError(f"{row.describe()}: its steps' prices are not a batch's plus linear "
                             f"attention terms in this cost form")
    return recorded


def check_reproduces(r: RecordedRow, durations: np.ndarray, summary: dict) -> None:
    """The weights give the simulator's own means, or the row's loop is not step-locked."""
    ttft, tpot = r.means(durations)
    for name, mine, theirs in (("TTFT", ttft, summary["mean_ttft_ms"] / 1e3),
                               ("TPOT", tpot, summary["mean_tpot_ms"] / 1e3)):
        if not abs(mine - theirs) <= 1e-6 * max(abs(theirs), 1e-9):
            raise AssertionError(f"{r.row.describe()}: step weights give mean {name} {mine!r}, the "
                                 f"simulator {theirs!r}")
