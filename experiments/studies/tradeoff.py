"""Claim 3: as concurrent sequences grow, per-user tokens/s falls and TPOT rises while
total tokens/s rises until memory or compute is the bottleneck. Marks the concurrency at
which TPOT crosses 100 ms and where the KV cache runs out (preemptions appear).

Plan: N users in a closed loop with N seats, N from 1 to hundreds. Simulated: llama-3-8b on
an A100 (continuous and chunked). --backend: N from 1 to 128 on batchlab-tiny, CPU torch
backend, with a deliberately small KV pool so that memory runs out within minutes; each
point is also simulated on the identical requests and pool, to check the KV limit against
the shared scheduler's."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import blocks_for
from batchlab.core.result import RunResult
from batchlab.core.workload import Workload
from batchlab.experiments import figures as fg
from batchlab.experiments.markdown import table_of
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.output import StudyRun, register_study
from batchlab.experiments.studies.templates import template
from batchlab.sim import simulate

NAME = "tradeoff"
MODEL, HARDWARE, SEED, TPOT_LIMIT_MS = "llama-3-8b", "a100-80gb", 0, 100.0
PROMPT, OUTPUT = (256, 768), (128, 384)
PARAMS = {
    "full": dict(users=(1, 2, 4, 8, 16, 32, 40, 64, 96, 128, 192, 256, 320, 384, 448, 512, 576,
                        640, 704, 768, 896, 1024), rounds=3, policies=("continuous", "chunked")),
    "small": dict(users=(1, 8, 40, 128, 384, 768), rounds=2, policies=("continuous",)),
}
COLUMNS = ("policy", "users", "output_throughput", "per_user_tokens_per_s", "median_tpot_ms",
           "p99_tpot_ms", "decode_step_ms", "mean_batch", "median_ttft_ms", "kv_peak",
           "preemptions", "completed")
BACKEND_PROMPT, BACKEND_OUTPUT, BACKEND_BLOCK = (32, 96), (32, 96), 16
# 576 blocks of 16 = 9,216 tokens (54 MiB for batchlab-tiny): about 72 sequences at their
# mean full length, so the KV limit falls inside the sweep instead of at thousands.
KV_BLOCKS = 576
# The GPU's 100 ms says nothing on a CPU: batchlab-tiny's 1-sequence TPOT is a few ms and
# the CPU saturates near 16-32 sequences. The limit is therefore relative to the run's own
# 1-sequence TPOT: 5x it (the same kind of limit as the GPU's 100 ms, about 9x its 11 ms),
# one that a CPU crosses before its KV pool runs out.
TPOT_LIMIT_FACTOR = 5.0
BACKEND_PARAMS = {
    "full": dict(users=(1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 128), rounds=2,
                 policies=("continuous", "chunked")),
    "small": dict(users=(1, 8, 32, 96), rounds=1, policies=("continuous",)),
}
# slowdown: the run's decode steps over the same sizes' steps timed first (common_backend):
# another job on the CPU shows there; the ratios are claimed at the reference speed.
BACKEND_COLUMNS = (*COLUMNS, "sim_preemptions", "run_s", "slowdown", "reference_speed_throughput",
                   "reference_speed_per_user")
# The speed reference's replies end this many steps apart: every batch size to the sweep's
# largest timed a few times, in a few seconds.
REFERENCE_STEPS_EACH = 2


def closed_loop(users: int, rounds: int, seed: int = SEED, prompt: tuple[int, int] = PROMPT,
                output: tuple[int, int] = OUTPUT) -> Workload:
    """`users` users, each sending `rounds` requests back to back (no think time)."""
    rng = np.random.default_rng(seed)
    n = users * rounds
    desc = [f"{n} requests, prompts {prompt[0]}-{prompt[1]} tokens, replies {output[0]}-"
            f"{output[1]} (uniform), seed {seed}", f"closed loop: {users} users, no think time"]
    return Workload(np.zeros(n), rng.integers(prompt[0], prompt[1] + 1, n),
                    rng.integers(output[0], output[1] + 1, n), max_concurrency=users,
                    description=desc)


def summarise(res: RunResult, policy: str, users: int) -> dict:
    """One sweep point from a run's summary and step table (simulated or real)."""
    s, st = res.summary(), res.steps
    decode = st["prefill_tokens"] == 0
    return {"policy": policy, "users": users, "output_throughput": s["output_throughput"],
            "per_user_tokens_per_s": 1000.0 / s["median_tpot_ms"],
            "median_tpot_ms": s["median_tpot_ms"], "p99_tpot_ms": s["p99_tpot_ms"],
            "decode_step_ms": float(np.median(st["duration_s"][decode]) * 1000) if decode.any() else math.nan,
            "mean_batch": float(np.mean(st["num_seqs"])), "median_ttft_ms": s["median_ttft_ms"],
            "kv_peak": float(np.max(st["kv_blocks_used"] / st["kv_blocks_total"])),
            "preemptions": s["preemptions"], "completed": s["completed"]}


def crossing(rows: list[dict], key: str, limit: float) -> float | None:
    """Concurrency at which rows[key] first reaches `limit`, interpolated in log(users)."""
    for a, b in zip(rows, rows[1:]):
        if a[key] < limit <= b[key]:
            f = (math.log(limit) - math.log(a[key])) / (math.log(b[key]) - math.log(a[key]))
            return math.exp(math.log(a["users"]) + f * (math.log(b["users"]) - math.log(a["users"])))
    return float(rows[0]["users"]) if rows and rows[0][key] >= limit else None


def landmarks(rows: list[dict], limit_ms: float = TPOT_LIMIT_MS) -> dict:
    pre = [r["users"] for r in rows if r["preemptions"] > 0]
    best = max(rows, key=lambda r: r["output_throughput"])
    return {"tpot_p50_crosses_at": crossing(rows, "median_tpot_ms", limit_ms),
            "tpot_p99_crosses_at": crossing(rows, "p99_tpot_ms", limit_ms),
            "first_preemption_users": pre[0] if pre else None,
            "last_clean_users": max((r["users"] for r in rows if r["users"] < (pre or [math.inf])[0]),
                                    default=None),
            "peak_throughput": best["output_throughput"], "peak_throughput_users": best["users"],
            "throughput_1": rows[0]["output_throughput"],
            "per_user_1": rows[0]["per_user_tokens_per_s"]}


def _figure(by_policy: dict[str, list[dict]], title: str | None = None, limit_ms: float = TPOT_LIMIT_MS,
            filename: str = "tradeoff.png") -> fg.Figure:
    title = title or f"{MODEL} on {HARDWARE}: concurrency trade-off (closed loop, N users = N seats)"
    labels = [("total output tokens/s", "tokens/s"), ("per-user tokens/s (1 / TPOT p50)", "tokens/s per user"),
              ("TPOT (time per output token)", "ms"), ("KV cache: peak use", "% of blocks")]
    panels = [fg.Panel(title=t, ylabel=y, xscale="log", xlabel="concurrent sequences (users)",
                       grid=fg.Grid("both"), legend=fg.Legend(7, "upper left" if i != 1 else "upper right"))
              for i, (t, y) in enumerate(labels)]
    panels[2].yscale = "log"
    panels[3].twin = fg.Panel(ylabel="preemptions in the run (dashed)")
    primary = next(iter(by_policy))
    for policy, rows in by_policy.items():
        c, x = fg.color(policy), [r["users"] for r in rows]
        col = lambda k: [r[k] for r in rows]  # noqa: E731
        panels[0].marks.append(fg.Line(x, col("output_throughput"), label=policy, color=c, marker="."))
        panels[1].marks.append(fg.Line(x, col("per_user_tokens_per_s"), label=policy, color=c, marker="."))
        panels[2].marks += [fg.Line(x, col("median_tpot_ms"), label=f"{policy} TPOT p50", color=c, marker="."),
                            fg.Line(x, col("p99_tpot_ms"), label=f"{policy} TPOT p99", color=c, ls="--")]
        if policy == primary:  # decode-only steps: the price of the batch alone
            panels[2].marks.append(fg.Line(x, col("decode_step_ms"), label=f"{policy} decode-only step",
                                           color=c, ls=":"))
        panels[3].marks.append(fg.Line(x, [100 * v for v in col("kv_peak")], label=f"{policy} KV peak",
                                       color=c, marker="."))
        panels[3].twin.marks.append(fg.Line(x, col("preemptions"), label=f"{policy} preemptions",
                                            color=c, ls="--"))
    lm = landmarks(by_policy[primary], limit_ms)  # the first policy's landmarks, on every panel
    for p in panels:
        if lm["tpot_p50_crosses_at"]:
            p.marks.append(fg.MarkX(lm["tpot_p50_crosses_at"], f"TPOT p50 = {limit_ms:g} ms at "
                                    f"~{lm['tpot_p50_crosses_at']:.0f}", "#333333", y=0.6))
        if lm["first_preemption_users"]:
            p.marks.append(fg.MarkX(lm["first_preemption_users"], f"KV full: preemptions from "
                                    f"{lm['first_preemption_users']}", "#8b0000", y=0.6))
    panels[2].marks.append(fg.MarkY(limit_ms, f"{limit_ms:g} ms"))
    return fg.Figure(filename, panels, 2, 2, title, width=6.0, height=4.0)


# -- the real backend (--backend) --------------------------------------------------------

def _serve(out_dir: Path, size: str, progress: Progress) -> tuple[dict, list[fg.Figure]]:
    """The sweep served by batchlab-tiny on the CPU. Needs torch and transformers."""
    # lazy: torch (the --backend half)
    from batchlab.experiments.studies.common_backend import (MODEL as REAL_MODEL, machine, runtime, serve,
                                                             slowdown, speed_reference, unless_busy)
    p = pick(BACKEND_PARAMS, size)
    cost, _, meta, _ = preset(MODEL, HARDWARE, block_size=BACKEND_BLOCK)  # for the schedule only
    by_policy: dict[str, list[dict]] = {}
    reference, reruns = speed_reference(max(p["users"]), steps_each=REFERENCE_STEPS_EACH), 0
    with RowLog(out_dir / "backend_sweep.csv", BACKEND_COLUMNS) as log:
        for policy in p["policies"]:
            for n in p["users"]:
                w = closed_loop(n, p["rounds"], prompt=BACKEND_PROMPT, output=BACKEND_OUTPUT)
                cfg = SchedulerConfig(policy=policy, max_num_seqs=n, block_size=BACKEND_BLOCK,
                                      num_kv_blocks=KV_BLOCKS)

                def attempt() -> tuple[RunResult, float]:
                    res = serve(w, cfg)
                    return res, slowdown(res.steps, reference)

                def busy(slow: float) -> None:
                    progress(f"backend {policy} {n} users: steps x{slow:.2f} slower than the reference, "
                             f"the machine was busy: running it again")

                (res, slow), rerun = unless_busy(attempt, lambda a: a[1], busy)
                reruns += rerun
                row = summarise(res, policy, n)
                row.update(slowdown=slow, reference_speed_throughput=row["output_throughput"] * slow,
                           reference_speed_per_user=row["per_user_tokens_per_s"] * slow)
                row["run_s"] = res.meta.wall_s
                row["sim_preemptions"] = simulate(w, cfg, cost, KV_BLOCKS, meta=meta).summary()["preemptions"]
                by_policy.setdefault(policy, []).append(log.add(row))
                progress(f"backend {policy} {n:4d} users: {row['output_throughput']:5.0f} tok/s total, "
                         f"{row['per_user_tokens_per_s']:5.1f} per user, TPOT p50 "
                         f"{row['median_tpot_ms']:5.1f} ms, {row['preemptions']} preemptions "
                         f"({row['run_s']:.1f} s)")
    limit_ms = TPOT_LIMIT_FACTOR * next(iter(by_policy.values()))[0]["median_tpot_ms"]
    m = runtime().meta()
    title = (f"Real backend ({REAL_MODEL}, CPU, 1 thread): concurrency trade-off, KV pool "
             f"{KV_BLOCKS * BACKEND_BLOCK:,} tokens")
    figure = _figure(by_policy, title, limit_ms, "backend_tradeoff.png")
    return {"size": size, "model": REAL_MODEL, "machine": machine(), "rounds": p["rounds"],
            "prompt": BACKEND_PROMPT, "output": BACKEND_OUTPUT, "kv_blocks": KV_BLOCKS,
            "block_size": BACKEND_BLOCK, "kv_mib": KV_BLOCKS * BACKEND_BLOCK * m.kv_bytes_per_token / 2**20,
            "tpot_limit_ms": limit_ms, "sweep": by_policy, "reruns": reruns,
            "reference_ms": {k: v * 1000 for k, v in reference.items()},
            "landmarks": {pol: _backend_landmarks(rows, limit_ms) for pol, rows in by_policy.items()},
            "files": ["backend_sweep.csv", figure.filename]}, [figure]


def _backend_landmarks(rows: list[dict], limit_ms: float) -> dict:
    lm = landmarks(rows, limit_ms)
    # Where total throughput stops paying for more sequences: first point within 10% of the peak.
    lm["saturates_at"] = next(r["users"] for r in rows if r["output_throughput"] >= 0.9 * lm["peak_throughput"])
    sim_pre = [r["users"] for r in rows if r["sim_preemptions"] > 0]
    lm["sim_first_preemption_users"] = sim_pre[0] if sim_pre else None
    return lm


# -- the report --------------------------------------------------------------------------

SWEEP = (("users", "users", None), ("total tok/s", "output_throughput", "{:,.0f}"),
         ("per-user tok/s", "per_user_tokens_per_s", "{:.1f}"), ("TPOT p50 (ms)", "median_tpot_ms", "{:.1f}"),
         ("TPOT p99 (ms)", "p99_tpot_ms", "{:.1f}"), ("decode step (ms)", "decode_step_ms", "{:.1f}"),
         ("mean batch", "mean_batch", "{:.0f}"), ("TTFT p50 (ms)", "median_ttft_ms", "{:,.0f}"),
         ("KV peak", "kv_peak", "{:.0%}"), ("preemptions", "preemptions", None))
BACKEND_SWEEP = (*SWEEP, ("sim. preemptions", "sim_preemptions", None), ("run (s)", "run_s", "{:.1f}"))


def _users(v: float | None) -> str:
    return f"~{v:.0f} sequences" if v else "not within the sweep"


def _tables(sweep: dict[str, list[dict]], columns: tuple, world: str = "") -> str:
    return "\n\n".join(template(NAME)("sweep", policy=policy, world=world, table=table_of(rows, columns))
                       for policy, rows in sweep.items())


def report(r: dict) -> str:
    """report.md from the study's result (live, or read back from study.json)."""
    tpl, lm = template(NAME), r["landmarks"]
    policy = "continuous" if "continuous" in lm else next(iter(lm))
    c = lm[policy]
    at40 = next((x for x in r["sweep"][policy] if x["users"] == 40), None)
    b = r.get("backend")
    return tpl("report", command=command_line(NAME, r["size"], bool(b)), r=r, policy=policy, c=c,
               hardware=HARDWARE, gain=c["peak_throughput"] / c["throughput_1"],
               at_40=" " + tpl("at-40", x=at40) if at40 else "",
               p50_at=_users(c["tpot_p50_crosses_at"]), p99_at=_users(c["tpot_p99_crosses_at"]),
               tables=_tables(r["sweep"], SWEEP),
               backend=_backend_report(b, r) if b else tpl("backend-not-run")) + "\n"


def _backend_report(b: dict, study: dict) -> str:
    tpl = template(NAME)
    policy = "continuous" if "continuous" in b["landmarks"] else next(iter(b["landmarks"]))
    c, rows = b["landmarks"][policy], b["sweep"][policy]
    g = study["landmarks"].get(policy) or next(iter(study["landmarks"].values()))
    after = [x for x in rows if x["preemptions"] > 0]
    if not after:
        past = ""
    else:
        falls = after[-1]["output_throughput"] < 0.95 * c["peak_throughput"]
        past = " " + tpl("past-falls" if falls else "past-holds", x=after[-1])
    first, pre = c["first_preemption_users"], c["sim_first_preemption_users"]
    kv = (tpl("kv-runs-out", c=c, first=first, where="at the same point" if pre == first else f"from {pre}")
          if first else tpl("kv-holds"))
    limit = b["tpot_limit_ms"]
    return tpl("backend", command=command_line(NAME, b["size"], True), b=b, c=c, g=g, policy=policy,
               kv_tokens=b["kv_blocks"] * b["block_size"], limit=limit, factor=TPOT_LIMIT_FACTOR,
               per_user_limit=1000 / limit, first=rows[0], worst=max(rows, key=lambda x: x["median_tpot_ms"]),
               gain=c["peak_throughput"] / c["throughput_1"], sim_gain=g["peak_throughput"] / g["throughput_1"],
               p50_at=_users(c["tpot_p50_crosses_at"]), p99_at=_users(c["tpot_p99_crosses_at"]),
               kv=kv, past=past, tables=_tables(b["sweep"], BACKEND_SWEEP, " (real backend)"))


@register_study(NAME, "claim 3: 1 ... hundreds of concurrent sequences: per-user vs total tokens/s, "
                "TPOT crossing 100 ms, KV exhaustion (preemptions); --backend sweeps 1-128 "
                "sequences on the CPU torch backend",
                PARAMS, _serve, report)
def run(study: StudyRun, p: dict) -> tuple[dict, list[fg.Figure]]:
    mean_prompt, mean_out = (PROMPT[0] + PROMPT[1]) / 2, (OUTPUT[0] + OUTPUT[1]) / 2
    cost, blocks, meta, _ = preset(MODEL, HARDWARE)
    kv_users = blocks // blocks_for(math.ceil(mean_prompt + mean_out - 1), meta.block_size)
    # Compute ceiling: every request's prompt and reply tokens each cost flops_per_token.
    compute_ceiling = cost.peak_flops / (cost.flops_per_token * (mean_prompt + mean_out)) * mean_out
    by_policy: dict[str, list[dict]] = {}
    with RowLog(study.out_dir / "sweep.csv", COLUMNS) as log:
        for policy in p["policies"]:
            for n in p["users"]:
                res = simulate(closed_loop(n, p["rounds"]), SchedulerConfig(policy=policy, max_num_seqs=n),
                               cost, blocks, meta=meta)
                r = log.add(summarise(res, policy, n))
                by_policy.setdefault(policy, []).append(r)
                study.progress(f"{policy} {n:5d} users: {r['output_throughput']:7.0f} tok/s total, "
                               f"{r['per_user_tokens_per_s']:5.1f} tok/s per user, TPOT p50 "
                               f"{r['median_tpot_ms']:6.1f} ms, {r['preemptions']} preemptions")
    figures = [_figure(by_policy)]
    return {"setup": setup_line(meta),
            "workload": closed_loop(1, p["rounds"]).description[0].split(",", 1)[1].strip(),
            "rounds": p["rounds"], "kv_users_estimate": kv_users,
            "compute_ceiling_tokens_per_s": compute_ceiling,
            "compute_efficiency": meta.compute_efficiency,
            "landmarks": {pol: landmarks(rows) for pol, rows in by_policy.items()},
            "sweep": by_policy, "files": ["sweep.csv", figures[0].filename]}, figures
