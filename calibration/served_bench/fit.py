"""The served-engine constants (core/cost/served/terms.py) fitted on benchmark rows, and
judged on rows left out of the fit by model, by TP degree or by concurrency.

Each row is simulated once (recorded.py) with its operator-fitted price, under the client
the judgement assumes (client.py DEFAULT_CLIENT, ROUNDS requests a user); a trial set of
constants then prices the row's recorded steps as the served engine runs them
(core/cost/served/model.py) and gives its mean TPOT and TTFT, exactly as simulating the row
again would. The fit minimises the soft-L1 loss of log(predicted / measured) mean TPOT over
the rows (scipy least_squares, trf): TTFT is judged, not fitted, because it depends on the
benchmark client's phasing, which the rows do not state. What the rows tell of each fitted
term is read off the fit's Jacobian (calibration/fit/posterior.py): its spread as a factor,
whether the rows say next to nothing of it (UNTOLD), and the pairs they tell only together
(TOGETHER)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from batchlab.calibration.fit.posterior import spread, told_together
from batchlab.calibration.served_bench.judge import Predicted
from batchlab.calibration.served_bench.recorded import RecordedRow
from batchlab.core.cost.gpu_form import GpuCostModel
from batchlab.core.cost.served.engine import VLLM, EngineFacts
from batchlab.core.cost.served.formats import (BF16_PRIOR, BF16_TERM, MOE_COMPUTE_SHARE, RATE_TERMS, RATES,
                                               WeightFormats, terms_told)
from batchlab.core.cost.served.host import HOST_OVERLAP
from batchlab.core.cost.served.model import ServedGpuCost
from batchlab.core.cost.served.terms import BOUNDS, GRAPH_FIXED_SHARE, PRIORS, SYMM_MEM_EFFICIENCY, ServedTerms

START = ServedTerms(graph_fixed_share=0.3, custom_allreduce_scale=0.3, symm_mem_efficiency=0.6,
                    attention_speedup=1.3, elementwise_share=0.5, bf16_gemm_speedup=1.1, step_s=0.5e-3, seq_s=5e-6,
                    **{r.term: r.prior for r in RATES.values()})
SEQ_S_FLOOR = 1e-7  # the fit works in logs: seq_s's bound 0 becomes this
# For the spreads only (the fit itself has no prior): a row's mean TPOT repeats within a few
# percent between runs, and each term is trusted to ~4x either way before the rows are read.
ROW_NOISE = 0.05
PRIOR_SD = math.log(4.0)
UNTOLD = 0.9  # a term whose spread stays above this share of the prior's: the rows say next to nothing of it
TOGETHER = 0.9  # pairs correlated beyond this either way: told only as a combination


class Priced(NamedTuple):
    """What a row is priced on: its operator-fitted GPU cost and the engine's settings."""
    base: GpuCostModel
    max_num_seqs: int
    gpu: str  # catalogue name: the engine's all-reduce paths depend on its architecture
    nvlink: bool
    formats: WeightFormats = WeightFormats()  # its GEMMs' weight formats (their rate terms)


@dataclass(frozen=True)
class ServedFit:
    terms: ServedTerms
    rows: list[Predicted]  # the fitted rows, priced by the fitted terms
    rms_log: float
    evaluations: int
    seconds: float
    at_bound: list[str]  # terms the data pushed to a bound: not told by these rows
    held: list[str] = field(default_factory=list)  # rate terms at their prior: no row runs the format
    spread: dict[str, float] = field(default_factory=dict)  # fitted term (not at a bound): its sd as a factor
    untold: list[str] = field(default_factory=list)  # fitted terms the rows say next to nothing of
    flat: list[str] = field(default_factory=list)  # of those, the ones no row's price moves with at the fit
    together: list[tuple[str, str, float]] = field(default_factory=list)  # (a, b, correlation)


def served_cost(p: Priced, terms: ServedTerms, facts: EngineFacts = VLLM) -> ServedGpuCost:
    return ServedGpuCost.build(p.base, terms, facts, p.max_num_seqs, p.gpu, p.nvlink, formats=p.formats)


def predict(rows: list[RecordedRow], priced: list[Priced], terms: ServedTerms) -> list[Predicted]:
    out = []
    for r, p in zip(rows, priced):
        ttft, tpot = r.priced(served_cost(p, terms))
        out.append(Predicted(r.row, ttft, tpot))
    return out


def _bounds(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    lo = [math.log(max(BOUNDS[n][0], SEQ_S_FLOOR)) for n in names]
    hi = [math.log(BOUNDS[n][1]) for n in names]
    return np.array(lo), np.array(hi)


def held_terms(priced: list[Priced]) -> list[str]:
    """The terms a fit on these rows holds at their priors: the rates of formats no row runs,
    the host overlap (host.py: the rows cannot tell it from step_s) and the CUDA graphs'
    share of the tables' fixed costs (terms.py GRAPH_FIXED_SHARE: nothing for them to remove);
    the fused-MoE kernel's share (formats.py MOE_COMPUTE_SHARE: from kernel tables, and only
    one model's rows, with its own format's rate, would tell it)."""
    told = terms_told([p.formats for p in priced])
    return [n for n in (BF16_TERM, *RATE_TERMS) if n not in told] + [HOST_OVERLAP.term, GRAPH_FIXED_SHARE.term,
                                                                      SYMM_MEM_EFFICIENCY.term, MOE_COMPUTE_SHARE.term]


def fit(rows: list[RecordedRow], priced: list[Priced], start: ServedTerms = START) -> ServedFit:
    """ValueError where there are fewer rows than terms to fit. The rate terms of formats
    no row runs, and the host overlap, are held at their priors (held_terms)."""
    from scipy.optimize import least_squares  # lazy: scipy

    held = held_terms(priced)
    names = tuple(n for n in ServedTerms.names() if n not in held)
    if len(rows) <= len(names):
        raise ValueError(f"{len(rows)} configurations cannot tell {len(names)} served-engine terms apart: "
                         f"give at least {len(names) + 1}")
    lo, hi = _bounds(names)
    x0 = np.clip([math.log(max(getattr(start, n), SEQ_S_FLOOR)) for n in names], lo + 1e-9, hi - 1e-9)
    measured = np.log([r.row.tpot_s for r in rows])

    def terms_of(x: np.ndarray) -> ServedTerms:
        fixed = {n: BF16_PRIOR if n == BF16_TERM else PRIORS[n].prior for n in held}
        return ServedTerms(**fixed, **{n: float(np.clip(math.exp(v), *BOUNDS[n])) for n, v in zip(names, x)})

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log([p.tpot_s for p in predict(rows, priced, terms_of(x))]) - measured
    t0 = time.perf_counter()
    res = least_squares(residuals, x0, bounds=(lo, hi), method="trf", loss="soft_l1", f_scale=0.1,
                        diff_step=1e-3, max_nfev=400)
    terms = terms_of(res.x)
    at_bound = [n for n, v, a, b in zip(names, res.x, lo, hi) if v - a < 1e-3 or b - v < 1e-3]
    fitted = predict(rows, priced, terms)
    rms = float(np.sqrt(np.mean((np.log([p.tpot_s for p in fitted]) - measured) ** 2)))
    live = [i for i, n in enumerate(names) if n not in at_bound]
    spreads, untold, together, flat = _what_rows_tell([names[i] for i in live], res.jac[:, live], res.fun)
    return ServedFit(terms, fitted, rms, int(res.nfev), time.perf_counter() - t0, at_bound, held,
                     spread=spreads, untold=untold, flat=flat, together=together)


def _what_rows_tell(names: list[str], jac: np.ndarray, residuals: np.ndarray
                    ) -> tuple[dict[str, float], list[str], list[tuple[str, str, float]], list[str]]:
    """(spread factor by term, the terms the rows say next to nothing of, the pairs told only
    together, the terms no row's price moves with) from the fit's Jacobian in the log-terms.
    A term moves no price where the efficiency it scales is at the datasheet's ceiling
    (terms.py caps every one at 1) or no row takes the path it prices."""
    if not names:
        return {}, [], [], []
    sd, corr = spread(jac, residuals, ROW_NOISE, PRIOR_SD)
    factors = {n: float(math.exp(v)) for n, v in zip(names, sd)}
    flat = [n for n, col in zip(names, jac.T) if not np.abs(col).max() > 1e-12]
    untold = [n for n, v in zip(names, sd) if v / PRIOR_SD > UNTOLD]
    pairs = [p for p in told_together(names, corr, TOGETHER) if p[0] not in flat and p[1] not in flat]
    return factors, untold, pairs, flat


@dataclass(frozen=True)
class HeldOut:
    by: str  # model | tp | concurrency
    left_out: str  # the value left out
    fit: ServedFit  # on the others
    judged: list[Predicted]  # the left-out rows, priced by that fit


LEAVE_OUT: dict[str, Callable[[RecordedRow], str]] = {
    "model": lambda r: r.row.model, "tp": lambda r: f"TP {r.row.tp}",
    "concurrency": lambda r: "high" if r.row.concurrency >= 32 else "low"}


def leave_out(rows: list[RecordedRow], priced: list[Priced], by: str, start: ServedTerms = START) -> list[HeldOut]:
    """One fit per value of `by`, each judged on the rows of that value; a value whose rows
    leave too few to fit (fewer than the terms) is not judged."""
    key = LEAVE_OUT[by]
    out = []
    for value in sorted({key(r) for r in rows}):
        keep = [i for i, r in enumerate(rows) if key(r) != value]
        held = [i for i, r in enumerate(rows) if key(r) == value]
        if len(keep) <= len(ServedTerms.names()) - len(held_terms([priced[i] for i in keep])):
            continue
        f = fit([rows[i] for i in keep], [priced[i] for i in keep], start)
        out.append(HeldOut(by, value, f, predict([rows[i] for i in held], [priced[i] for i in held], f.terms)))
    return out
