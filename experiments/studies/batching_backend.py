"""Claim 1 on the real backend: time decode steps of 1..64 sequences on the CPU torch
backend's embedded models (seeded random weights: timing does not depend on their
values). Each batch size is one closed run through backend.driver.run_workload with
the same continuous scheduler the simulator uses; the decode-step durations come from
its step table. Imported only with --backend: it needs torch and transformers."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.backend.driver import run_workload
from batchlab.backend.runtime import Runtime
from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import blocks_for
from batchlab.core.workload import Workload
from batchlab.experiments import plots
from batchlab.experiments.markdown import Report, fmt
from batchlab.experiments.studies.common import Progress, RowLog, pick
from batchlab.experiments.studies.common_backend import THREADS, runtime as shared_runtime

# Short prompts: the prefill of 64 sequences stays cheap, and the decode step's cost is
# the weights and per-token matmuls, as in the roofline study.
PROMPT, WARM, BLOCK = 16, 2, 16
PARAMS = {
    "full": dict(models=("batchlab-tiny", "batchlab-small"), batches=(1, 2, 4, 8, 16, 32, 64),
                 steps=8, rounds=3),
    "small": dict(models=("batchlab-tiny",), batches=(1, 8, 32), steps=4, rounds=1),
}
COLUMNS = ("model", "batch", "step_ms", "step_ms_median", "tokens_per_s", "speedup_vs_1")


def decode_steps(runtime: Runtime, batch: int, steps: int) -> np.ndarray:
    """Seconds of each full decode step of `batch` sequences (after WARM of them)."""
    out = steps + WARM + 1  # +1: the prefill step samples the first token
    w = Workload(np.zeros(batch), np.full(batch, PROMPT), np.full(batch, out),
                 description=[f"{batch} requests at t=0, prompt {PROMPT}, reply {out} tokens"])
    blocks = batch * blocks_for(PROMPT + out, BLOCK)
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=batch, block_size=BLOCK,
                          num_kv_blocks=blocks, max_num_batched_tokens=max(2048, batch * PROMPT))
    st = run_workload(runtime, w, cfg, time_scale=0.0, progress=False).steps
    full = (st["prefill_tokens"] == 0) & (st["num_seqs"] == batch)
    return st["duration_s"][full][WARM:]


def run(out_dir: Path, size: str, progress: Progress) -> dict:
    p = pick(PARAMS, size)
    models = []
    with RowLog(out_dir / "backend.csv", COLUMNS) as log:
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
    return {"models": models, "files": ["backend.csv", _plot(out_dir, models)],
            "prompt": PROMPT, "threads": THREADS, "rounds": p["rounds"]}


def _summarise(name: str, rows: list[dict], meta: dict) -> dict:
    by_b = {r["batch"]: r for r in rows}
    b, t = np.array(list(by_b)), np.array([r["step_ms"] for r in rows])
    per_seq, fixed = np.polyfit(b, t, 1)  # step ms ~ fixed + per_seq * batch
    weights = meta.get("weight_bytes_per_step") or 0
    elem = {"float32": 4, "bfloat16": 2, "float16": 2}.get(meta.get("dtype"), 4)
    out = {"model": name, "cpu": meta.get("cpu", ""), "threads": meta.get("threads"),
           "dtype": meta.get("dtype"), "params": meta.get("model_params"),
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


def _plot(out_dir: Path, models: list[dict]) -> str:
    fig, axes = plots.figure(1, 2, "Real backend (CPU, torch): decode steps vs batch size",
                             width=5.8, height=4.0)
    for m in models:
        x = [r["batch"] for r in m["rows"]]
        line, = axes[0].plot(x, [r["step_ms"] for r in m["rows"]], marker="o", label=m["model"])
        c = line.get_color()
        axes[1].plot(x, [r["tokens_per_s"] for r in m["rows"]], marker="o", color=c, label=m["model"])
        axes[1].plot(x, [m["rows"][0]["tokens_per_s"] * b for b in x], ls=":", color=c, lw=1)
    axes[0].set_ylabel("decode step time (ms, fastest of the run)")
    axes[0].set_ylim(bottom=0)
    axes[0].set_title(f"step time ({models[0]['threads']} thread, {PROMPT}-token prompts)", fontsize=10)
    axes[1].set_ylabel("output tokens/s")
    axes[1].set_yscale("log")
    axes[1].set_title("throughput (dotted: ideal N x)", fontsize=10)
    plots.batch_size_axes(axes, x)
    plots.save(fig, out_dir / "batching_backend.png")
    return "batching_backend.png"


def _step(m: dict, batch: int) -> float | None:
    return next((r["step_ms"] for r in m["rows"] if r["batch"] == batch), None)


def report_section(rep: Report, b: dict) -> None:
    m0 = b["models"][0]
    rep.heading("Real backend (CPU)")
    rep.para(f"Measured on {m0['cpu']} with {m0['threads']} torch thread(s), {m0['dtype']}, "
             f"prompts of {b['prompt']} tokens; each point is the fastest of its full decode "
             f"steps over {b['rounds']} interleaved round(s) (the least disturbed by other work on "
             f"the machine; medians are in the CSV) (`backend.csv`). A least-squares line step = fixed + per-sequence "
             f"x batch summarises each model: the curve bends (step time doubles) near "
             f"batch = fixed / per-sequence.")
    rep.table(["model", "params", "step, 1 seq (ms)", "step, 8 seqs (ms)", "tokens/s x (8 vs 1)",
               "fixed (ms)", "per sequence (ms)", "bend near"],
              [[m["model"], fmt(m["params"], "{:,}"), fmt(m["rows"][0]["step_ms"], "{:.2f}"),
                fmt(_step(m, 8), "{:.2f}"),
                fmt(m.get("speedup_8_vs_1"), "{:.2f}"), fmt(m["fixed_ms"], "{:.2f}"),
                fmt(m["per_seq_ms"], "{:.3f}"), fmt(m["bend_batch"], "{:.0f}")] for m in b["models"]])
    big = b["models"][-1]
    text = (f"On this CPU, a 1-sequence step of {big['model']} streams its weights at "
            f"~{big['weight_gb_per_s']:.0f} GB/s, while each extra sequence costs its matmul FLOPs at "
            f"~{big['gflop_per_s_per_seq'] or 0:.0f} GFLOP/s: the balance point is "
            f"~{big['bend_batch'] or 0:.0f} sequences, not a GPU's hundreds. Up to about 8 the step "
            f"grows little, so the claim holds on the CPU too; past ~16 each extra sequence adds "
            f"nearly its full cost.")
    slow2 = [m["model"] for m in b["models"] if _step(m, 2) and _step(m, 4) and _step(m, 2) > _step(m, 4)]
    if slow2:
        text += (f" Steps of 2 sequences come out slower than steps of 4 ({', '.join(slow2)}): "
                 f"torch's float32 CPU matmul is slower with 2-3 rows than with 4 (checked with a "
                 f"bare matmul), a kernel property rather than batching; it also flatters the "
                 f"1 -> 8 ratio a little.")
    rep.para(text)
    rep.image("batching_backend.png", "backend decode step time and tokens/s vs batch size")
