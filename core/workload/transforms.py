"""Transformations of a workload. Each returns a new Workload (the input is unchanged)
and appends one step to its description, so a result always says how it was made.
build_workload applies them in one fixed order (see config.py); they compose in any order
when called directly.

Scaling keeps a trace's shape on smaller hardware: dividing lengths by k keeps the length
distribution's shape (at k-times smaller scale), clipping bounds it by a context window,
and scaling the rate compresses or stretches time without changing burstiness.
"""
from __future__ import annotations

import math

import numpy as np

from batchlab.core.checks import MAX_TOKENS
from batchlab.core.workload.stats import mean_rate
from batchlab.core.workload.workload import Workload


def jitter(w: Workload, step_s: float, rng: np.random.Generator) -> Workload:
    """Spread arrivals uniformly within [t, t + step_s): undoes coarse timestamps (the
    Mooncake conversation trace rounds arrivals to 3 s steps). Re-sorted, stably."""
    if step_s <= 0:
        raise ValueError(f"jitter step must be > 0 s, got {step_s:g}")
    spread = w.arrival + rng.uniform(0.0, step_s, size=len(w))
    order = np.argsort(spread, kind="stable")
    return w.take(order, f"jitter: arrivals spread uniformly within {step_s:g} s steps",
                  arrival=spread[order])


def window(w: Workload, start_s: float = 0.0, duration_s: float | None = None) -> Workload:
    """The requests arriving in [start_s, start_s + duration_s), with times shifted so
    that the window starts at t = 0 (a quiet start stays quiet)."""
    if start_s < 0 or (duration_s is not None and duration_s <= 0):
        raise ValueError(f"window needs start >= 0 and duration > 0, got {start_s:g}, {duration_s}")
    end = math.inf if duration_s is None else start_s + duration_s
    lo, hi = np.searchsorted(w.arrival, [start_s, end], side="left")
    return w.take(slice(lo, hi), f"window [{start_s:g}, {end:g}) s: {hi - lo} requests",
                  arrival=w.arrival[lo:hi] - start_s)


def first_n(w: Workload, n: int) -> Workload:
    """The first n requests (all of them, with that said, if there are fewer)."""
    if n < 1:
        raise ValueError(f"first_n needs n >= 1, got {n}")
    note = f"first {n} requests" if n <= len(w) else f"first {n} requests: all {len(w)} there are"
    return w.take(slice(0, n), note)


def scale_rate(w: Workload, factor: float) -> Workload:
    """Multiply the arrival rate by `factor` (2: time runs twice as fast; 0.5: half)."""
    if not factor > 0 or math.isinf(factor):
        raise ValueError(f"rate scale must be a finite number > 0, got {factor:g}")
    rate = mean_rate(w) * factor
    note = f": mean rate {rate:.4g} req/s" if math.isfinite(rate) else ""
    return w.replace(f"rate x{factor:g}{note}", arrival=w.arrival / factor)


def set_rate(w: Workload, rate: float) -> Workload:
    """Stretch or compress time so that the mean rate is `rate` (inf: all at t = 0)."""
    if math.isinf(rate):
        return w.replace("rate inf: all requests at t=0", arrival=np.zeros(len(w)))
    current = mean_rate(w)
    if not (rate > 0 and math.isfinite(current) and current > 0):
        raise ValueError(f"cannot set the mean rate to {rate:g} req/s: the workload has "
                         f"{len(w)} request(s) spanning {_span(w):g} s")
    return w.replace(f"time scaled x{current / rate:.4g} to a mean rate of {rate:g} req/s",
                     arrival=w.arrival * (current / rate))


def scale_lengths(w: Workload, k: float) -> Workload:
    """Divide prompt and output lengths by k, rounded, at least 1 token each. Prefix
    hash blocks shrink with them, rounded (Mooncake's 512 tokens / 32: 16, the engine's
    block): requests still share exactly the leading blocks their hashes share."""
    if not k > 0 or math.isinf(k):
        raise ValueError(f"length scale must be a finite number > 0, got {k:g}")
    def div(x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", divide="ignore"):  # a tiny k: refused just below
            y = np.maximum(1, np.rint(x / k))
        if len(y) and not y.max() <= MAX_TOKENS:  # checked while a float: int64 would wrap
            raise ValueError(f"workload length_scale {k:g} makes a length of {y.max():.3g} tokens; "
                             f"lengths must stay <= {MAX_TOKENS:,}")
        return y.astype(np.int64)
    prompt, output = div(w.prompt_len), div(w.output_len)  # first: a tiny k is refused there
    block = max(1, round(w.hash_block_size / k))
    note = f"; prefix hash blocks {block} tokens" if w.prefix_hashes is not None else ""
    return w.replace(f"lengths / {k:g} (rounded, at least 1 token){note}",
                     prompt_len=prompt, output_len=output, hash_block_size=block)


def clip_lengths(w: Workload, max_prompt: int | None = None, max_output: int | None = None
                 ) -> Workload:
    """Clip prompt and output lengths to a maximum (a model's context window). Prefix
    hashes of a clipped prompt keep the blocks it still has."""
    out = w
    for name, cap in (("prompt", max_prompt), ("output", max_output)):
        if cap is None:
            continue
        if cap < 1:
            raise ValueError(f"max {name} length must be >= 1, got {cap}")
        col = getattr(out, f"{name}_len")
        changed = int((col > cap).sum())
        clipped = np.minimum(col, cap)
        out = out.replace(f"{name} lengths clipped to {cap} tokens ({changed} requests)",
                          **{f"{name}_len": clipped})
        if name == "prompt" and out.prefix_hashes is not None and changed:
            out.prefix_hashes = [
                h if new == old else h[:-(-new // out.hash_block_size)]
                for h, new, old in zip(out.prefix_hashes, clipped.tolist(), col.tolist())]
    return out


def _span(w: Workload) -> float:
    return float(w.arrival[-1] - w.arrival[0]) if len(w) else 0.0
