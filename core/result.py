"""A finished run (simulated or real): the two tables, the inter-token gaps, its typed
metadata (core/run_meta.py). core/run_folder.py writes it to a run folder and reads it back."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from batchlab.core.kv_tiers.columns import tier_summary
from batchlab.core.metrics import MetricsRecorder
from batchlab.core.run_meta import RunMeta
from batchlab.core.summary import SLO, step_totals, summarize


@dataclass
class RunResult:
    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray] | None  # None when the run kept totals only
    itl_gaps: np.ndarray  # inter-token gaps (s); itl_counts[i] tokens had gap itl_gaps[i]
    itl_counts: np.ndarray
    meta: RunMeta = field(default_factory=RunMeta)  # what ran: policy, model, hardware, seed, ...
    totals: dict = field(default_factory=dict)  # step totals, for runs without a step table

    @classmethod
    def from_recorder(cls, rec: MetricsRecorder, meta: RunMeta | None = None,
                      release: bool = False) -> "RunResult":
        """release: the recorder hands its request rows over (MetricsRecorder.request_table)."""
        return cls(rec.request_table(release), rec.step_table(), *rec.itl(), meta or RunMeta(),
                   dict(rec.totals))

    @property
    def itl(self) -> np.ndarray:
        """Every inter-token gap, one value per token (large: prefer itl_gaps/itl_counts)."""
        return np.repeat(self.itl_gaps, self.itl_counts)

    def summary(self, slo: SLO | None = None, checked: bool = False) -> dict[str, float]:
        """The summary; ValueError if the run produced a non-finite time (see
        check_finite): a result that cannot be trusted is an error, never nulls.
        checked: the caller ran check_finite already."""
        if not checked:
            check_finite(self)
        totals = step_totals(self.steps) if self.steps is not None else self.totals
        s = summarize(self.requests, totals, (self.itl_gaps, self.itl_counts), slo)
        s.update(tier_summary(self.steps, self.totals, s.get("prefix_cache_queries", 0)))  # {} without a tier
        spec = self.meta.speculative
        if spec is not None:  # only a run that speculated has these
            m = spec.mean_acceptance_length
            s["mean_acceptance_length"] = math.nan if m is None else float(m)
        bad = _infinite(s)
        if bad:  # finite times whose statistics overflow (a std of 1e232 s steps)
            raise ValueError(f"the run's {bad} is infinite: an input beyond the checked ranges")
        return s


# Times a finished request has; a rejected one has none of them (empty, NaN, by design:
# it was never scheduled), an unfinished one (an interrupted run) only some.
_FINISHED_TIMES = ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s")


def _infinite(summary: dict, prefix: str = "") -> str | None:
    """The first summary figure (nested breakdowns too) that is +-inf."""
    for key, value in summary.items():
        if isinstance(value, dict):
            found = _infinite(value, f"{prefix}{key}.")
            if found:
                return found
        elif isinstance(value, float) and math.isinf(value):
            return prefix + key
    return None


def check_finite(result: RunResult) -> None:
    """Every time of a finished request, every step and every inter-token gap is a
    finite number. Summary figures are then finite too, except a statistic over an
    empty set (TPOT when every reply is one token; latencies when nothing finished),
    which is NaN (null in JSON, empty in a table)."""
    req = result.requests
    done = None  # compared only where a time is not finite (a pass over the status objects)
    # A client-side measurement (batchlab replay) cannot see some times at all: it names
    # them in meta.unobserved, and their statistics are NaN, not errors.
    unobserved = set(result.meta.unobserved)
    for col in (c for c in _FINISHED_TIMES if c not in unobserved):
        finite = np.isfinite(np.asarray(req[col], float))  # a float column as it is, no copy
        if finite.all():
            continue
        done = req["status"] == "finished" if done is None else done
        bad = done & ~finite
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"the run produced a non-finite {col} ({req[col][i]}) for request "
                             f"{req['request_id'][i]}: an input beyond the checked ranges")
    if not np.isfinite(np.asarray(req["arrival_s"], float)).all():
        raise ValueError("the run produced a non-finite arrival time")
    if result.steps is not None:
        for col in ("start_s", "duration_s"):
            if not np.isfinite(result.steps[col]).all():
                raise ValueError(f"the run produced a non-finite step {col}: a cost setting "
                                 f"beyond the checked ranges")
    if len(result.itl_gaps) and not np.isfinite(result.itl_gaps).all():
        raise ValueError("the run produced a non-finite inter-token gap")
