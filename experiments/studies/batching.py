"""Claim 1: a decode step of 8 sequences costs almost what a step of 1 costs, because
the weights are read once per step whatever the batch, so 8 sequences give close to 8x
the tokens/s; the curve bends where each extra sequence's FLOPs (and KV reads) start to
cost as much as the weights.

Plan: one decode step of N sequences with 512-token contexts, N from 1 to thousands.
Simulated: priced by the roofline cost model on GPU presets. --backend: decode steps of
1..64 sequences timed on the CPU torch backend's embedded models (seeded random weights:
timing does not depend on their values), each batch size one closed run through
backend.driver.run_workload under the continuous scheduler the simulator uses."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.core.batch import StepFeatures
from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import blocks_for
from batchlab.core.run_meta import RunMeta
from batchlab.core.workload import Workload
from batchlab.experiments import figures as fg
from batchlab.experiments.markdown import table_of
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.output import StudyRun, register_study
from batchlab.experiments.studies.templates import template

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
# The backend's short prompts keep the prefill of 64 sequences cheap, and the decode
# step's cost is the weights and per-token matmuls, as in the roofline sweep.
PROMPT, WARM = 16, 2
BACKEND_PARAMS = {
    "full": dict(models=("batchlab-tiny", "batchlab-small"), batches=(1, 2, 4, 8, 16, 32, 64),
                 steps=8, rounds=3),
    "small": dict(models=("batchlab-tiny",), batches=(1, 8, 32), steps=4, rounds=1),
}
BACKEND_COLUMNS = ("model", "batch", "step_ms", "step_ms_median", "tokens_per_s", "speedup_vs_1")


def decode_features(batch: int, context: int) -> StepFeatures:
    """One decode step of `batch` sequences that each hold `context` tokens of KV."""
    return StepFeatures(num_seqs=batch, decode_tokens=batch, kv_tokens_read=batch * (context + 1),
                        attention_pairs=batch * (context + 1))


# -- the roofline ------------------------------------------------------------------------

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


def _roofline_figure(sweeps: list[dict]) -> fg.Figure:
    time = fg.Panel(title="step time: flat while weight reads dominate\n(o: step time doubled, the "
                          "bend; x: KV cache full)", ylabel="decode step time (ms)", ylim=(0, None))
    rate = fg.Panel(title="throughput (dotted: ideal N x the 1-sequence rate)", ylabel="output tokens/s",
                    yscale="log")
    for i, s in enumerate(sweeps):
        c = fg.cycle_color(i)
        fit = [r for r in s["rows"] if r["fits_kv"]]
        x = [r["batch"] for r in fit]
        time.marks.append(fg.Line(x, [r["step_ms"] for r in fit], label=s["hardware"], color=c, marker="."))
        rate.marks += [fg.Line(x, [r["tokens_per_s"] for r in fit], label=s["hardware"], color=c, marker="."),
                       fg.Line(x, [fit[0]["tokens_per_s"] * b for b in x], color=c, ls=":", lw=1)]
        for panel, key in ((time, "step_ms"), (rate, "tokens_per_s")):
            panel.marks.append(fg.Line([x[-1]], [fit[-1][key]], color=c, marker="x", ms=9))
        bend = s["double_time_batch"]
        if bend and x and bend <= x[-1]:  # the bend: step time twice the 1-sequence step
            t = s["step_ms_1"] * 2
            time.marks.append(fg.Line([bend], [t], color=c, marker="o", mfc="none", ms=10))
            rate.marks.append(fg.Line([bend], [bend / t * 1e3], color=c, marker="o", mfc="none", ms=10))
    _batch_axes((time, rate), [1 << i for i in range(0, 12)])
    return fg.Figure("batching_roofline.png", [time, rate], 1, 2, f"{MODEL} decode steps vs batch size "
                     f"(roofline, {CONTEXT}-token contexts)", width=6.2, height=4.4)


def _batch_axes(panels: tuple[fg.Panel, ...], ticks: list[int]) -> None:
    """Log2 x axes over batch sizes, labelled with the sizes themselves."""
    for p in panels:
        p.xscale, p.xscale_base, p.xticks = "log", 2, ticks
        p.xlabel, p.grid, p.legend = "sequences in the decode step (batch size)", fg.Grid("both"), fg.Legend(8)


# -- the real backend (--backend) --------------------------------------------------------

def decode_steps(runtime, batch: int, steps: int) -> np.ndarray:
    """Seconds of each full decode step of `batch` sequences (after WARM of them)."""
    from batchlab.backend.driver import run_workload  # lazy: torch (the --backend half)
    out = steps + WARM + 1  # +1: the prefill step samples the first token
    w = Workload(np.zeros(batch), np.full(batch, PROMPT), np.full(batch, out),
                 description=[f"{batch} requests at t=0, prompt {PROMPT}, reply {out} tokens"])
    blocks = batch * blocks_for(PROMPT + out, BLOCK)
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=batch, block_size=BLOCK,
                          num_kv_blocks=blocks, max_num_batched_tokens=max(2048, batch * PROMPT))
    st = run_workload(runtime, w, cfg, time_scale=0.0, progress=False).steps
    full = (st["prefill_tokens"] == 0) & (st["num_seqs"] == batch)
    return st["duration_s"][full][WARM:]


def _serve(out_dir: Path, size: str, progress: Progress) -> tuple[dict, list[fg.Figure]]:
    """Time decode steps per model and batch size. Needs torch and transformers."""
    # lazy: torch (the --backend half)
    from batchlab.experiments.studies.common_backend import THREADS, runtime as shared_runtime
    p = pick(BACKEND_PARAMS, size)
    models = []
    with RowLog(out_dir / "backend.csv", BACKEND_COLUMNS) as log:
        for name in p["models"]:
            runtime = shared_runtime(name)  # loaded once per process, as the other studies
            # Rounds over all batch sizes, interleaved, so a burst of other work on a shared
            # machine disturbs one round of a batch size, not all its measurements.
            times = {b: [] for b in p["batches"]}
            for k in range(p["rounds"]):
                for b in p["batches"]:
                    times[b].extend(decode_steps(runtime, b, p["steps"]))
                progress(f"backend {name}: round {k + 1} of {p['rounds']} done")
            rows = []
            for b in p["batches"]:
                t = np.asarray(times[b])
                # The fastest step is the least disturbed by other work.
                best = float(t.min())
                t1 = rows[0]["step_ms"] / 1e3 if rows else best
                rows.append(log.add({"model": name, "batch": b, "step_ms": best * 1e3,
                                     "step_ms_median": float(np.median(t)) * 1e3,
                                     "tokens_per_s": b / best, "speedup_vs_1": b / best * t1}))
                progress(f"backend {name} batch {b:3d}: decode step {best * 1e3:7.2f} ms, "
                         f"{b / best:7.0f} tokens/s ({len(t)} steps)")
            models.append(_summarise(name, rows, runtime.meta()))
    figure = _backend_figure(models)
    return {"models": models, "files": ["backend.csv", figure.filename],
            "prompt": PROMPT, "threads": THREADS, "rounds": p["rounds"]}, [figure]


def _summarise(name: str, rows: list[dict], meta: RunMeta) -> dict:
    by_b = {r["batch"]: r for r in rows}
    b, t = np.array(list(by_b)), np.array([r["step_ms"] for r in rows])
    per_seq, fixed = np.polyfit(b, t, 1)  # step ms ~ fixed + per_seq * batch
    weights = meta.weight_bytes_per_step or 0
    elem = {"float32": 4, "bfloat16": 2, "float16": 2}.get(meta.dtype, 4)
    out = {"model": name, "cpu": meta.cpu or "", "threads": meta.threads,
           "dtype": meta.dtype, "params": meta.model_params,
           "fixed_ms": float(fixed), "per_seq_ms": float(per_seq),
           "bend_batch": float(fixed / per_seq) if per_seq > 0 else None, "rows": rows,
           # Implied rates: weights streamed by a 1-sequence step; each extra sequence's
           # matmul FLOPs (2 per weight) over its marginal cost.
           "weight_gb_per_s": weights / (rows[0]["step_ms"] / 1e3) / 1e9,
           "gflop_per_s_per_seq": (2 * weights / elem) / (per_seq / 1e3) / 1e9 if per_seq > 0 else None}
    if 8 in by_b and 1 in by_b:
        out["step_ratio_8_vs_1"] = by_b[8]["step_ms"] / by_b[1]["step_ms"]
        out["speedup_8_vs_1"] = by_b[8]["speedup_vs_1"]
    return out


def _backend_figure(models: list[dict]) -> fg.Figure:
    time = fg.Panel(title=f"step time ({models[0]['threads']} thread, {PROMPT}-token prompts)",
                    ylabel="decode step time (ms, fastest of the run)", ylim=(0, None))
    rate = fg.Panel(title="throughput (dotted: ideal N x)", ylabel="output tokens/s", yscale="log")
    for i, m in enumerate(models):
        c = fg.cycle_color(i)
        x = [r["batch"] for r in m["rows"]]
        time.marks.append(fg.Line(x, [r["step_ms"] for r in m["rows"]], label=m["model"], color=c, marker="o"))
        rate.marks += [fg.Line(x, [r["tokens_per_s"] for r in m["rows"]], label=m["model"], color=c, marker="o"),
                       fg.Line(x, [m["rows"][0]["tokens_per_s"] * b for b in x], color=c, ls=":", lw=1)]
    _batch_axes((time, rate), x)
    return fg.Figure("batching_backend.png", [time, rate], 1, 2,
                     "Real backend (CPU, torch): decode steps vs batch size", width=5.8, height=4.0)


# -- the report --------------------------------------------------------------------------

ROOFLINE = (("GPU", "hardware", None), ("step, 1 seq (ms)", "step_ms_1", "{:.2f}"),
            ("step, 8 seqs (ms)", "step_ms_8", "{:.2f}"), ("tokens/s x (8 vs 1)", "speedup_8_vs_1", "{:.2f}"),
            ("bend: step time 2x at", "double_time_batch", "{:d}"), ("compute-bound from", "ridge_batch", "{:d}"),
            ("KV full at", "kv_max_batch", "{:d}"), ("peak tokens/s", "peak_tokens_per_s", "{:,.0f}"))
BACKEND = (("model", "model", None), ("params", "params", "{:,}"),
           ("step, 1 seq (ms)", lambda m: m["rows"][0]["step_ms"], "{:.2f}"),
           ("step, 8 seqs (ms)", lambda m: _step(m, 8), "{:.2f}"),
           ("tokens/s x (8 vs 1)", lambda m: m.get("speedup_8_vs_1"), "{:.2f}"),
           ("fixed (ms)", "fixed_ms", "{:.2f}"), ("per sequence (ms)", "per_seq_ms", "{:.3f}"),
           ("bend near", "bend_batch", "{:.0f}"))


def _step(m: dict, batch: int) -> float | None:
    return next((r["step_ms"] for r in m["rows"] if r["batch"] == batch), None)


def report(r: dict) -> str:
    """report.md from the study's result (live, or read back from study.json)."""
    tpl, b = template(NAME), r.get("backend")
    others = "; ".join(f"{s['hardware']} x{s['speedup_8_vs_1']:.2f}" for s in r["roofline"][1:])
    measured = tpl("backend-measured", models="; ".join(
        f"{m['model']} x{m['speedup_8_vs_1']:.2f} tokens/s at 8 vs 1 (step x{m['step_ratio_8_vs_1']:.2f})"
        for m in b["models"])) if b else ""
    return tpl("report", command=command_line(NAME, r["size"], bool(b)), context=CONTEXT,
               a=r["roofline"][0], others=f" ({others})" if others else "",
               backend_measured=f" {measured}" if measured else "",
               table=table_of(r["roofline"], ROOFLINE),
               backend=_backend_report(b) if b else tpl("backend-not-run")) + "\n"


def _backend_report(b: dict) -> str:
    tpl, big = template(NAME), b["models"][-1]
    slow2 = [m["model"] for m in b["models"] if _step(m, 2) and _step(m, 4) and _step(m, 2) > _step(m, 4)]
    return tpl("backend", m0=b["models"][0], b=b, big=big, gflops=big["gflop_per_s_per_seq"] or 0,
               bend=big["bend_batch"] or 0, table=table_of(b["models"], BACKEND),
               slow_two=" " + tpl("slow-two", models=", ".join(slow2)) if slow2 else "")


@register_study(NAME, "claim 1: decode step time and tokens/s vs batch size (1 vs 8, where the "
                "curve bends), roofline on GPU presets; --backend times the CPU torch backend",
                PARAMS, _serve, report)
def run(study: StudyRun, p: dict) -> tuple[dict, list[fg.Figure]]:
    sweeps = []
    with RowLog(study.out_dir / "roofline.csv", COLUMNS) as log:
        for hw in p["hardware"]:
            sweeps.append(roofline_sweep(hw, p["batches"], log))
            s = sweeps[-1]
            study.progress(f"{hw}: step 1 -> 8 sequences x{s['step_ratio_8_vs_1']:.2f} time, "
                           f"x{s['speedup_8_vs_1']:.2f} tokens/s")
    figures = [_roofline_figure(sweeps)]
    return {"model": MODEL, "context": CONTEXT,
            "roofline": [{k: v for k, v in s.items() if k != "rows"} for s in sweeps],
            "files": ["roofline.csv", figures[0].filename]}, figures
