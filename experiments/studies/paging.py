"""Paging and continuous batching are independent knobs: the 2 x 2 of static/continuous
batching x reserved-at-admission/paged KV allocation. Reserved (Orca, FasterTransformer;
TensorRT-LLM's GUARANTEED_NO_EVICT) admits a request only if its whole budget fits and
never preempts; paged (vLLM) takes blocks as tokens arrive and preempts by recompute
when the pool runs out. Measured: sequences that fit at once, throughput, TTFT and
preemptions, simulated on a KV-bound setup (and, with --backend, on the CPU backend)."""
from __future__ import annotations

from pathlib import Path

from batchlab.experiments import plots
from batchlab.experiments.markdown import Report, fmt
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.paging_setup import COLUMNS, GRID, NAME, label, measure, scheduler, workload
from batchlab.experiments.studies.registry import register
from batchlab.sim import simulate

MODEL, HARDWARE, BLOCK = "llama-3-8b", "a100-80gb", 16
# A pool of 2,048 blocks (32,768 tokens): KV, not seats, bounds the batch (as on a
# smaller GPU, or with a longer-context model on this one). 128 users keep it full.
PARAMS = {
    "full": dict(requests=600, users=128, seats=128, blocks=2048),
    "small": dict(requests=200, users=128, seats=128, blocks=2048),
}
PROMPT, OUTPUT = (64, 512), (16, 1024)


@register(NAME, "paging vs continuous batching, independent: static/continuous x reserved/paged "
                "KV: sequences that fit, throughput, TTFT, preemptions; --backend: a reduced "
                "grid on the CPU torch backend", backend=True)
def run(out_dir: Path, size: str = "full", backend: bool = False, quiet: bool = False) -> dict:
    p = pick(PARAMS, size)
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(NAME, quiet)
    cost, blocks, meta, _ = preset(MODEL, HARDWARE, block_size=BLOCK, num_kv_blocks=p["blocks"])
    w = workload(p["requests"], PROMPT, OUTPUT, p["users"])
    rows = {}
    with RowLog(out_dir / "results.csv", COLUMNS) as log:
        for batching, allocation in GRID:
            cfg = scheduler(batching, allocation, p["seats"], BLOCK, blocks)
            res = simulate(w, cfg, cost, blocks, meta=meta)
            rows[label(batching, allocation)] = log.add(measure("sim", batching, allocation, res, BLOCK, blocks))
            r = rows[label(batching, allocation)]
            progress(f"{label(batching, allocation)}: {r['mean_concurrency']:.1f} concurrent, "
                     f"{r['output_throughput']:.0f} tok/s, {r['preemptions']} preemptions")
    result = {"name": NAME, "size": size, "setup": setup_line(meta), "workload": w.describe(),
              "seats": p["seats"], "rows": rows, "files": ["results.csv", _plot(out_dir, rows)]}
    if backend:
        from batchlab.experiments.studies import paging_backend  # needs torch: only when asked
        result["backend"] = paging_backend.run(out_dir, size, progress)
        result["files"] += result["backend"]["files"]
    result["elapsed_s"] = progress.elapsed
    _report(out_dir, result, size, backend)
    result["files"].append("report.md")
    return result


def _plot(out_dir: Path, rows: dict) -> str:
    names = [label(b, "reserved") for b in ("static", "continuous")]
    fig, axes = plots.figure(1, 4, "Reserved (plain) vs paged (hatched) KV, static and continuous",
                             width=3.6, height=3.6)
    for ax, (key, title, unit, f) in zip(axes, (
            ("mean_concurrency", "sequences decoding at once", "mean per decode step", "{:.0f}"),
            ("output_throughput", "output throughput", "tokens/s", "{:.0f}"),
            ("median_ttft_ms", "TTFT p50", "seconds", "{:.1f}"),
            ("preemptions", "preemptions", "count", "{:.0f}"))):
        scale = 1000 if key.endswith("_ms") else 1
        plots.grouped_bars(ax, [n.split("+")[0] for n in names],
                           {a: [rows[label(b, a)][key] / scale for b in ("static", "continuous")]
                            for a in ("reserved", "paged")}, title, unit, f)
    plots.save(fig, out_dir / "paging.png")
    return "paging.png"


def _report(out_dir: Path, r: dict, size: str, backend: bool) -> None:
    rows = r["rows"]
    sr, sp = rows["static+reserved"], rows["static+paged"]
    cr, cp = rows["continuous+reserved"], rows["continuous+paged"]
    rep = Report("Paging and continuous batching are independent")
    rep.para(f"Command: `{command_line(NAME, size, backend)}`. Setup: {r['setup']}. Workload: "
             f"{r['workload']}. {r['seats']} seats, so that KV memory, not seats, "
             f"bounds the batch. Each cell is one simulation of the same request list; "
             f"`--kv-allocation reserved|paged` and `--policy static|continuous` select the cell "
             f"in `batchlab simulate` and `batchlab run`.")
    rep.claim(
        "paging (vLLM) and continuous batching (Orca) are independent: either helps alone. "
        "Reserving each request's whole budget at admission wastes the part not yet filled, "
        "so fewer sequences fit; paging fits more, at the price of preemptions when the "
        "pool runs out.",
        f"paged fits **{sp['mean_concurrency'] / sr['mean_concurrency']:.2f}x** the sequences "
        f"under static batching ({sr['mean_concurrency']:.1f} -> {sp['mean_concurrency']:.1f} "
        f"decoding at once) and **{cp['mean_concurrency'] / cr['mean_concurrency']:.2f}x** under "
        f"continuous ({cr['mean_concurrency']:.1f} -> {cp['mean_concurrency']:.1f}). Output "
        f"throughput: static {sr['output_throughput']:.0f} -> {sp['output_throughput']:.0f} tok/s "
        f"with paging; continuous {cr['output_throughput']:.0f} -> {cp['output_throughput']:.0f}. "
        f"Continuous batching alone (reserved): {cr['output_throughput'] / sr['output_throughput']:.2f}x "
        f"static's throughput; both together: {cp['output_throughput'] / sr['output_throughput']:.2f}x. "
        f"Reserved never preempts ({sr['preemptions']} and {cr['preemptions']}); paged preempted "
        f"{sp['preemptions']} (static) and {cp['preemptions']} (continuous) times.",
        "the output budget here is each request's actual output length (generation stops "
        "there, EOS ignored, so both worlds do the same work): reserved mode wastes only "
        "the unfilled part of each reservation. A server that reserves max_tokens, or the "
        "context length as Orca did, wastes more, and paging gains more than shown. "
        "Paged's preemptions recompute prompts, which costs throughput and TTFT the paged "
        "cells pay here.")
    rep.heading("Results (simulated)")
    _table(rep, rows.values())
    rep.image("paging.png", "reserved vs paged, static and continuous")
    rep.para("*concurrent*: sequences in a decode-only step (every running sequence decodes "
             "in one), mean and peak. *KV used*: mean share of the pool's blocks holding "
             "tokens; *KV reserved*: mean share held by the budgets of admitted requests "
             "(reserved mode): the gap is memory reserved but not yet filled.")
    if backend:
        b = r["backend"]
        rep.heading("On the real backend (reduced)")
        rep.para(f"{b['machine']}; {b['workload']}; {b['seats']} seats, KV pool "
                 f"{b['pool']}. *sim. preemptions* and *sim. concurrent*: the simulator with "
                 f"the same scheduler and pool; *same decisions*: every step's batch shape "
                 f"equal in both worlds.")
        _table(rep, b["rows"].values(), backend=True)
    rep.write(out_dir / "report.md")


def _table(rep: Report, rows, backend: bool = False) -> None:
    head = ["batching", "KV", "concurrent (mean)", "concurrent (max)", "output tok/s",
            "TTFT p50 (s)", "TTFT p99 (s)", "preemptions", "KV used", "KV reserved"]
    if backend:
        head += ["sim. preemptions", "sim. concurrent", "same decisions"]
    body = []
    for x in rows:
        cells = [x["batching"], x["kv_allocation"], fmt(x["mean_concurrency"]), fmt(x["max_concurrency"], "{:.0f}"),
                 fmt(x["output_throughput"], "{:.0f}"), fmt(x["median_ttft_ms"] / 1000, "{:.2f}"),
                 fmt(x["p99_ttft_ms"] / 1000, "{:.2f}"), fmt(x["preemptions"], "{:.0f}"),
                 fmt(x["kv_utilization"], "{:.0%}"), fmt(x["kv_reserved"], "{:.0%}")]
        if backend:
            cells += [fmt(x["sim_preemptions"], "{:.0f}"), fmt(x["sim_mean_concurrency"]),
                      "yes" if x["same_decisions"] else "no"]
        body.append(cells)
    rep.table(head, body)
