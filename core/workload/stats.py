"""What a workload looks like: size, span, rate, burstiness and length percentiles,
as a flat dict (JSON-ready) and as text."""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.prefix_cache import chain
from batchlab.core.workload.workload import Workload

PERCENTILES = (50, 90, 99)


def mean_rate(w: Workload) -> float:
    """Requests per second between the first and last arrival: (n - 1) / span, the rate
    whose mean gap matches (the convention of the Gamma generator). inf when all arrive
    at once; nan for fewer than two requests."""
    if len(w) < 2:
        return math.nan
    span = float(w.arrival[-1] - w.arrival[0])
    return (len(w) - 1) / span if span > 0 else math.inf


def interarrival_cv(w: Workload) -> float:
    """Coefficient of variation of the gaps between arrivals: 1 for Poisson; a Gamma
    process of shape b (vllm's --burstiness) has CV 1/sqrt(b)."""
    gaps = np.diff(w.arrival)
    if len(gaps) < 2 or gaps.mean() == 0:
        return math.nan
    return float(gaps.std() / gaps.mean())


def reusable_prefix_fraction(w: Workload) -> float:
    """The prompt tokens an unbounded prefix cache would serve: per request, the leading
    hash blocks some earlier request already had (whole chain equal), never its last
    token; over all prompt tokens. NaN without prefix hashes. The most caching can give:
    a real pool evicts."""
    if w.prefix_hashes is None or not len(w):
        return math.nan
    seen: set[int] = set()
    hbs, reused = w.hash_block_size, 0
    for hashes, p in zip(w.prefix_hashes, w.prompt_len.tolist()):
        keys = chain(hashes[:p // hbs])
        k = next((i for i, key in enumerate(keys) if key not in seen), len(keys))
        reused += min(k * hbs, p - 1)
        seen.update(keys)
    return reused / float(w.prompt_len.sum())


def workload_stats(w: Workload) -> dict[str, float]:
    n = len(w)
    out: dict[str, float] = {"num_requests": n}
    out["span_s"] = float(w.arrival[-1] - w.arrival[0]) if n else 0.0
    out["mean_rate"] = mean_rate(w)
    out["interarrival_cv"] = cv = interarrival_cv(w)
    out["gamma_shape"] = 1 / cv**2 if cv > 0 else math.nan  # the --burstiness it matches
    gaps = np.diff(w.arrival)
    out["max_gap_s"] = float(gaps.max()) if len(gaps) else math.nan
    # The busiest one-second bin, as a multiple of the mean rate: how bursty it feels.
    if n and out["span_s"] > 0:
        per_s = np.bincount(((w.arrival - w.arrival[0]) // 1.0).astype(np.int64))
        out["peak_rate_1s"] = float(per_s.max())
    else:
        out["peak_rate_1s"] = math.nan
    for name, col in (("prompt", w.prompt_len), ("output", w.output_len)):
        out[f"{name}_mean"] = float(col.mean()) if n else math.nan
        for p in PERCENTILES:
            out[f"{name}_p{p}"] = float(np.percentile(col, p)) if n else math.nan
        out[f"{name}_max"] = float(col.max()) if n else math.nan
        out[f"{name}_total"] = float(col.sum())
    out["reusable_prefix_fraction"] = reusable_prefix_fraction(w)
    return out


def _num(x: float, fmt: str = "{:.0f}") -> str:
    return "-" if isinstance(x, float) and math.isnan(x) else fmt.format(x)


def format_stats(s: dict[str, float]) -> str:
    """A short human-readable block."""
    lines = [
        f"requests          {s['num_requests']:.0f}",
        f"span              {_num(s['span_s'], '{:.1f}')} s",
        f"mean rate         {_num(s['mean_rate'], '{:.3g}')} req/s "
        f"(busiest second: {_num(s['peak_rate_1s'])} requests)",
        f"burstiness        inter-arrival CV {_num(s['interarrival_cv'], '{:.2f}')} "
        f"(Gamma shape {_num(s['gamma_shape'], '{:.2g}')}; Poisson: CV 1), "
        f"longest gap {_num(s['max_gap_s'], '{:.1f}')} s",
        f"{'tokens':17} {'mean':>8} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8} {'total':>12}",
    ]
    if not math.isnan(s.get("reusable_prefix_fraction", math.nan)):
        lines.insert(4, f"reusable prefix  {s['reusable_prefix_fraction']:.1%} of prompt tokens "
                        f"(an unbounded prefix cache's hit rate)")
    for name in ("prompt", "output"):
        cells = [_num(s[f"{name}_{k}"]) for k in ("mean", "p50", "p90", "p99", "max")]
        lines.append(f"  {name:15} " + " ".join(f"{c:>8}" for c in cells)
                     + f" {_num(s[f'{name}_total']):>12}")
    return "\n".join(lines)
