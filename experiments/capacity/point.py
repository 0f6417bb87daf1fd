"""One capacity point: a configuration at one load, simulated over several samples
(workload seeds, or windows of a trace) to account for noise. It passes when every
sample's queue is stable (core.stability) and every sample meets the criteria.

A pure function of its arguments (picklable, no shared state), so that any executor
can run it and get the same row."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from batchlab.core.stability import queue_stability
from batchlab.core.summary import SLO
from batchlab.core.workload import Workload, WorkloadConfig, build_workload
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.setup import sim_setup
from batchlab.sim import simulate

# Metrics a point row carries (means over its samples).
METRICS = ("request_throughput", "output_throughput", "median_ttft_ms", "p90_ttft_ms",
           "p99_ttft_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "median_e2el_ms",
           "p90_e2el_ms", "p99_e2el_ms", "p99_queueing_delay_ms", "slo_attainment",
           "request_goodput", "preemptions", "slot_utilization", "kv_utilization")
# Request counts a point row carries (sums over its samples): every request counts.
# too_long: of the rejected, those longer than the model's context (no deployment of
# this model serves them; they fail a point only with Criteria.count_too_long).
COUNTS = ("requests", "completed", "rejected", "unfinished", "too_long")
# What a point's answer assumed (SetupMeta fields, None where its setup has none), in its row.
ASSUMED = ("cost_model", "mem_efficiency", "compute_efficiency", "step_overhead_s",
           "weights_dtype", "kv_cache_dtype", "allreduce_latency_s", "num_kv_blocks")
_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E latency"}


@dataclass(frozen=True)
class Criteria:
    """What a point must meet: percentile limits from an SLO, or a goodput fraction
    (the share of requests meeting every limit of the SLO)."""
    slo: SLO
    percentile: int = 99
    goodput: float | None = None
    max_rejected_share: float = 0.0  # rejected + unfinished requests allowed, as a share of all
    # Requests longer than the model's context are counted and reported, but by default do
    # not fail a point: no replica count, budget or GPU of this model serves them.
    count_too_long: bool = False

    def lost_failure(self, s: dict) -> list[str]:
        """A sample that rejected or did not finish more requests than allowed fails,
        whatever its latencies (they are over the finished requests only)."""
        exempt = 0 if self.count_too_long else s.get("too_long", 0)
        rejected = s.get("rejected", 0) - exempt
        lost = rejected + s.get("unfinished", 0)
        total = s.get("completed", 0) + s.get("rejected", 0) + s.get("unfinished", 0)
        if not lost or lost <= self.max_rejected_share * total:
            return []
        allowed = f" > the {self.max_rejected_share * 100:.2g}% allowed" if self.max_rejected_share else ""
        beside = f", besides {exempt:.0f} longer than the model's context" if exempt else ""
        return [(f"{rejected:.0f} rejected + {s.get('unfinished', 0):.0f} unfinished "
                 f"of {total:.0f} requests ({lost / total:.1%}{allowed}{beside})")]

    def key(self, metric: str) -> str:
        return f"{'median' if self.percentile == 50 else f'p{self.percentile}'}_{metric}_ms"

    def limits(self) -> list[tuple[str, float]]:
        return [(m, v) for m in _LABELS if (v := getattr(self.slo, f"{m}_ms")) is not None]

    def failures(self, s: dict) -> list[str]:
        out = self.lost_failure(s)
        if self.goodput is not None:
            got = s.get("slo_attainment", math.nan)
            return out + ([] if got >= self.goodput else [f"goodput {got:.1%} < {self.goodput:.1%}"])
        for m, limit in self.limits():
            v = s.get(self.key(m), math.nan)
            if not v <= limit:  # NaN (nothing finished) fails
                out.append(f"p{self.percentile} {_LABELS[m]} {v:.0f} ms > {limit:g}")
        return out

    def describe_lost(self) -> str:
        """What the point must serve, in words."""
        lost = ("every request served" if not self.max_rejected_share else
                f"at most {self.max_rejected_share * 100:.2g}% of requests rejected or unfinished")
        if not self.count_too_long:
            lost += (" that fits the model's context" if not self.max_rejected_share
                     else " (besides those longer than the model's context)")
        return lost

    def describe(self) -> str:
        lim = ", ".join(f"{_LABELS[m]} <= {v:g} ms" for m, v in self.limits())
        lost = self.describe_lost()
        if not lim:  # a sweep of simulations may set no SLO: then only the queue and losses count
            return f"a stable queue and {lost} (no latency SLO given)"
        if self.goodput is not None:
            return f"goodput >= {self.goodput:.0%} of requests within {lim}, a stable queue and {lost}"
        return (f"p{self.percentile} {lim.replace(', ', f', p{self.percentile} ')}, a stable queue "
                f"and {lost}")


def sample_configs(wl: WorkloadConfig, seeds: int, windows: int) -> list[WorkloadConfig]:
    """seeds x windows workload configs: seeds move generated arrivals and lengths (and
    jitter); windows cut a trace into equal spans of its arrivals."""
    base = _workload(wl.model_copy(update={"rate_scale": 1.0}).model_dump_json())
    span = float(base.arrival[-1]) if len(base) else 0.0
    out = []
    for s in range(seeds):
        for w in range(windows):
            update = {"seed": wl.seed + s}
            if windows > 1:
                start = wl.window_start_s + w * span / windows
                update |= {"window_start_s": start, "window_duration_s": span / windows}
            out.append(wl.model_copy(update=update))
    return out


@functools.lru_cache(maxsize=64)
def _workload(wl_json: str) -> Workload:
    """Built once per process (a trace is parsed once, not at every point)."""
    return build_workload(WorkloadConfig.model_validate_json(wl_json))


def mean_rate(w: Workload) -> float:
    span = float(w.arrival[-1] - w.arrival[0]) if len(w) > 1 else 0.0
    return (len(w) - 1) / span if span > 0 else math.inf


def too_long(w: Workload, context: int | None) -> int:
    """Requests longer (prompt + output) than the model's context: rejected by any
    deployment of the model (vLLM's max_model_len cannot exceed it)."""
    if not context or not len(w):
        return 0
    return int(np.count_nonzero(w.prompt_len + w.output_len > context))


def evaluate(cfg: ExperimentConfig, criteria: Criteria, samples: list[WorkloadConfig]) -> dict:
    """The row of one point: cfg's first policy, over each sample workload (at cfg's
    rate scale and replicas)."""
    setup = sim_setup(cfg)
    policy, scheduler = next(iter(setup.schedulers.items()))
    summaries, verdicts, rates = [], [], []
    for wl in samples:
        w = _workload(wl.model_copy(update={"rate_scale": cfg.workload.rate_scale}).model_dump_json())
        result = simulate(w, scheduler, setup.cost, setup.blocks, replicas=cfg.run.replicas,
                          router=cfg.run.router, meta=setup.meta, record_steps=False,
                          front_end=setup.front_end, emission=setup.emission(wl.seed),
                          **setup.tier_options)  # a [kv_tier], if any
        summaries.append({**result.summary(criteria.slo), "too_long": too_long(w, setup.meta.max_context)})
        verdicts.append(queue_stability(result.requests).verdict)
        rates.append(mean_rate(w))
    failing = [f for s, v in zip(summaries, verdicts)
               for f in ([] if v == "stable" else ["queue overloaded"]) + criteria.failures(s)]
    row = {"policy": policy, "model": setup.meta.model, "hardware": setup.meta.hardware,
           "tp": cfg.hardware.tensor_parallel, "replicas": cfg.run.replicas,
           "pp": cfg.hardware.pipeline_parallel, "ep": cfg.hardware.expert_parallel,
           "gpus": cfg.run.replicas * cfg.hardware.gpus, "router": cfg.run.router,
           "max_num_seqs": scheduler.max_num_seqs,
           "max_num_batched_tokens": scheduler.max_num_batched_tokens or 0,
           "rate_scale": cfg.workload.rate_scale, "rate": float(np.mean(rates)),
           "samples": len(samples), "stable_samples": verdicts.count("stable"),
           "passing_samples": sum(not criteria.failures(s) and v == "stable"
                                  for s, v in zip(summaries, verdicts)),
           "stability": "stable" if all(v == "stable" for v in verdicts) else "overloaded",
           "passes": not failing, "failures": "; ".join(dict.fromkeys(failing)),
           # rejections are decided per request on arrival (too long for the model or the
           # budget): a point failing on them alone fails at every load and replica count
           "fails_whatever_the_load": bool(failing) and all(
               v == "stable" and not s.get("unfinished", 0)
               and criteria.failures(s) == criteria.lost_failure(s)
               for s, v in zip(summaries, verdicts))}
    for k in METRICS:
        vals = [s.get(k, math.nan) for s in summaries]
        row[k] = float(np.mean(vals)) if vals else math.nan
    for k in ("completed", "rejected", "unfinished", "too_long"):
        row[k] = int(sum(s.get(k, 0) for s in summaries))
    row["requests"] = row["completed"] + row["rejected"] + row["unfinished"]
    row.update({k: getattr(setup.meta, k) for k in ASSUMED})
    if setup.speculative is not None:  # only a speculating point has these
        row["speculative"] = f"{cfg.speculative.method} k={cfg.speculative.num_speculative_tokens}"
        row["mean_acceptance_length"] = float(np.mean([s["mean_acceptance_length"] for s in summaries]))
    return row
