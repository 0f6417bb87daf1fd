"""Claim 4: TTFT and TPOT (p50, p99) of static, continuous and chunked prefill as the
request rate grows, and the highest rate each sustains under an SLO (TTFT p99 < 2 s and
TPOT p99 < 100 ms), found by bisection on the rate with a fixed seed.

Plan: the `chat` mix at a sweep of Poisson rates, then a bisection inside the sweep's
bracket. Simulated: llama-3-8b on an A100, 32 seats. --backend: a reduced chat mix served
by batchlab-tiny on the CPU torch backend at a few rates around the CPU's capacity, under a
CPU-sized SLO, with a coarse search (every point is a real run on the wall clock), each
point checked against reference decode steps timed first and run again if the machine was
busy."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import blocks_for
from batchlab.core.summary import SLO, per_request_latencies
from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.core.workload.lengths import LengthSpec
from batchlab.experiments import figures as fg
from batchlab.experiments.markdown import fmt, table_of
from batchlab.experiments.studies.common import BUSY, Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.output import StudyRun, register_study
from batchlab.experiments.studies.slo_search import ABS_TOL, REL_TOL, max_rate
from batchlab.experiments.studies.templates import template
from batchlab.sim import simulate

NAME = "latency-vs-load"
POLICIES = ("static", "continuous", "chunked")
MODEL, HARDWARE, SEATS, SEED = "llama-3-8b", "a100-80gb", 32, 0
SLO_SPEC = SLO(ttft_ms=2000, tpot_ms=100)
PARAMS = {
    "full": dict(requests=1000, rates=(0.5, 1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 24)),
    "small": dict(requests=1000, rates=(0.5, 2, 8, 14, 24)),  # fewer would not build a queue
}
COLUMNS = ("policy", "rate", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
           "request_throughput", "output_throughput", "request_goodput", "slo_attainment",
           "slot_utilization", "completed", "meets_slo", "search")
BACKEND_SEATS, BACKEND_BLOCK = 8, 16
# The chat preset cut to the CPU: prompts a third as long, the short replies kept, the
# long tails divided by 3 (100-300 -> 34-100, 500-1000 -> 167-333).
BACKEND_PROMPT = LengthSpec(dist="lognormal", mean=100, sigma=0.8, max=512)
BACKEND_OUTPUT = LengthSpec(dist="mixture", components=[
    LengthSpec(dist="uniform", low=12, high=40, weight=0.80),
    LengthSpec(dist="uniform", low=34, high=100, weight=0.15),
    LengthSpec(dist="uniform", low=167, high=333, weight=0.05)])
# batchlab-tiny decodes a step of 8 in about the time llama-3-8b takes on an A100 (~11 ms,
# REF_STEP_S, where this was written), so TPOT is held to 5x that, not the GPU's 100 ms (~9x),
# and TTFT to 1 s: prompts are a third as long, and a point of a few dozen requests can only
# build a backlog for seconds. On another machine (or this one, busy for the whole sweep)
# both scale with its own step of 8, timed first (cpu_slo): a point meets the SLO or not by
# its queueing, whatever the CPU's speed.
SLO_CPU = SLO(ttft_ms=1000, tpot_ms=50)
REF_STEP_S = 0.011
BACKEND_PARAMS = {
    "full": dict(requests=48, rates=(4, 8, 12, 16, 24), search_evals=2),
    # 64 req/s is a burst: the small size only contrasts no load with a backlog.
    "small": dict(requests=16, rates=(4, 64), search_evals=0),
}
BACKEND_COLUMNS = (*COLUMNS, "decode_step_ms", "slowdown", "busy", "run_s")


def cpu_slo(reference: dict[int, float]) -> SLO:
    """SLO_CPU scaled by this machine's decode step of BACKEND_SEATS sequences (reference:
    common_backend.speed_reference) over REF_STEP_S."""
    r = reference[BACKEND_SEATS] / REF_STEP_S
    return SLO(ttft_ms=round(SLO_CPU.ttft_ms * r, 1), tpot_ms=round(SLO_CPU.tpot_ms * r, 2))


def meets(s: dict, n: int, slo: SLO = SLO_SPEC) -> bool:
    return (s["completed"] == n and s["p99_ttft_ms"] <= slo.ttft_ms
            and s["p99_tpot_ms"] <= slo.tpot_ms)


def bracket(rows: list[dict]) -> tuple[float, float | None]:
    """(highest passing rate below the first failing one, first failing rate)."""
    lo = 0.0
    for r in rows:
        if not r["meets_slo"]:
            return lo, r["rate"]
        lo = r["rate"]
    return lo, None


def binding(row: dict, slo: SLO = SLO_SPEC) -> str:
    parts = []
    if row["p99_ttft_ms"] > slo.ttft_ms:
        parts.append(f"TTFT p99 {row['p99_ttft_ms']:,.0f} ms")
    if row["p99_tpot_ms"] > slo.tpot_ms:
        parts.append(f"TPOT p99 {row['p99_tpot_ms']:.0f} ms")
    return " and ".join(parts) or "unfinished requests"


def cdf_rate(sweep: dict) -> float:
    """The highest swept rate at which continuous meets the SLO (static usually does not)."""
    ok = [r["rate"] for r in sweep["continuous"] if r["meets_slo"]]
    return ok[-1] if ok else sweep["continuous"][0]["rate"]


# -- simulation ------------------------------------------------------------------------

class Runner:
    """Simulates one (policy, rate) point, logs it, keeps its latency samples."""

    def __init__(self, n: int, log: RowLog, progress: Progress) -> None:
        self.n, self.log, self.progress = n, log, progress
        self.cost, self.blocks, self.meta, _ = preset(MODEL, HARDWARE)
        self.samples: dict[tuple[str, float], dict[str, np.ndarray]] = {}

    def workload(self, rate: float):
        return build_workload(WorkloadConfig(source="chat", num_requests=self.n, rate=rate, seed=SEED))

    def __call__(self, policy: str, rate: float, search: bool = False) -> dict:
        res = simulate(self.workload(rate), SchedulerConfig(policy=policy, max_num_seqs=SEATS),
                       self.cost, self.blocks, meta=self.meta)
        s = res.summary(SLO_SPEC)
        row = self.log.add({"policy": policy, "rate": rate, **{k: s[k] for k in COLUMNS if k in s},
                            "meets_slo": meets(s, self.n), "search": search})
        if not search:
            lat = per_request_latencies(res.requests)
            self.samples[(policy, rate)] = {"ttft": lat["ttft"], "tpot": lat["tpot"]}
        self.progress(f"{policy:10s} {rate:7.3f} req/s: TTFT p99 {s['p99_ttft_ms']:9.0f} ms, "
                      f"TPOT p99 {s['p99_tpot_ms']:6.1f} ms -> {'meets' if row['meets_slo'] else 'misses'} SLO"
                      + (" (search)" if search else ""))
        return row


def _figures(sweep: dict, limits: dict, samples: dict, slo: SLO = SLO_SPEC, title: str | None = None,
             prefix: str = "") -> list[fg.Figure]:
    """latency_vs_load.png, throughput_vs_load.png, latency_cdf.png (names after `prefix`)."""
    title = title or f"{MODEL} on {HARDWARE}, {SEATS} seats, chat mix"
    latency = []
    for key, label, limit in (("median_ttft_ms", "TTFT p50", None), ("p99_ttft_ms", "TTFT p99", slo.ttft_ms),
                              ("median_tpot_ms", "TPOT p50", None), ("p99_tpot_ms", "TPOT p99", slo.tpot_ms)):
        ttft = key.endswith("ttft_ms")  # TTFT spans 4 decades; TPOT stays within one
        p = fg.Panel(title=f"{label} (dotted verticals: max rate under the SLO)", title_size=9,
                     xlabel="request rate (req/s, Poisson)", ylabel="ms (log)" if ttft else "ms",
                     yscale="log" if ttft else None, ylim=None if ttft else (0, slo.tpot_ms * 1.15),
                     grid=fg.Grid("both"), legend=fg.Legend(8))
        for policy, rows in sweep.items():
            c = fg.color(policy)
            p.marks += [fg.Line([r["rate"] for r in rows], [r[key] for r in rows], label=policy, color=c,
                                marker="."),
                        fg.VLine(limits[policy]["max_rate"], c, ":", 1.2)]
        if limit:
            p.marks.append(fg.MarkY(limit, f"SLO {limit:g} ms"))
        latency.append(p)

    throughput = [fg.Panel(title=t, xlabel="offered rate (req/s)", ylabel="req/s", grid=fg.Grid(),
                           legend=fg.Legend(8))
                  for t in ("achieved throughput", "goodput (requests within the SLO per s)")]
    for policy, rows in sweep.items():
        x, c = [r["rate"] for r in rows], fg.color(policy)
        for p, key in zip(throughput, ("request_throughput", "request_goodput")):
            p.marks.append(fg.Line(x, [r[key] for r in rows], label=policy, color=c, marker="."))
    top = max(r["rate"] for rows in sweep.values() for r in rows)
    for p in throughput:
        p.marks.append(fg.Line([0, top], [0, top], label="offered", color="#999999", ls="--", lw=1))

    rate = cdf_rate(sweep)
    cdfs = [fg.Panel(xlabel="TTFT (ms, log)", legend=fg.Legend(8)), fg.Panel(xlabel="TPOT (ms)", legend=fg.Legend(8))]
    for policy in sweep:
        lat = samples[(policy, rate)]
        cdfs[0].marks.append(fg.Cdf(lat["ttft"] * 1000, policy, fg.color(policy)))
        cdfs[1].marks.append(fg.Cdf(lat["tpot"] * 1000, policy, fg.color(policy), log=False))
    for p, limit in zip(cdfs, (slo.ttft_ms, slo.tpot_ms)):
        p.marks.append(fg.VLine(limit, "#444444", ":", 1, label=f"SLO {limit:g} ms"))
    return [fg.Figure(f"{prefix}latency_vs_load.png", latency, 2, 2, f"Latency vs load: {title}"),
            fg.Figure(f"{prefix}throughput_vs_load.png", throughput, 1, 2, f"Throughput vs load: {title}",
                      width=5.6),
            fg.Figure(f"{prefix}latency_cdf.png", cdfs, 1, 2, f"Latency CDFs at {rate:g} req/s: {title}",
                      width=5.6)]


# -- the real backend (--backend) --------------------------------------------------------

def backend_workload(n: int, rate: float):
    return build_workload(WorkloadConfig(source="chat", num_requests=n, rate=rate, prompt=BACKEND_PROMPT,
                                         output=BACKEND_OUTPUT, seed=SEED))


class BackendRunner:
    """Serves one (policy, rate) point on the backend, logs it, keeps its latency samples."""

    def __init__(self, n: int, log: RowLog, progress: Progress) -> None:
        from batchlab.experiments.studies import common_backend  # needs torch
        self.backend = common_backend
        self.n, self.log, self.progress = n, log, progress
        # Every seat's longest request fits: latency here is queueing and steps, no preemption.
        self.kv_blocks = BACKEND_SEATS * blocks_for(BACKEND_PROMPT.max + BACKEND_OUTPUT.components[-1].high,
                                                    BACKEND_BLOCK)
        self.samples: dict[tuple[str, float], dict[str, np.ndarray]] = {}
        self.reference = common_backend.speed_reference(BACKEND_SEATS)
        self.slo = cpu_slo(self.reference)
        self.reruns = 0

    def __call__(self, policy: str, rate: float, search: bool = False) -> dict:
        cfg = SchedulerConfig(policy=policy, max_num_seqs=BACKEND_SEATS, block_size=BACKEND_BLOCK,
                              num_kv_blocks=self.kv_blocks)
        def attempt() -> tuple:  # both attempts stay in the CSV; the last one counts
            res = self.backend.serve(backend_workload(self.n, rate), cfg)
            s = res.summary(self.slo)
            slow = self.backend.slowdown(res.steps, self.reference)
            row = self.log.add({"policy": policy, "rate": rate, **{k: s[k] for k in BACKEND_COLUMNS if k in s},
                                "meets_slo": meets(s, self.n, self.slo), "search": search,
                                "decode_step_ms": self.backend.decode_step_ms(res.steps), "slowdown": slow,
                                "busy": slow > BUSY, "run_s": res.meta.wall_s})
            return res, s, row

        def busy(slow: float) -> None:
            self.progress(f"backend {policy} {rate:g} req/s: steps x{slow:.2f} slower than the "
                          f"reference, the machine was busy: running the point again")

        (res, s, row), rerun = self.backend.unless_busy(attempt, lambda a: a[2]["slowdown"], busy)
        self.reruns += rerun
        if not search:
            lat = per_request_latencies(res.requests)
            self.samples[(policy, rate)] = {"ttft": lat["ttft"], "tpot": lat["tpot"]}
        self.progress(f"backend {policy:10s} {rate:5.1f} req/s: TTFT p99 {s['p99_ttft_ms']:6.0f} ms, "
                      f"TPOT p99 {s['p99_tpot_ms']:5.1f} ms -> "
                      f"{'meets' if row['meets_slo'] else 'misses'} SLO ({row['run_s']:.1f} s)"
                      + (" (search)" if search else ""))
        return row


def _serve(out_dir: Path, size: str, progress: Progress) -> tuple[dict, list[fg.Figure]]:
    """The rates served by batchlab-tiny on the CPU. Needs torch and transformers."""
    p = pick(BACKEND_PARAMS, size)
    sweep: dict[str, list[dict]] = {}
    limits: dict[str, dict] = {}
    with RowLog(out_dir / "backend_sweep.csv", BACKEND_COLUMNS) as log:
        runner = BackendRunner(p["requests"], log, progress)
        for policy in POLICIES:
            sweep[policy] = [runner(policy, r) for r in p["rates"]]
            lo, hi = bracket(sweep[policy])
            limits[policy] = _search(runner, policy, lo, hi, p["search_evals"], log)
    model = runner.backend.MODEL
    figures = _figures(sweep, limits, runner.samples, runner.slo,
                       f"{model} on the CPU backend, {BACKEND_SEATS} seats, reduced chat mix", prefix="backend_")
    w = backend_workload(p["requests"], 1.0)
    return {"size": size, "model": model, "machine": runner.backend.machine(), "seats": BACKEND_SEATS,
            "requests": p["requests"], "workload": w.describe().replace("1 req/s", "R req/s"),
            "slo": runner.slo.model_dump(exclude_none=True), "longest_reply": int(w.output_len.max()),
            "reference_ms": {k: v * 1000 for k, v in runner.reference.items()},
            "reruns": runner.reruns, "busy_points": [(x["policy"], x["rate"]) for rows in
                                                     sweep.values() for x in rows if x["busy"]],
            "search_evals": p["search_evals"], "max_rate": limits, "sweep": sweep,
            "files": ["backend_sweep.csv", *fg.filenames(figures)]}, figures


def _search(runner: BackendRunner, policy: str, lo: float, hi: float | None, evals: int,
            log: RowLog) -> dict:
    """Bisect inside the sweep's [last passing, first failing] bracket, `evals` runs at
    most. No search below the lowest rate (a miss there is a miss at any useful rate: see
    the report) or above the highest (the sweep is chosen to cross capacity)."""
    found = None
    if hi is not None and lo > 0 and evals > 0:
        found = max_rate(lambda r: runner(policy, r, search=True)["meets_slo"], lo=lo, hi=hi,
                         abs_tol=0.0, rel_tol=0.0, max_evals=evals)
        lo, hi = found.rate, found.failing
    failing = [r for r in log.rows if r["policy"] == policy and r["rate"] == hi]
    return {"max_rate": lo, "failing_rate": hi, "evaluations": len(found.evaluations) if found else 0,
            "binding": binding(failing[-1], runner.slo) if failing else ""}


# -- the report --------------------------------------------------------------------------

def rate_text(v: dict) -> str:
    if v["max_rate"] > 0:
        return f"{v['max_rate']:.2f} req/s"
    return f"< {v['failing_rate']:.2f} req/s"  # even the lowest rate tried misses the SLO


def backend_rate_text(v: dict) -> str:
    if v["failing_rate"] is None:
        return f">= {v['max_rate']:g} req/s (all rates tried)"
    if v["max_rate"] > 0:
        return f"{v['max_rate']:g} req/s"
    return f"< {v['failing_rate']:g} req/s"


def _sweep_columns(backend: bool) -> tuple:
    cols = [("policy", "policy", None), ("rate", "rate", "{:g}"), ("TTFT p50 (ms)", "median_ttft_ms", "{:,.0f}"),
            ("TTFT p99 (ms)", "p99_ttft_ms", "{:,.0f}"), ("TPOT p50 (ms)", "median_tpot_ms", "{:.1f}"),
            ("TPOT p99 (ms)", "p99_tpot_ms", "{:.1f}"), ("req/s", "request_throughput", "{:.2f}"),
            ("goodput", "request_goodput", "{:.2f}"), ("slot util.", "slot_utilization", "{:.0%}")]
    if backend:
        cols += [("decode step (ms)", "decode_step_ms", "{:.1f}"),
                 ("slowdown", lambda x: fmt(x["slowdown"], "x{:.2f}") + (" (busy)" if x["busy"] else ""), None)]
    cols.append(("SLO", lambda x: "yes" if x["meets_slo"] else "no", None))
    if backend:
        cols.append(("run (s)", "run_s", "{:.1f}"))
    return tuple(cols)


def _limits_table(lim: dict, text, failing_spec: str, runs: str) -> str:
    return table_of(({"policy": p, **v} for p, v in lim.items()), (
        ("policy", "policy", None), ("max rate", text, None), ("fails at (req/s)", "failing_rate", failing_spec),
        (runs, "evaluations", None), ("what fails first", "binding", None)))


def _limits(lim: dict, text, failing_spec: str) -> tuple[str, str]:
    """'static **x req/s**, ...' and 'static: TTFT p99 ... at y req/s; ...'."""
    return (", ".join(f"{p} **{text(v)}**" for p, v in lim.items()),
            "; ".join(f"{p}: {v['binding']} at {format(v['failing_rate'], failing_spec)} req/s"
                      for p, v in lim.items() if v["failing_rate"] is not None))


def report(r: dict) -> str:
    """report.md from the study's result (live, or read back from study.json)."""
    tpl, sweep, b = template(NAME), r["sweep"], r.get("backend")
    limits, breaks = _limits(r["max_rate"], rate_text, ".2f")
    st0 = sweep["static"][0]
    return tpl("report", command=command_line(NAME, r["size"], bool(b)), r=r, slo=r["slo"],
               limits=limits, breaks=breaks, st0=st0, static_ttft_s=st0["p99_ttft_ms"] / 1000,
               worst_tpot=max(x["p99_tpot_ms"] for rows in sweep.values() for x in rows),
               limits_table=_limits_table(r["max_rate"], rate_text, "{:.2f}", "simulations"),
               sweep_table=table_of((x for rows in sweep.values() for x in rows), _sweep_columns(False)),
               cdf_rate=cdf_rate(sweep), backend=_backend_report(b, r) if b else tpl("backend-not-run")) + "\n"


def _backend_report(b: dict, study: dict) -> str:
    tpl, lim, sweep, sim = template(NAME), b["max_rate"], b["sweep"], study["max_rate"]
    limits, breaks = _limits(lim, backend_rate_text, "g")
    st0, co0 = sweep["static"][0], sweep["continuous"][0]
    rates = [x["rate"] for x in sweep["continuous"]]
    step = min(y - x for x, y in zip(rates, rates[1:])) if len(rates) > 1 else 0
    co, ch = lim["continuous"]["max_rate"], lim["chunked"]["max_rate"]
    co_text, ch_text = backend_rate_text(lim["continuous"]), backend_rate_text(lim["chunked"])
    versus = (tpl("close", co=co_text, ch=ch_text) if abs(co - ch) <= step else
              tpl("apart", leader="Chunked" if ch > co else "Continuous", co=co_text, ch=ch_text))
    longest = b["longest_reply"]
    wait = tpl("wait", longest=longest, wait_s=longest * st0["decode_step_ms"] / 1000)
    if not st0["meets_slo"]:
        static = tpl("static-misses", st0=st0, co0=co0, wait=wait)
    else:  # the small size's few requests may hold no long reply
        why = (" " + tpl("no-long-reply", requests=b["requests"])
               if longest < BACKEND_OUTPUT.components[-1].low else "")
        static = tpl("static-meets", st0=st0, co0=co0, wait=wait, why=why)
    step_ms = float(np.median([x["decode_step_ms"] for rows in sweep.values() for x in rows]))
    ref = b["reference_ms"]
    return tpl("backend", command=command_line(NAME, b["size"], True), b=b, slo=b["slo"], step_ms=step_ms,
               base=SLO_CPU.model_dump(exclude_none=True), ref_step_ms=REF_STEP_S * 1000,
               step_share=b["slo"]["tpot_ms"] / step_ms, limits=limits, breaks=breaks,
               search=tpl("search", b=b) if b["search_evals"] else tpl("no-search"),
               worst_tpot=max(x["p99_tpot_ms"] for rows in sweep.values() for x in rows),
               sim_static=rate_text(sim["static"]), sim_continuous=rate_text(sim["continuous"]),
               sim_chunked=rate_text(sim["chunked"]), static=static, versus=versus,
               sim_lead=sim["chunked"]["max_rate"] / max(sim["continuous"]["max_rate"], 1e-9) - 1,
               top_co=sweep["continuous"][-1], top_ch=sweep["chunked"][-1],
               ref_min=min(ref.values()), ref_max=max(ref.values()), busy_factor=BUSY,
               busy=" " + tpl("busy", n=len(b["busy_points"])) if b["busy_points"] else "",
               limits_table=_limits_table(lim, backend_rate_text, "{:g}", "search runs"),
               sweep_table=table_of((x for rows in sweep.values() for x in rows), _sweep_columns(True)),
               cdf_rate=cdf_rate(sweep))


@register_study(NAME, "claim 4: TTFT/TPOT p50 and p99 vs request rate for static, continuous and "
                "chunked; max rate under TTFT p99 < 2 s and TPOT p99 < 100 ms (bisection); "
                "--backend sweeps rates on the CPU torch backend",
                PARAMS, _serve, report)
def run(study: StudyRun, p: dict) -> tuple[dict, list[fg.Figure]]:
    sweep: dict[str, list[dict]] = {}
    limits: dict[str, dict] = {}
    with RowLog(study.out_dir / "sweep.csv", COLUMNS) as log:
        runner = Runner(p["requests"], log, study.progress)
        for policy in POLICIES:
            sweep[policy] = [runner(policy, r) for r in p["rates"]]
            lo, hi = bracket(sweep[policy])
            found = max_rate(lambda r, pol=policy: runner(pol, r, search=True)["meets_slo"],
                             lo=lo, hi=hi, start=max(p["rates"]))
            failing = [r for r in log.rows if r["policy"] == policy and r["rate"] == found.failing]
            limits[policy] = {"max_rate": found.rate, "failing_rate": found.failing,
                              "evaluations": len(found.evaluations),
                              "binding": binding(failing[-1]) if failing else ""}
            study.progress(f"{policy}: sustains {found.rate:.2f} req/s under the SLO "
                           f"(fails at {found.failing:.2f}, {len(found.evaluations)} searches)")
    figures = _figures(sweep, limits, runner.samples)
    return {"setup": setup_line(runner.meta),
            "workload": runner.workload(1.0).describe().replace("1 req/s", "R req/s"),
            "seats": SEATS, "slo": SLO_SPEC.model_dump(exclude_none=True),
            "tolerance": {"abs_req_s": ABS_TOL, "rel": REL_TOL}, "max_rate": limits,
            "sweep": sweep, "elapsed_s": 0.0, "files": ["sweep.csv", *fg.filenames(figures)]}, figures
