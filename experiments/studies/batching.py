"""Claim 1: a decode step of 8 sequences costs almost what a step of 1 costs, because
the weights are read once per step whatever the batch, so 8 sequences give close to 8x
the tokens/s; the curve bends where each extra sequence's FLOPs (and KV reads) start to
cost as much as the weights. Roofline on GPU presets; optionally the real CPU backend."""
from __future__ import annotations

from pathlib import Path

from batchlab.core.batch import StepFeatures
from batchlab.core.kv import blocks_for
from batchlab.experiments import plots
from batchlab.experiments.markdown import Report, fmt
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.registry import register

NAME = "batching"
MODEL, CONTEXT, BLOCK = "llama-3-8b", 512, 16
PARAMS = {
    "full": dict(hardware=("a100-80gb", "h100-sxm", "h200", "l4"),
                 batches=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
                          768, 1024, 1536, 2048)),
    "small": dict(hardware=("a100-80gb", "l4"), batches=(1, 2, 4, 8, 16, 64, 256, 1024)),
}
COLUMNS = ("hardware", "batch", "step_ms", "tokens_per_s", "speedup_vs_1", "memory_ms",
           "compute_ms", "bound", "fits_kv")


def decode_features(batch: int, context: int) -> StepFeatures:
    """One decode step of `batch` sequences that each hold `context` tokens of KV."""
    return StepFeatures(num_seqs=batch, decode_tokens=batch, kv_tokens_read=batch * (context + 1),
                        attention_pairs=batch * (context + 1))


def _terms(cost, f: StepFeatures) -> tuple[float, float]:
    """The roofline's memory and compute times (seconds) for a step."""
    mem = (cost.weight_bytes + cost.kv_bytes_per_token * f.kv_tokens_read) / cost.mem_bandwidth
    flops = (cost.flops_per_token * f.tokens + cost.attention_flops_per_pair * f.attention_pairs)
    return mem, flops / cost.peak_flops


def _first(pred, limit: int = 1 << 16) -> int | None:
    """Smallest batch in 1..limit where pred(batch) holds (pred is monotone)."""
    if not pred(limit):
        return None
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pred(mid) else (mid + 1, hi)
    return lo


def roofline_sweep(hardware: str, batches: tuple[int, ...], log: RowLog) -> dict:
    cost, blocks, meta, _ = preset(MODEL, hardware, block_size=BLOCK)
    max_batch = blocks // blocks_for(CONTEXT + 1, BLOCK)
    t1 = cost.step_time(decode_features(1, CONTEXT))
    rows = []
    for b in batches:
        f = decode_features(b, CONTEXT)
        t = cost.step_time(f)
        mem, comp = _terms(cost, f)
        rows.append(log.add({"hardware": hardware, "batch": b, "step_ms": t * 1e3,
                             "tokens_per_s": b / t, "speedup_vs_1": (b / t) * t1,
                             "memory_ms": mem * 1e3, "compute_ms": comp * 1e3,
                             "bound": "compute" if comp > mem else "memory",
                             "fits_kv": b <= max_batch}))
    t8 = cost.step_time(decode_features(8, CONTEXT))
    fit = [r for r in rows if r["fits_kv"]]
    ridge = _first(lambda b: _terms(cost, decode_features(b, CONTEXT))[1]
                   >= _terms(cost, decode_features(b, CONTEXT))[0])
    double = _first(lambda b: cost.step_time(decode_features(b, CONTEXT)) >= 2 * t1)
    return {"hardware": hardware, "setup": setup_line(meta), "step_ms_1": t1 * 1e3,
            "step_ms_8": t8 * 1e3, "step_ratio_8_vs_1": t8 / t1, "speedup_8_vs_1": 8 * t1 / t8,
            "ridge_batch": ridge, "double_time_batch": double, "kv_max_batch": max_batch,
            "peak_tokens_per_s": max((r["tokens_per_s"] for r in fit), default=float("nan")),
            "rows": rows}


@register(NAME, "claim 1: decode step time and tokens/s vs batch size (1 vs 8, where the "
                "curve bends), roofline on GPU presets; --backend times the CPU torch backend",
          backend=True)
def run(out_dir: Path, size: str = "full", backend: bool = False, quiet: bool = False) -> dict:
    p = pick(PARAMS, size)
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(NAME, quiet)
    sweeps = []
    with RowLog(out_dir / "roofline.csv", COLUMNS) as log:
        for hw in p["hardware"]:
            sweeps.append(roofline_sweep(hw, p["batches"], log))
            s = sweeps[-1]
            progress(f"{hw}: step 1 -> 8 sequences x{s['step_ratio_8_vs_1']:.2f} time, "
                     f"x{s['speedup_8_vs_1']:.2f} tokens/s")
    files = ["roofline.csv", _plot(out_dir, sweeps)]
    result = {"name": NAME, "size": size, "model": MODEL, "context": CONTEXT,
              "roofline": [{k: v for k, v in s.items() if k != "rows"} for s in sweeps],
              "files": files}
    if backend:
        from batchlab.experiments.studies import batching_backend  # needs torch: only when asked
        result["backend"] = batching_backend.run(out_dir, size, progress)
        files += result["backend"]["files"]
    result["elapsed_s"] = progress.elapsed
    _report(out_dir, result, size, backend)
    files.append("report.md")
    return result


def _plot(out_dir: Path, sweeps: list[dict]) -> str:
    fig, axes = plots.figure(1, 2, f"{MODEL} decode steps vs batch size (roofline, "
                                   f"{CONTEXT}-token contexts)", width=6.2, height=4.4)
    for s in sweeps:
        fit = [r for r in s["rows"] if r["fits_kv"]]
        x = [r["batch"] for r in fit]
        line, = axes[0].plot(x, [r["step_ms"] for r in fit], marker=".", label=s["hardware"])
        c = line.get_color()
        axes[1].plot(x, [r["tokens_per_s"] for r in fit], marker=".", color=c, label=s["hardware"])
        axes[1].plot(x, [fit[0]["tokens_per_s"] * b for b in x], ls=":", color=c, lw=1)
        for ax, key in ((axes[0], "step_ms"), (axes[1], "tokens_per_s")):
            ax.plot(x[-1], fit[-1][key], marker="x", color=c, ms=9)
        bend = s["double_time_batch"]
        if bend and x and bend <= x[-1]:  # the bend: step time twice the 1-sequence step
            t = s["step_ms_1"] * 2
            axes[0].plot(bend, t, marker="o", mfc="none", color=c, ms=10)
            axes[1].plot(bend, bend / t * 1e3, marker="o", mfc="none", color=c, ms=10)
    axes[0].set_title("step time: flat while weight reads dominate\n"
                      "(o: step time doubled, the bend; x: KV cache full)", fontsize=10)
    axes[0].set_ylabel("decode step time (ms)")
    axes[0].set_ylim(bottom=0)
    axes[1].set_title("throughput (dotted: ideal N x the 1-sequence rate)", fontsize=10)
    axes[1].set_ylabel("output tokens/s")
    axes[1].set_yscale("log")
    ticks = [1 << i for i in range(0, 12)]
    plots.batch_size_axes(axes, ticks)
    plots.save(fig, out_dir / "batching_roofline.png")
    return "batching_roofline.png"


def _report(out_dir: Path, r: dict, size: str, backend: bool) -> None:
    rep = Report("Claim 1: batching decode steps")
    rep.para(f"Command: `{command_line(NAME, size, backend)}`. Each point prices one decode "
             f"step of N sequences, each with {CONTEXT} tokens of context, with the roofline "
             f"cost model the simulator uses ({r['roofline'][0]['setup']}; the other GPUs "
             f"likewise). Curves stop where the KV cache is full.")
    a = r["roofline"][0]
    others = "; ".join(f"{s['hardware']} x{s['speedup_8_vs_1']:.2f}" for s in r["roofline"][1:])
    measured = (f"{a['hardware']}: a step of 8 takes {a['step_ms_8']:.2f} ms vs {a['step_ms_1']:.2f} ms "
                f"for 1 (x{a['step_ratio_8_vs_1']:.3f}), so 8 sequences give "
                f"**x{a['speedup_8_vs_1']:.2f}** the tokens/s" + (f" ({others})" if others else "")
                + f". The curve bends at ~{a['double_time_batch']} sequences, where the step "
                f"takes twice the 1-sequence time (per-sequence KV reads and FLOPs now cost as much "
                f"as the shared weight reads); from {a['ridge_batch']} it is compute-bound.")
    b = r.get("backend")
    if b:
        measured += " Backend (CPU, measured): " + "; ".join(
            f"{m['model']} x{m['speedup_8_vs_1']:.2f} tokens/s at 8 vs 1 (step x{m['step_ratio_8_vs_1']:.2f})"
            for m in b["models"]) + "."
    rep.claim("decode steps of 1 vs 8 sequences take almost the same time because weights are "
              "read once per step, so 8 sequences give close to 8x the tokens/s.", measured,
              "the 8x is never quite reached: each sequence adds its own KV-cache reads and "
              "FLOPs, and the fixed per-step overhead is shared but not free. On the roofline the "
              "bend is where FLOPs per step (2 x params x batch) take longer than streaming the "
              "weights; on a CPU the bend comes much earlier because a CPU's FLOP/s per byte of "
              "bandwidth is far lower than a GPU's.")
    rep.heading("Roofline, per GPU")
    rep.table(["GPU", "step, 1 seq (ms)", "step, 8 seqs (ms)", "tokens/s x (8 vs 1)",
               "bend: step time 2x at", "compute-bound from", "KV full at", "peak tokens/s"],
              [[s["hardware"], fmt(s["step_ms_1"], "{:.2f}"), fmt(s["step_ms_8"], "{:.2f}"),
                fmt(s["speedup_8_vs_1"], "{:.2f}"), fmt(s["double_time_batch"], "{:d}"),
                fmt(s["ridge_batch"], "{:d}"), fmt(s["kv_max_batch"], "{:d}"),
                fmt(s["peak_tokens_per_s"], "{:,.0f}")] for s in r["roofline"]])
    rep.para("*bend*: smallest batch whose step takes twice the 1-sequence step: past it, "
             "per-sequence work (KV reads, FLOPs) outweighs the shared weight reads and each "
             "extra sequence adds nearly its full cost. *compute-bound from*: smallest batch "
             "whose FLOP time exceeds its memory time (beyond *KV full at* it is never reached: "
             "KV reads grow with the batch as fast as FLOPs do). "
             "*KV full at*: most sequences of this context the KV cache holds (after weights, "
             "90% of memory). *peak tokens/s*: the best point of the sweep that fits. "
             "Full sweep in `roofline.csv`.")
    rep.image("batching_roofline.png", "decode step time and tokens/s vs batch size")
    if b:
        from batchlab.experiments.studies import batching_backend
        batching_backend.report_section(rep, b)
    else:
        rep.para("The real-backend variant (`--backend`) times decode steps of 1..64 sequences "
                 "on the CPU torch backend's embedded models; it was not run for this report.")
    rep.write(out_dir / "report.md")
