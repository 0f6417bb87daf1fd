"""Per-request error of simulated against observed timings, as validate reports it:
absolute percentage error of TTFT and TPOT, median and p90; and the server's own
run-to-run spread on the same measure (two replays of one request list), the floor no
price can beat."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from batchlab.calibration.from_replay.predict import Case


SEND_SLACK_S, SEND_SLACK = 0.05, 0.02


# Two sends of the same requests differing by more than this (median per request, TTFT or
# TPOT) mean the machine's speed moved while they ran: docs/MEASURING.md saw 12-17% a
# request, up to 43% median TPOT with five sessions sharing one machine. A fit judged
# against such a spread measures the machine, not the fit.
UNSTEADY_PCT = 45.0


@dataclass(frozen=True)
class Errors:
    n: int  # requests judged
    ttft_median_pct: float
    ttft_p90_pct: float
    tpot_median_pct: float
    tpot_p90_pct: float

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        return (f"TTFT median {self.ttft_median_pct:.1f}% (p90 {self.ttft_p90_pct:.1f}%), TPOT median "
                f"{self.tpot_median_pct:.1f}% (p90 {self.tpot_p90_pct:.1f}%) over {self.n} requests")

    @property
    def unsteady(self) -> bool:
        """As a spread between two sends of the same requests: beyond UNSTEADY_PCT."""
        return max(self.ttft_median_pct, self.tpot_median_pct) > UNSTEADY_PCT


def _ape(sim: np.ndarray, obs: np.ndarray) -> np.ndarray:
    ok = np.isfinite(obs) & (obs > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.abs(sim[ok] / obs[ok] - 1) * 100
    return np.where(np.isfinite(e), e, 900.0)  # not finished in the simulation: 10x off


def per_request(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
                ) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) absolute percentage errors of every request judged; parts: (simulated
    ttft, simulated tpot, observed ttft, observed tpot) per case."""
    if not parts:
        return np.zeros(0), np.zeros(0)
    return (np.concatenate([_ape(s, o) for s, _, o, _ in parts]),
            np.concatenate([_ape(s, o) for _, s, _, o in parts]))


def errors(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> Errors | None:
    """parts: (simulated ttft, simulated tpot, observed ttft, observed tpot) per case."""
    a, b = per_request(parts)
    if not a.size:
        return None

    def q(x, p):
        return float(np.percentile(x, p)) if x.size else float("nan")
    return Errors(int(a.size), q(a, 50), q(a, 90), q(b, 50), q(b, 90))


def repeats(cases: list[Case]) -> list[tuple[Case, Case]]:
    """Pairs of cases that sent the same request list (the same lengths in order, each sent
    within SEND_SLACK_S or SEND_SLACK of the span of the other's send): repeats of one
    workload. A client's schedule on a busy machine drifts by tens of ms."""
    out = []
    for i, a in enumerate(cases):
        for b in cases[i + 1:]:
            wa, wb = a.workload, b.workload
            if (len(wa) == len(wb) and np.array_equal(wa.prompt_len, wb.prompt_len)
                    and np.array_equal(wa.output_len, wb.output_len)
                    and np.allclose(wa.arrival, wb.arrival,
                                    atol=max(SEND_SLACK_S, SEND_SLACK * float(wa.arrival[-1])))):
                out.append((a, b))
    return out


def noise_floor(cases: list[Case]) -> tuple[Errors | None, str]:
    """The server's run-to-run spread: one repeat judged against the other, request by
    request; (None, why) without a repeat."""
    pairs = repeats(cases)
    if not pairs:
        return None, "no two replays of the same request list: the server's own spread is unknown"
    e = errors([(b.ttft, b.tpot, a.ttft, a.tpot) for a, b in pairs])
    return e, "; ".join(f"{b.where} against {a.where}" for a, b in pairs)
