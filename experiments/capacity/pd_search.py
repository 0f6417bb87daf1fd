"""`capacity deploy --pd-ratios`: disaggregated deployments searched beside the
aggregated ones, over the GPU, model and dtype of the aggregated search's first choices
and the aggregated winner's seats and token budget. Each option is a line of candidate
pools, fewest GPUs first: a prefill:decode ratio scaled (k x P prefill, k x D decode
replicas), or with `all` every split of each GPU count; it ends at its first candidate
that meets the criteria, never at or beyond the aggregated winner's GPUs (a tie goes to
the simpler, aggregated deployment). A point is simulated over the same samples
as an aggregated one and judged by the same criteria (experiments/capacity/point.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from batchlab.core.workload import WorkloadConfig
from batchlab.experiments.capacity.point import Criteria, _workload, too_long
from batchlab.experiments.capacity.tier_options import tier_config, tier_gib, tier_label
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.disaggregation.config import DeploymentConfig
from batchlab.experiments.disaggregation.setup import pd_setup
from batchlab.experiments.errors import UserError
from batchlab.experiments.executor import run_all
from batchlab.sim.disaggregated import simulate_disaggregated
from batchlab.sim.disaggregated.summary import disaggregated_summary, stability

# What a disaggregated point's row carries (means over its samples).
PD_METRICS = ("request_throughput", "p99_ttft_ms", "p99_tpot_ms", "median_ttft_ms", "median_tpot_ms",
              "slo_attainment", "request_goodput", "prefill_busy_fraction", "decode_busy_fraction",
              "decode_slot_utilization", "decode_seats_full_fraction", "decode_kv_utilization", "mean_kv_transfer_ms",
              "p99_kv_transfer_ms", "mean_kv_link_wait_ms", "mean_decode_queue_ms")


ALL_SPLITS = 16  # --pd-ratios all: every P:D with P + D up to this (and --max-replicas)


@dataclass(frozen=True)
class PDShape:
    """Concrete pools: replicas of each and the TP of each."""
    prefill: int
    decode: int
    prefill_tp: int
    decode_tp: int

    @property
    def gpus(self) -> int:
        return self.prefill * self.prefill_tp + self.decode * self.decode_tp

    def label(self) -> str:
        return f"{self.prefill}P x TP{self.prefill_tp} : {self.decode}D x TP{self.decode_tp}"


@dataclass(frozen=True)
class PDLine:
    """What one option searches: its candidate pools, fewest GPUs first (a ratio scaled
    k = 1, 2, ...; or, for --pd-ratios all, every split of each GPU count), and the KV
    tier below every replica of both pools (tier_options.py; '': the config's)."""
    name: str
    candidates: tuple[PDShape, ...]
    kv_tier: str = ""


@dataclass
class PDOption:
    line: PDLine
    found: PDShape | None = None  # the first candidate that passes
    row: dict | None = None  # its point's row
    tried: list[dict] = field(default_factory=list)  # every point's row, in order
    why: str = ""

    @property
    def gpus(self) -> float:
        return math.inf if self.found is None else self.found.gpus


def parse_ratios(text: str) -> list[tuple[int, int]] | None:
    """P:D pairs, or None for 'all' (every split)."""
    if text.strip() == "all":
        return None
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        p, sep, d = item.partition(":")
        if not (sep and p.isdigit() and d.isdigit() and int(p) >= 1 and int(d) >= 1):
            raise UserError(f"--pd-ratios: {item!r} is not P:D with whole numbers >= 1 (e.g. 1:2), or all")
        out.append((int(p), int(d)))
    if not out:
        raise UserError(f"--pd-ratios: expected a comma-separated list of P:D, or all; got {text!r}")
    return list(dict.fromkeys(out))


def lines(ratios: list[tuple[int, int]] | None, tps: list[tuple[int, int]], max_replicas: int,
          tiers: tuple[str, ...] = ("",)) -> list[PDLine]:
    """One line per ratio and TP pair (None: one per TP pair over every split), each
    pool at most max_replicas replicas; each once per KV tier option (--kv-tier-options)."""
    untiered = _lines(ratios, tps, max_replicas)
    return [PDLine(x.name + tier_label(t), x.candidates, t) for x in untiered for t in tiers]


def _lines(ratios: list[tuple[int, int]] | None, tps: list[tuple[int, int]], max_replicas: int) -> list[PDLine]:
    out = []
    for a, b in tps:
        if ratios is None:  # every split of up to ALL_SPLITS replicas in all
            most = min(max_replicas, ALL_SPLITS)
            pairs = [(p, d) for p in range(1, most) for d in range(1, most + 1 - p)]
            shapes = sorted((PDShape(p, d, a, b) for p, d in pairs), key=lambda s: (s.gpus, s.prefill))
            out.append(PDLine(f"any P:D, TP{a}:TP{b}", tuple(shapes)))
            continue
        for p, d in ratios:
            ks = range(1, max_replicas // max(p, d) + 1)
            out.append(PDLine(f"{p}:{d}, TP{a}:TP{b}", tuple(PDShape(k * p, k * d, a, b) for k in ks)))
    return out


def pd_config(base: ExperimentConfig, shape: PDShape, link: str, kv_tier: str = "") -> ExperimentConfig:
    """kv_tier: a searched tier option, per GPU: each pool's replicas hold it times their TP."""
    dep = DeploymentConfig(prefill_replicas=shape.prefill, decode_replicas=shape.decode,
                           prefill_tp=shape.prefill_tp, decode_tp=shape.decode_tp, link=link)
    cfg = base.model_copy(deep=True)
    cfg.run.replicas = 1
    cfg.run.model_fields_set.discard("replicas")  # the pools' replicas are the deployment's
    cfg.deployment = dep
    if kv_tier:
        cfg.kv_tier = tier_config(kv_tier, base.kv_tier)
    return cfg


def pd_point(task: tuple) -> dict:
    """One disaggregated point's row; top level so that a process pool can ship it.
    A deployment that cannot run (a pool that cannot hold the model) fails with why."""
    cfg, criteria, samples, shape = task
    criteria: Criteria
    try:
        setup = pd_setup(cfg)
    except UserError as e:
        return {"deployment": shape.label(), "passes": False, "cannot_run": True, "failures": str(e)}
    dep = setup.deployment(setup.runs[0])
    summaries, verdicts = [], []
    for wl in samples:
        w = _workload(wl.model_copy(update={"rate_scale": cfg.workload.rate_scale}).model_dump_json())
        run = simulate_disaggregated(w, dep, meta=setup.decode.meta, record_steps=True)
        summaries.append({**disaggregated_summary(run, criteria.slo),
                          "too_long": too_long(w, setup.decode.meta.max_context)})
        verdicts.append(stability(run))  # either pool's queue growing fails the point
    failing = [f for s, v in zip(summaries, verdicts)
               for f in ([] if v == "stable" else ["queue overloaded"]) + criteria.failures(s)]
    row = {"deployment": shape.label(), "gpus": shape.gpus, "passes": not failing,
           "cannot_run": False, "failures": "; ".join(dict.fromkeys(failing)),
           "stability": "stable" if all(v == "stable" for v in verdicts) else "overloaded"}
    for key in PD_METRICS:
        row[key] = float(np.mean([s.get(key, math.nan) for s in summaries]))
    for key in ("completed", "rejected", "unfinished"):
        row[key] = int(sum(s.get(key, 0) for s in summaries))
    return row


def search_pd(base: ExperimentConfig, criteria: Criteria, samples: list[WorkloadConfig],
              searched: list[PDLine], link: str, bound_gpus: float, executor) -> list[PDOption]:
    """Each line's first candidate that passes, in rounds (every line still searching
    tries its next candidate at once), only below bound_gpus GPUs. A pool that cannot
    hold the model ends its line (more replicas of it cannot either)."""
    options = [PDOption(line) for line in searched]
    todo = {id(o): [c for c in o.line.candidates if c.gpus < bound_gpus] for o in options}
    for o in options:
        if not todo[id(o)]:
            smallest = min((c.gpus for c in o.line.candidates), default=0)
            o.why = f"pruned: {smallest} GPUs at its smallest, not fewer than the aggregated winner's {bound_gpus:.0f}"
    while True:
        live = [o for o in options if o.found is None and not o.why]
        if not live:
            return options
        shapes = [todo[id(o)].pop(0) for o in live]
        rows = run_all(executor, pd_point, [(pd_config(base, s, link, o.line.kv_tier), criteria, samples, s)
                                            for o, s in zip(live, shapes)])
        for o, shape, row in zip(live, shapes, rows):
            o.tried.append(row)
            if row["cannot_run"]:
                o.why = row["failures"]
            elif row["passes"]:
                o.found, o.row = shape, row
            elif not todo[id(o)]:
                bound = f"fewer than the aggregated winner's {bound_gpus:.0f}" if math.isfinite(bound_gpus) else "searched"
                o.why = f"none of its {len(o.tried)} pools ({bound} GPUs) meets the criteria"


def best_pd(options: list[PDOption]) -> PDOption | None:
    """Fewest GPUs; among equals no KV tier (it costs host memory), the most goodput,
    then the order given."""
    ok = [o for o in options if o.found is not None]
    return min(ok, key=lambda o: (o.gpus, tier_gib(o.line.kv_tier) is not None,
                                  -(o.row or {}).get("request_goodput", 0.0), options.index(o))) if ok else None
