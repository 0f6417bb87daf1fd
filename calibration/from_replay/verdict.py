"""Which profile a fit from request timings writes, and what the reader is told about it.

Better of the two: the fitted profile and the prior are judged on the same held-out
requests (run.py); the score is the mean of the median TTFT and TPOT errors (the fit
quality a profile stores). Where the fit scores worse, the prior is written unless the
user keeps the fit (--keep-fit), and one line says so either way.

Load regime: a fit on a lightly loaded part says little about a saturated one (there the
queue multiplies every cost error). Measured from the client timings alone, against the
engine's seats: a moment is *saturated* when more requests are in flight (sent, last
token not yet received) than the engine has seats, so at least one waits for a seat. Each
part's saturated share is the share of its span (its first send to its last token) that
is saturated, counting every request of its replay in flight (those of the other part
too). The two parts ran in different regimes when their saturated shares differ by
REGIME_GAP or more: one spent at least half its time queued more than the other. A server
whose KV pool fills before its seats queues unseen by this measure."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from batchlab.calibration.from_replay.judge import Errors
from batchlab.calibration.from_replay.predict import Case

REGIME_GAP = 0.5
WRITTEN_FIT, WRITTEN_PRIOR = "fit", "prior"


@dataclass(frozen=True)
class Regime:
    """How loaded one part of the replays ran: requests in flight over its span."""
    requests: int
    span_s: float
    mean_in_flight: float  # time-weighted over the span (Little's law)
    seats: int
    saturated_share: float  # of the span with more in flight than seats

    def as_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        return (f"{self.mean_in_flight:.1f} requests in flight on average ({self.mean_in_flight / self.seats:.2f} "
                f"of {self.seats} seats), more than the seats {self.saturated_share:.0%} of the time")


def in_flight_profile(send: np.ndarray, done: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """(durations, counts) of the piecewise-constant number of requests in flight over
    [lo, hi]; a request is in flight from its send to its last token."""
    t = np.concatenate([send, done, [lo, hi]])
    step = np.concatenate([np.ones(len(send)), -np.ones(len(done)), [0.0, 0.0]])
    order = np.lexsort((-step, t))  # at a tie, a send before a finish: never negative
    t, count = t[order], np.cumsum(step[order])
    dur = np.diff(np.clip(t, lo, hi))
    return dur, count[:-1]


def finish_times(c: Case) -> np.ndarray:
    """Each request's last token, from its send: TTFT plus TPOT for every later token."""
    more = np.where(np.isfinite(c.tpot), c.tpot, 0.0) * np.maximum(c.workload.output_len - 1, 0)
    return c.workload.arrival + c.ttft + more


def regime(cases: list[Case], masks: list[np.ndarray], seats: int) -> Regime | None:
    """The regime of the requests in `masks` (per case), or None where none is."""
    n, span, area, saturated = 0, 0.0, 0.0, 0.0
    for c, m in zip(cases, masks):
        if not m.any():
            continue
        send, done = c.workload.arrival, finish_times(c)
        lo, hi = float(send[m].min()), float(done[m].max())
        dur, count = in_flight_profile(send, done, lo, hi)
        n, span = n + int(m.sum()), span + (hi - lo)
        area += float(np.sum(dur * count))
        saturated += float(np.sum(dur[count > seats]))
    if not n:
        return None
    if span <= 0:
        return Regime(n, 0.0, 0.0, seats, 0.0)
    return Regime(n, span, area / span, seats, saturated / span)


def score(e: Errors) -> float:
    return (e.ttft_median_pct + e.tpot_median_pct) / 2


@dataclass(frozen=True)
class Verdict:
    written: str  # WRITTEN_FIT | WRITTEN_PRIOR
    why: str
    fit_worse: bool
    fitted_regime: Regime | None
    judged_regime: Regime | None

    @property
    def regimes_differ(self) -> bool:
        f, j = self.fitted_regime, self.judged_regime
        return f is not None and j is not None and abs(f.saturated_share - j.saturated_share) >= REGIME_GAP

    def warnings(self) -> list[str]:
        """One line each: the fit worse than the prior; the parts in different regimes."""
        out = [f"WARNING: {self.why}"] if self.fit_worse else []
        if self.regimes_differ:
            f, j = self.fitted_regime, self.judged_regime
            out.append(f"WARNING: fitted and judged in different load regimes (saturated shares "
                       f"{REGIME_GAP:.0%} or more apart): fitted on {f.text()}; judged on {j.text()}")
        return out

    def as_dict(self) -> dict:
        return {"profile": self.written, "why": self.why, "fit_worse_than_prior": self.fit_worse,
                "regimes": {"fitted": self.fitted_regime and self.fitted_regime.as_dict(),
                            "judged": self.judged_regime and self.judged_regime.as_dict(),
                            "differ": self.regimes_differ, "criterion": (
                                f"the share of each part's span with more requests in flight than seats, "
                                f"{REGIME_GAP:.0%} or more apart")}}


def decide(heldout: Errors | None, heldout_prior: Errors | None, keep_fit: bool,
           fitted: Regime | None, judged: Regime | None) -> Verdict:
    """keep_fit: write the fit even where the prior did better on the held-out requests."""
    if heldout is None or heldout_prior is None:
        return Verdict(WRITTEN_FIT, "nothing held out: the fit is written unjudged", False, fitted, judged)
    figures = (f"the {heldout.n} held-out requests (median TTFT/TPOT error {heldout.ttft_median_pct:.1f}%/"
               f"{heldout.tpot_median_pct:.1f}% against {heldout_prior.ttft_median_pct:.1f}%/"
               f"{heldout_prior.tpot_median_pct:.1f}%; their mean {score(heldout):.1f}% against "
               f"{score(heldout_prior):.1f}%)")
    if score(heldout) <= score(heldout_prior):
        return Verdict(WRITTEN_FIT, f"the fit did better than the prior on {figures}", False, fitted, judged)
    worse = f"the fit did worse than the prior on {figures}"
    if keep_fit:
        return Verdict(WRITTEN_FIT, f"{worse}: the fit is written as --keep-fit asks", True, fitted, judged)
    return Verdict(WRITTEN_PRIOR, f"{worse}: the prior is written (--keep-fit writes the fit)", True, fitted, judged)
