"""Prefix caching: how much TTFT, throughput and capacity it gives on traffic built
around shared prefixes (the shipped Mooncake trace; multi-turn chat with a shared system
prompt), with and without it, and prefix-aware against least-loaded routing on 4
replicas. --backend: a reduced real run whose hit rate is set beside the simulation's."""
from __future__ import annotations

from pathlib import Path

from batchlab.experiments import plots
from batchlab.experiments.markdown import Report, fmt
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.prefix_caching_setup import (COLUMNS, HARDWARE, MODEL, MOONCAKE_SCALE,
                                                      NAME, POLICY, SLO_SPEC, measure, scheduler,
                                                      workload)
from batchlab.experiments.studies.registry import register
from batchlab.experiments.studies.slo_search import max_rate
from batchlab.sim import simulate

KINDS = ("mooncake", "multiturn")
PARAMS = {
    "full": dict(n={"mooncake": 3993, "multiturn": 2000}, rate={"mooncake": 1.0, "multiturn": 2.0},
                 routed={"mooncake": 4.0, "multiturn": 8.0}, replicas=4),
    "small": dict(n={"mooncake": 1000, "multiturn": 500}, rate={"mooncake": 1.0, "multiturn": 2.0},
                  routed={"mooncake": 4.0, "multiturn": 8.0}, replicas=4),
}


@register(NAME, "prefix caching on Mooncake and multi-turn chat: TTFT p50/p99, throughput and "
                "max rate under an SLO with and without it; prefix-aware vs least-loaded routing "
                "on 4 replicas; --backend: real hit rate beside the simulation's", backend=True)
def run(out_dir: Path, size: str = "full", backend: bool = False, quiet: bool = False) -> dict:
    p = pick(PARAMS, size)
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(NAME, quiet)
    cost, blocks, meta, _ = preset(MODEL, HARDWARE)
    fixed, limits, routing = {}, {}, {}
    with RowLog(out_dir / "results.csv", COLUMNS) as log:
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
                progress(f"{key}: hit rate {row['prefix_cache_hit_rate']:.1%}, TTFT p99 "
                         f"{row['p99_ttft_ms']:.0f} ms at {row['rate']:g}/s; max rate under "
                         f"the SLO {found.rate:.2f}/s")
            for router in ("least_loaded", "prefix_aware"):
                routing[f"{kind}, {router}"] = row = point(
                    kind, True, p["routed"][kind], replicas=p["replicas"], router=router)
                progress(f"{kind} on {p['replicas']} replicas, {router}: hit rate "
                         f"{row['prefix_cache_hit_rate']:.1%}, TTFT p99 {row['p99_ttft_ms']:.0f} ms")
    result = {"name": NAME, "size": size, "setup": setup_line(meta), "policy": POLICY,
              "workloads": {k: workload(k, p["n"][k], p["rate"][k]).describe() for k in KINDS},
              "slo": SLO_SPEC.model_dump(exclude_none=True), "fixed": fixed, "max_rate": limits,
              "routing": routing, "replicas": p["replicas"], "files": ["results.csv"]}
    result["files"] += _plots(out_dir, fixed, limits, routing)
    if backend:
        from batchlab.experiments.studies import prefix_caching_backend  # needs torch: only when asked
        result["backend"] = prefix_caching_backend.run(out_dir, size, progress)
        result["files"] += result["backend"]["files"]
    result["elapsed_s"] = progress.elapsed
    _report(out_dir, result, size, backend)
    result["files"].append("report.md")
    return result


def _plots(out_dir: Path, fixed: dict, limits: dict, routing: dict) -> list[str]:
    fig, axes = plots.figure(1, 3, f"Prefix caching: {MODEL} on {HARDWARE}, {POLICY}",
                             width=4.6, height=4.0)
    for ax, key, title in ((axes[0], "median_ttft_ms", "TTFT p50 (ms)"),
                           (axes[1], "p99_ttft_ms", "TTFT p99 (ms)")):
        plots.grouped_bars(ax, list(KINDS), {
            "caching on": [fixed[f"{k}, caching on"][key] for k in KINDS],
            "caching off": [fixed[f"{k}, caching off"][key] for k in KINDS]}, title, "ms")
    plots.grouped_bars(axes[2], list(KINDS), {
        "caching on": [limits[f"{k}, caching on"] for k in KINDS],
        "caching off": [limits[f"{k}, caching off"] for k in KINDS]},
        "max rate under the SLO", "req/s", "{:.2f}")
    plots.save(fig, out_dir / "prefix_caching.png")
    fig, axes = plots.figure(1, 2, "Routing on 4 replicas, caching on", width=4.6, height=4.0)
    for ax, key, title, f in ((axes[0], "prefix_cache_hit_rate", "hit rate", "{:.2f}"),
                              (axes[1], "p99_ttft_ms", "TTFT p99 (ms)", "{:.0f}")):
        plots.grouped_bars(ax, list(KINDS), {
            r: [routing[f"{k}, {r}"][key] for k in KINDS] for r in ("least_loaded", "prefix_aware")},
            title, "", f)
    plots.save(fig, out_dir / "prefix_routing.png")
    return ["prefix_caching.png", "prefix_routing.png"]


def _report(out_dir: Path, r: dict, size: str, backend: bool) -> None:
    rep = Report("Prefix caching")
    rep.para(f"Command: `{command_line(NAME, size, backend)}`. Setup: {r['setup']}; policy "
             f"{r['policy']}. SLO: TTFT p99 <= {SLO_SPEC.ttft_ms:g} ms and TPOT p99 <= "
             f"{SLO_SPEC.tpot_ms:g} ms, all requests served. Workloads: "
             + "; ".join(f"**{k}**: {d}" for k, d in r["workloads"].items())
             + f". Mooncake's lengths are divided by {MOONCAKE_SCALE} (its hash blocks with "
             f"them) so that the pool holds more than a few dozen prompts.")
    rows = [[k, fmt(v["prefix_cache_hit_rate"], "{:.1%}"), fmt(v["median_ttft_ms"], "{:.0f}"),
             fmt(v["p99_ttft_ms"], "{:.0f}"), fmt(v["output_throughput"], "{:.0f}"),
             fmt(r["max_rate"][k], "{:.2f}")] for k, v in r["fixed"].items()]
    rep.heading("With and without caching")
    rep.table(["workload", "hit rate", "TTFT p50 ms", "TTFT p99 ms", "output tok/s",
               "max rate under SLO"], rows)
    mt_on, mt_off = r["max_rate"]["multiturn, caching on"], r["max_rate"]["multiturn, caching off"]
    rep.claim("prefix caching (on by default in vLLM v1, SGLang, TensorRT-LLM) cuts TTFT and "
              "raises capacity on traffic built around shared prefixes",
              f"multi-turn chat sustains {fmt(mt_on, '{:.2f}')} req/s with it and "
              f"{fmt(mt_off, '{:.2f}')} without; Mooncake hit rate "
              f"{r['fixed']['mooncake, caching on']['prefix_cache_hit_rate']:.1%}",
              "only prompt blocks are cached (the simulator knows no generated tokens), so a "
              "turn's reply is recomputed in the next turn, where vLLM would reuse it: the "
              "gain on multi-turn chat is a lower bound.")
    rep.image("prefix_caching.png", "TTFT and max rate with and without caching")
    rep.heading(f"Routing on {r['replicas']} replicas")
    rep.table(["workload, router", "rate", "hit rate", "TTFT p50 ms", "TTFT p99 ms"],
              [[k, fmt(v["rate"], "{:g}"), fmt(v["prefix_cache_hit_rate"], "{:.1%}"),
                fmt(v["median_ttft_ms"], "{:.0f}"), fmt(v["p99_ttft_ms"], "{:.0f}")]
               for k, v in r["routing"].items()])
    rep.image("prefix_routing.png", "hit rate and TTFT p99 by router")
    if backend:
        b = r["backend"]
        rep.heading("On the real backend (reduced)")
        rep.para(f"{b['machine']}; {b['workload']}; pool {b['pool']}.")
        rep.table(["world", "hit rate", "prefix_cache_hits", "TTFT p50 ms"],
                  [[w, fmt(v["prefix_cache_hit_rate"], "{:.1%}"), v["prefix_cache_hits"],
                    fmt(v["median_ttft_ms"], "{:.0f}")] for w, v in b["rows"].items()])
    rep.para(f"Elapsed: {r['elapsed_s']:.0f} s.")
    rep.write(out_dir / "report.md")
