"""Paging and continuous batching are independent knobs: the 2 x 2 of static/continuous
batching x reserved-at-admission/paged KV allocation. Reserved (Orca, FasterTransformer;
TensorRT-LLM's GUARANTEED_NO_EVICT) admits a request only if its whole budget fits and
never preempts; paged (vLLM) takes blocks as tokens arrive and preempts by recompute
when the pool runs out. Measured: sequences that fit at once, throughput, TTFT and
preemptions.

Plan: the 2 x 2 grid on one request list. Simulated: a KV-bound setup (llama-3-8b on an
A100 with a pool of 2,048 blocks, 128 users in a closed loop). --backend: a reduced grid
served by batchlab-tiny on the CPU torch backend, everything at t=0 so that the simulator
(same scheduler, same pool) must take the very same decisions; its preemptions and
concurrency are reported beside the measured ones."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.kv import blocks_for
from batchlab.core.result import RunResult
from batchlab.core.workload import Workload
from batchlab.experiments import figures as fg
from batchlab.experiments.markdown import table_of
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.output import StudyRun, register_study
from batchlab.experiments.studies.templates import template
from batchlab.sim import simulate

NAME = "paging"
BATCHING = ("static", "continuous")
ALLOCATION = ("reserved", "paged")
GRID = [(b, a) for b in BATCHING for a in ALLOCATION]
MODEL, HARDWARE, BLOCK = "llama-3-8b", "a100-80gb", 16
# A pool of 2,048 blocks (32,768 tokens): KV, not seats, bounds the batch (as on a
# smaller GPU, or with a longer-context model on this one). 128 users keep it full.
PARAMS = {
    "full": dict(requests=600, users=128, seats=128, blocks=2048),
    "small": dict(requests=200, users=128, seats=128, blocks=2048),
}
PROMPT, OUTPUT = (64, 512), (16, 1024)
COLUMNS = ("world", "batching", "kv_allocation", "mean_concurrency", "max_concurrency",
           "output_throughput", "median_ttft_ms", "p99_ttft_ms", "preemptions",
           "kv_utilization", "kv_reserved", "completed", "duration")
BACKEND_PARAMS = {
    "full": dict(requests=32, prompt=(16, 64), output=(8, 96), seats=16, block=8, blocks=80),
    "small": dict(requests=16, prompt=(16, 48), output=(8, 64), seats=8, block=8, blocks=40),
}
BACKEND_COLUMNS = (*COLUMNS, "sim_preemptions", "sim_mean_concurrency", "same_decisions")


def label(batching: str, allocation: str) -> str:
    return f"{batching}+{allocation}"


def scheduler(batching: str, allocation: str, seats: int, block_size: int, blocks: int) -> SchedulerConfig:
    return SchedulerConfig(policy=batching, kv_allocation=allocation, max_num_seqs=seats,
                           block_size=block_size, num_kv_blocks=blocks)


def workload(n: int, prompt: tuple[int, int], output: tuple[int, int], users: int | None,
             seed: int = 0) -> Workload:
    """n requests of uniform prompt and output lengths; `users` in a closed loop (None:
    all at t=0, so that no decision depends on how long a step took)."""
    rng = np.random.default_rng(seed)
    p, o = rng.integers(prompt[0], prompt[1] + 1, n), rng.integers(output[0], output[1] + 1, n)
    how = f"closed loop: {users} users" if users else "all at t=0"
    return Workload(np.zeros(n), p, o, max_concurrency=users,
                    description=[f"{n} requests, prompts {prompt[0]}-{prompt[1]} tokens, outputs "
                                 f"{output[0]}-{output[1]} tokens, seed {seed}; {how}"])


def reserved_share(res: RunResult, block_size: int, blocks: int) -> float:
    """Time-weighted mean share of the pool reserved by admitted requests' whole budgets
    (prompt + output - 1 tokens), from each one's first schedule to its finish: what
    reserved allocation holds (it never preempts, so a request holds its budget once)."""
    req = res.requests
    done = req["status"] == "finished"
    budget = np.array([blocks_for(int(p + o - 1), block_size)
                       for p, o in zip(req["prompt_len"][done], req["output_len"][done])])
    held = (req["finish_s"][done] - req["first_scheduled_s"][done]) * budget
    st = res.steps
    span = float(st["start_s"][-1] + st["duration_s"][-1] - st["start_s"][0])
    return float(held.sum() / (span * blocks)) if span > 0 else float("nan")


def measure(world: str, batching: str, allocation: str, res: RunResult, block_size: int,
            blocks: int) -> dict:
    """The study's figures. Concurrency: sequences in a decode-only step (every running
    sequence decodes in one), mean and peak: how many sequences fit at once."""
    s, st = res.summary(), res.steps
    decode = st["prefill_tokens"] == 0
    k = st["num_seqs"][decode]
    return {"world": world, "batching": batching, "kv_allocation": allocation,
            "mean_concurrency": float(k.mean()) if k.size else float("nan"),
            "max_concurrency": int(k.max()) if k.size else 0,
            **{c: s[c] for c in ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "preemptions",
                                 "kv_utilization", "completed", "duration")},
            "kv_reserved": reserved_share(res, block_size, blocks) if allocation == "reserved" else float("nan")}


def _figure(rows: dict) -> fg.Figure:
    names = [label(b, "reserved").split("+")[0] for b in BATCHING]
    panels = []
    for key, title, unit, f in (
            ("mean_concurrency", "sequences decoding at once", "mean per decode step", "{:.0f}"),
            ("output_throughput", "output throughput", "tokens/s", "{:.0f}"),
            ("median_ttft_ms", "TTFT p50", "seconds", "{:.1f}"),
            ("preemptions", "preemptions", "count", "{:.0f}")):
        scale = 1000 if key.endswith("_ms") else 1
        panels.append(fg.Panel([fg.GroupedBars(names, {a: [rows[label(b, a)][key] / scale for b in BATCHING]
                                                       for a in ALLOCATION}, title, unit, f)]))
    return fg.Figure("paging.png", panels, 1, 4, "Reserved (plain) vs paged (hatched) KV, static and "
                     "continuous", width=3.6, height=3.6)


def _serve(out_dir: Path, size: str, progress: Progress) -> tuple[dict, list[fg.Figure]]:
    """The reduced grid served by batchlab-tiny on the CPU. Needs torch and transformers."""
    from batchlab.experiments.studies.common_backend import machine, serve  # lazy: torch (the --backend half)
    p = pick(BACKEND_PARAMS, size)
    w = workload(p["requests"], p["prompt"], p["output"], users=None)
    rows = {}
    with RowLog(out_dir / "backend_results.csv", BACKEND_COLUMNS) as log:
        for batching, allocation in GRID:
            cfg = scheduler(batching, allocation, p["seats"], p["block"], p["blocks"])
            real = serve(w, cfg)
            # Equal step times cannot matter here (all at t=0): the simulator's decisions
            # must be the backend's, step for step.
            sim = simulate(w, cfg, LinearCostModel(0.01), p["blocks"])
            row = measure("real", batching, allocation, real, p["block"], p["blocks"])
            s = measure("sim", batching, allocation, sim, p["block"], p["blocks"])
            same = all((real.steps[c] == sim.steps[c]).all() for c in ("num_seqs", "prefill_tokens",
                                                                        "num_preempted"))
            row.update(sim_preemptions=s["preemptions"], sim_mean_concurrency=s["mean_concurrency"],
                       same_decisions=bool(same and len(real.steps["num_seqs"]) == len(sim.steps["num_seqs"])))
            rows[label(batching, allocation)] = log.add(row)
            progress(f"backend {label(batching, allocation)}: {row['mean_concurrency']:.1f} concurrent, "
                     f"{row['output_throughput']:.0f} tok/s, {row['preemptions']} preemptions")
    return {"machine": machine(), "workload": w.describe(), "pool": f"{p['blocks']} blocks of "
            f"{p['block']} tokens ({p['blocks'] * p['block']} tokens)", "seats": p["seats"],
            "rows": rows, "files": ["backend_results.csv"]}, []  # no figures of its own


CELLS = (("batching", "batching", None), ("KV", "kv_allocation", None),
         ("concurrent (mean)", "mean_concurrency", "{:.1f}"), ("concurrent (max)", "max_concurrency", "{:.0f}"),
         ("output tok/s", "output_throughput", "{:.0f}"),
         ("TTFT p50 (s)", lambda x: x["median_ttft_ms"] / 1000, "{:.2f}"),
         ("TTFT p99 (s)", lambda x: x["p99_ttft_ms"] / 1000, "{:.2f}"), ("preemptions", "preemptions", "{:.0f}"),
         ("KV used", "kv_utilization", "{:.0%}"), ("KV reserved", "kv_reserved", "{:.0%}"))
BACKEND_CELLS = (*CELLS, ("sim. preemptions", "sim_preemptions", "{:.0f}"),
                 ("sim. concurrent", "sim_mean_concurrency", "{:.1f}"),
                 ("same decisions", lambda x: "yes" if x["same_decisions"] else "no", None))


def report(r: dict) -> str:
    """report.md from the study's result (live, or read back from study.json)."""
    tpl, rows, b = template(NAME), r["rows"], r.get("backend")
    sr, sp = rows["static+reserved"], rows["static+paged"]
    cr, cp = rows["continuous+reserved"], rows["continuous+paged"]
    return tpl("report", command=command_line(NAME, r["size"], bool(b)), r=r, sr=sr, sp=sp, cr=cr, cp=cp,
               static_fit=sp["mean_concurrency"] / sr["mean_concurrency"],
               continuous_fit=cp["mean_concurrency"] / cr["mean_concurrency"],
               continuous_alone=cr["output_throughput"] / sr["output_throughput"],
               both=cp["output_throughput"] / sr["output_throughput"], table=table_of(rows.values(), CELLS),
               backend=tpl("backend", b=b, table=table_of(b["rows"].values(), BACKEND_CELLS)) if b else "") + "\n"


@register_study(NAME, "paging vs continuous batching, independent: static/continuous x reserved/paged "
                "KV: sequences that fit, throughput, TTFT, preemptions; --backend: a reduced "
                "grid on the CPU torch backend",
                PARAMS, _serve, report)
def run(study: StudyRun, p: dict) -> tuple[dict, list[fg.Figure]]:
    cost, blocks, meta, _ = preset(MODEL, HARDWARE, block_size=BLOCK, num_kv_blocks=p["blocks"])
    w = workload(p["requests"], PROMPT, OUTPUT, p["users"])
    rows = {}
    with RowLog(study.out_dir / "results.csv", COLUMNS) as log:
        for batching, allocation in GRID:
            cfg = scheduler(batching, allocation, p["seats"], BLOCK, blocks)
            res = simulate(w, cfg, cost, blocks, meta=meta)
            r = rows[label(batching, allocation)] = log.add(measure("sim", batching, allocation, res, BLOCK, blocks))
            study.progress(f"{label(batching, allocation)}: {r['mean_concurrency']:.1f} concurrent, "
                           f"{r['output_throughput']:.0f} tok/s, {r['preemptions']} preemptions")
    figures = [_figure(rows)]
    return {"setup": setup_line(meta), "workload": w.describe(),
            "seats": p["seats"], "rows": rows, "files": ["results.csv", figures[0].filename]}, figures
