"""Prefix caching: how much TTFT, throughput and capacity it gives on traffic built
around shared prefixes (the shipped Mooncake trace; multi-turn chat with a shared system
prompt), with and without it, and prefix-aware against least-loaded routing on 4
replicas.

Plan: each workload at a fixed rate with caching on and off, the highest rate under an
SLO by bisection, then both routers on 4 replicas. Simulated: llama-3-8b on an A100,
chunked prefill. --backend: a small multi-turn chat served by batchlab-tiny on the CPU
torch backend with caching on, and simulated with the same scheduler and pool; arrivals
are spread out (light load), so the two schedules, and hits, should agree."""
from __future__ import annotations

from pathlib import Path

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.result import RunResult
from batchlab.core.summary import SLO
from batchlab.core.workload import LengthSpec, WorkloadConfig, build_workload
from batchlab.core.workload.transforms import set_rate
from batchlab.experiments import figures as fg
from batchlab.experiments.markdown import fmt, table_of
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.output import StudyRun, register_study
from batchlab.experiments.studies.slo_search import max_rate
from batchlab.experiments.studies.templates import template
from batchlab.sim import simulate

NAME = "prefix-caching"
MODEL, HARDWARE, POLICY, SEED = "llama-3-8b", "a100-80gb", "chunked", 0
SLO_SPEC = SLO(ttft_ms=2000, tpot_ms=100)
# Mooncake at a quarter of its lengths (prompts ~3,400 tokens, its 512-token hash blocks
# 128): at full length one A100 holds the KV of ~35 prompts, far less than the trace's
# reuse distance, and the study would show the pool, not the cache.
MOONCAKE_SCALE = 4
KINDS = ("mooncake", "multiturn")
ROUTERS = ("least_loaded", "prefix_aware")
PARAMS = {
    "full": dict(n={"mooncake": 3993, "multiturn": 2000}, rate={"mooncake": 1.0, "multiturn": 2.0},
                 routed={"mooncake": 4.0, "multiturn": 8.0}, replicas=4),
    "small": dict(n={"mooncake": 1000, "multiturn": 500}, rate={"mooncake": 1.0, "multiturn": 2.0},
                  routed={"mooncake": 4.0, "multiturn": 8.0}, replicas=4),
}
COLUMNS = ("workload", "caching", "router", "replicas", "rate", "prefix_cache_hit_rate",
           "median_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "output_throughput",
           "request_throughput", "completed", "meets_slo", "search")
BACKEND_PARAMS = {"full": dict(requests=40, rate=1.0, blocks=400), "small": dict(requests=16, rate=1.0, blocks=200)}
BACKEND_COLUMNS = ("world", "prefix_cache_hit_rate", "prefix_cache_hits", "prefix_cache_queries",
                   "median_ttft_ms", "completed")


def workload(kind: str, n: int, rate: float, seed: int = SEED):
    """kind: mooncake (the shipped trace) or multiturn (the preset), its whole timeline
    scaled to a mean of `rate` requests/s (for multi-turn chat, think times with it:
    otherwise a faster conversation rate with fixed turns and gaps never overloads)."""
    if kind == "mooncake":
        return build_workload(WorkloadConfig(source="mooncake", num_requests=n, rate=rate,
                                             length_scale=MOONCAKE_SCALE))
    w = build_workload(WorkloadConfig(source="multiturn", num_requests=n, seed=seed))
    return set_rate(w, rate)


def scheduler(caching: bool, **kw) -> SchedulerConfig:
    return SchedulerConfig(policy=POLICY, prefix_caching=caching, **kw)


def meets(s: dict, n: int, slo: SLO = SLO_SPEC) -> bool:
    return (s["completed"] == n and s["p99_ttft_ms"] <= slo.ttft_ms
            and s["p99_tpot_ms"] <= slo.tpot_ms)


def measure(res: RunResult, n: int, **labels) -> dict:
    s = res.summary(SLO_SPEC)
    return {**labels, **{k: s[k] for k in COLUMNS if k in s}, "meets_slo": meets(s, n)}


def _figures(fixed: dict, limits: dict, routing: dict) -> list[fg.Figure]:
    kinds = list(KINDS)
    caching = [fg.Panel([fg.GroupedBars(kinds, {
        "caching on": [fixed[f"{k}, caching on"][key] for k in KINDS],
        "caching off": [fixed[f"{k}, caching off"][key] for k in KINDS]}, title, "ms")])
        for key, title in (("median_ttft_ms", "TTFT p50 (ms)"), ("p99_ttft_ms", "TTFT p99 (ms)"))]
    caching.append(fg.Panel([fg.GroupedBars(kinds, {
        "caching on": [limits[f"{k}, caching on"] for k in KINDS],
        "caching off": [limits[f"{k}, caching off"] for k in KINDS]}, "max rate under the SLO", "req/s",
        "{:.2f}")]))
    routers = [fg.Panel([fg.GroupedBars(kinds, {r: [routing[f"{k}, {r}"][key] for k in KINDS] for r in ROUTERS},
                                        title, "", f)])
               for key, title, f in (("prefix_cache_hit_rate", "hit rate", "{:.2f}"),
                                     ("p99_ttft_ms", "TTFT p99 (ms)", "{:.0f}"))]
    return [fg.Figure("prefix_caching.png", caching, 1, 3, f"Prefix caching: {MODEL} on {HARDWARE}, {POLICY}",
                      width=4.6, height=4.0),
            fg.Figure("prefix_routing.png", routers, 1, 2, "Routing on 4 replicas, caching on", width=4.6,
                      height=4.0)]


def _serve(out_dir: Path, size: str, progress: Progress) -> tuple[dict, list[fg.Figure]]:
    """A small multi-turn chat served by batchlab-tiny on the CPU, and simulated. Needs
    torch and transformers."""
    from batchlab.experiments.studies.common_backend import machine, serve  # lazy: torch (the --backend half)
    p = pick(BACKEND_PARAMS, size)
    w = build_workload(WorkloadConfig(
        source="multiturn", num_requests=p["requests"], rate=p["rate"], turns=4, turn_gap_s=1.5,
        system_prompt_len=64, prompt=LengthSpec(dist="uniform", low=8, high=40),
        output=LengthSpec(dist="uniform", low=4, high=16)))
    cfg = SchedulerConfig(policy="chunked", block_size=16, num_kv_blocks=p["blocks"], prefix_caching=True)
    rows = {}
    with RowLog(out_dir / "backend_results.csv", BACKEND_COLUMNS) as log:
        for world, res in (("real", serve(w, cfg)),
                           ("sim", simulate(w, cfg, LinearCostModel(0.005), p["blocks"]))):
            s = res.summary()
            rows[world] = log.add({"world": world, **{k: s[k] for k in BACKEND_COLUMNS if k in s}})
            progress(f"backend study, {world}: hit rate {s['prefix_cache_hit_rate']:.1%}")
    return {"machine": machine(), "workload": w.describe(),
            "pool": f"{p['blocks']} blocks of 16 tokens", "rows": rows,
            "files": ["backend_results.csv"]}, []  # no figures of its own


def report(r: dict) -> str:
    """report.md from the study's result (live, or read back from study.json)."""
    tpl, b = template(NAME), r.get("backend")
    fixed = table_of(({"key": k, **v, "max_rate": r["max_rate"][k]} for k, v in r["fixed"].items()), (
        ("workload", "key", None), ("hit rate", "prefix_cache_hit_rate", "{:.1%}"),
        ("TTFT p50 ms", "median_ttft_ms", "{:.0f}"), ("TTFT p99 ms", "p99_ttft_ms", "{:.0f}"),
        ("output tok/s", "output_throughput", "{:.0f}"), ("max rate under SLO", "max_rate", "{:.2f}")))
    routing = table_of(({"key": k, **v} for k, v in r["routing"].items()), (
        ("workload, router", "key", None), ("rate", "rate", "{:g}"), ("hit rate", "prefix_cache_hit_rate", "{:.1%}"),
        ("TTFT p50 ms", "median_ttft_ms", "{:.0f}"), ("TTFT p99 ms", "p99_ttft_ms", "{:.0f}")))
    backend = tpl("backend", b=b, table=table_of(({"world": w, **v} for w, v in b["rows"].items()), (
        ("world", "world", None), ("hit rate", "prefix_cache_hit_rate", "{:.1%}"),
        ("prefix_cache_hits", "prefix_cache_hits", None), ("TTFT p50 ms", "median_ttft_ms", "{:.0f}")))) if b else ""
    return tpl("report", command=command_line(NAME, r["size"], bool(b)), r=r, scale=MOONCAKE_SCALE,
               workloads="; ".join(f"**{k}**: {d}" for k, d in r["workloads"].items()),
               fixed_table=fixed, routing_table=routing, mooncake_on=r["fixed"]["mooncake, caching on"],
               multiturn_on=fmt(r["max_rate"]["multiturn, caching on"], "{:.2f}"),
               multiturn_off=fmt(r["max_rate"]["multiturn, caching off"], "{:.2f}"), backend=backend) + "\n"


@register_study(NAME, "prefix caching on Mooncake and multi-turn chat: TTFT p50/p99, throughput and "
                "max rate under an SLO with and without it; prefix-aware vs least-loaded routing "
                "on 4 replicas; --backend: real hit rate beside the simulation's",
                PARAMS, _serve, report)
def run(study: StudyRun, p: dict) -> tuple[dict, list[fg.Figure]]:
    cost, blocks, meta, _ = preset(MODEL, HARDWARE)
    fixed, limits, routing = {}, {}, {}
    with RowLog(study.out_dir / "results.csv", COLUMNS) as log:
        def point(kind, caching, rate, search=False, replicas=1, router="least_loaded"):
            n = p["n"][kind]
            res = simulate(workload(kind, n, rate), scheduler(caching), cost, blocks,
                           replicas=replicas, router=router, meta=meta, record_steps=False)
            return log.add(measure(res, n, workload=kind, caching=caching, router=router,
                                   replicas=replicas, rate=rate, search=search))
        for kind in KINDS:
            for caching in (True, False):
                key = f"{kind}, caching {'on' if caching else 'off'}"
                fixed[key] = row = point(kind, caching, p["rate"][kind])
                found = max_rate(lambda r: point(kind, caching, r, search=True)["meets_slo"],
                                 start=p["rate"][kind])
                limits[key] = found.rate
                study.progress(f"{key}: hit rate {row['prefix_cache_hit_rate']:.1%}, TTFT p99 "
                               f"{row['p99_ttft_ms']:.0f} ms at {row['rate']:g}/s; max rate under "
                               f"the SLO {found.rate:.2f}/s")
            for router in ROUTERS:
                routing[f"{kind}, {router}"] = row = point(
                    kind, True, p["routed"][kind], replicas=p["replicas"], router=router)
                study.progress(f"{kind} on {p['replicas']} replicas, {router}: hit rate "
                               f"{row['prefix_cache_hit_rate']:.1%}, TTFT p99 {row['p99_ttft_ms']:.0f} ms")
    figures = _figures(fixed, limits, routing)
    return {"setup": setup_line(meta), "policy": POLICY,
            "workloads": {k: workload(k, p["n"][k], p["rate"][k]).describe() for k in KINDS},
            "slo": SLO_SPEC.model_dump(exclude_none=True), "fixed": fixed, "max_rate": limits,
            "routing": routing, "replicas": p["replicas"], "files": ["results.csv", *fg.filenames(figures)]}, figures
