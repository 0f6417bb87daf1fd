"""Prefill/decode disaggregation: where it raises goodput per GPU and where it does not
(DistServe, OSDI'24; Splitwise, ISCA'24). Their direction: under tight TTFT and TPOT
objectives with long prompts, separating prefill from decode raises the goodput each GPU
carries (no prefill chunk stalls a decode step; each pool is sized to its own phase);
with short prompts and loose TTFT it does not (aggregated replicas pack both phases on
every GPU, while a pool of its own idles).

Plan: three regimes (long prompts with tight TTFT and TPOT; the same prompts with loose
objectives; short prompts with longer replies and loose TTFT, chat-like), each served by
two aggregated replicas and by disaggregated pools of 1:1, 2:1, 3:1 and 1:2
prefill:decode replicas, KV over InfiniBand NDR. For each, the highest rate at which 90% of requests meet both objectives (DistServe's
attainment) with a stable queue, by bisection, divided by the GPUs: goodput per GPU.
Simulated: llama-3-8b on H100s (GPU form), chunked prefill, vLLM's defaults."""
from __future__ import annotations

from pathlib import Path

from batchlab.core.stability import queue_stability
from batchlab.core.summary import SLO
from batchlab.core.workload import build_workload
from batchlab.experiments import figures as fg
from batchlab.experiments.config import ExperimentConfig, build_config
from batchlab.experiments.disaggregation.setup import pd_setup
from batchlab.experiments.markdown import fmt, table_of
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.studies.common import RowLog, command_line
from batchlab.experiments.studies.output import StudyRun
from batchlab.experiments.studies.registry import register
from batchlab.experiments.studies.slo_search import max_rate
from batchlab.experiments.studies.templates import template
from batchlab.sim import simulate
from batchlab.sim.disaggregated import simulate_disaggregated
from batchlab.sim.disaggregated.summary import disaggregated_summary, stability

NAME = "disaggregation"
MODEL, HARDWARE, POLICY, LINK, SEED = "llama-3-8b", "h100-sxm", "chunked", "ib-ndr", 0
ATTAINMENT = 0.9  # DistServe's goodput: the rate at which 90% of requests meet both SLOs
LONG = dict(dist="uniform", low=3000, high=6000)  # summarisation-like prompts
SHORT = dict(dist="uniform", low=50, high=200)  # chat-like: short prompts, longer replies
LONG_REPLY = dict(dist="uniform", low=300, high=600)
REPLY = dict(dist="uniform", low=100, high=300)
REGIMES = {  # name: (prompt lengths, reply lengths, TTFT ms, TPOT ms)
    "long prompts, tight SLOs": (LONG, REPLY, 400.0, 20.0),
    "long prompts, loose SLOs": (LONG, REPLY, 5000.0, 200.0),
    "short prompts, loose TTFT": (SHORT, LONG_REPLY, 5000.0, 200.0),
}
DEPLOYMENTS = {  # name: (aggregated replicas, or (prefill, decode) replicas)
    "aggregated x2": 2, "1P:1D": (1, 1), "2P:1D": (2, 1), "3P:1D": (3, 1), "1P:2D": (1, 2),
}
# Each point serves `seconds` of arrivals (at least `n` requests): many times the loosest
# TTFT objective, so that a burst served within it is not mistaken for a sustained rate.
PARAMS = {"full": dict(n=400, seconds=120.0), "small": dict(n=200, seconds=40.0)}
COLUMNS = ("regime", "deployment", "gpus", "max_rate", "goodput_per_gpu", "evaluations",
           "p99_ttft_ms", "p99_tpot_ms", "slo_attainment", "prefill_busy_fraction", "decode_busy_fraction")


def requests(rate: float, p: dict) -> int:
    return max(p["n"], int(rate * p["seconds"]))


def config(lengths: tuple[dict, dict], rate: float, n: int, pools: tuple[int, int] | None) -> ExperimentConfig:
    data: dict = {"workload": {"source": "uniform", "num_requests": n, "rate": rate, "seed": SEED,
                               "prompt": lengths[0], "output": lengths[1]},
                  "model": {"name": MODEL}, "hardware": {"name": HARDWARE}, "scheduler": {"policy": POLICY},
                  "run": {"router": "least_loaded"}}
    if pools is not None:
        data["deployment"] = {"prefill_replicas": pools[0], "decode_replicas": pools[1], "link": LINK}
    return build_config(data)


def point(lengths: tuple[dict, dict], slo: SLO, rate: float, n: int, deployment: int | tuple[int, int]) -> dict:
    """One rate's summary under `deployment` (and whether it passes: 90% attainment, stable)."""
    if isinstance(deployment, int):
        cfg = config(lengths, rate, n, None)
        setup = sim_setup(cfg)
        res = simulate(build_workload(cfg.workload), setup.schedulers[POLICY], setup.cost, setup.blocks,
                       replicas=deployment, router="least_loaded", record_steps=False)
        s = res.summary(slo)
        return {**s, "passes": s["slo_attainment"] >= ATTAINMENT
                and queue_stability(res.requests).verdict == "stable"}
    cfg = config(lengths, rate, n, deployment)
    run = simulate_disaggregated(build_workload(cfg.workload), pd_setup(cfg).deployment(POLICY))
    s = disaggregated_summary(run, slo)
    # Either pool's queue growing is an overload (the decode pool's shows only in TPOT).
    return {**s, "passes": s["slo_attainment"] >= ATTAINMENT and stability(run) == "stable"}


def gpus(deployment: int | tuple[int, int]) -> int:
    return deployment if isinstance(deployment, int) else sum(deployment)


def _figures(rows: dict) -> list[fg.Figure]:
    """Each disaggregated shape's goodput per GPU over the aggregated replicas' (1: a tie),
    so that every regime reads on one scale."""
    regimes, shapes = list(REGIMES), [d for d in DEPLOYMENTS if d != "aggregated x2"]

    def relative(regime: str, d: str) -> float:
        agg = rows[f"{regime} | aggregated x2"]["goodput_per_gpu"]
        return rows[f"{regime} | {d}"]["goodput_per_gpu"] / agg if agg > 0 else float("nan")
    bars = fg.GroupedBars(regimes, {d: [relative(r, d) for r in regimes] for d in shapes},
                          "goodput per GPU over aggregated replicas' (90% within both SLOs)", "x aggregated",
                          "{:.2f}")
    return [fg.Figure("disaggregation.png", [fg.Panel([bars, fg.MarkY(1.0, "aggregated x2")])], 1, 1,
                      f"Disaggregated pools against aggregated replicas: {MODEL} on {HARDWARE}, KV over {LINK}",
                      width=9.0, height=4.6)]


def report(r: dict) -> str:
    tpl = template(NAME)
    rows = table_of(r["rows"].values(), (
        ("regime", "regime", None), ("deployment", "deployment", None), ("GPUs", "gpus", "{:.0f}"),
        ("max rate (req/s)", "max_rate", "{:.2f}"), ("goodput/GPU", "goodput_per_gpu", "{:.2f}"),
        ("TTFT p99 ms", "p99_ttft_ms", "{:.0f}"), ("TPOT p99 ms", "p99_tpot_ms", "{:.1f}"),
        ("prefill stepping", "prefill_busy_fraction", "{:.0%}"),
        ("decode stepping", "decode_busy_fraction", "{:.0%}")))
    verdicts = "\n".join(f"- **{name}**: {v['sentence']}" for name, v in r["verdicts"].items())
    regimes = "; ".join(f"**{k}**: prompts {v['prompt']}, replies {v['reply']} tokens, TTFT <= {v['ttft_ms']:g} ms, "
                        f"TPOT <= {v['tpot_ms']:g} ms" for k, v in r["regimes"].items())
    return tpl("report", command=command_line(NAME, r["size"]), r=r, rows=rows, verdicts=verdicts, regimes=regimes,
               tight=r["verdicts"]["long prompts, tight SLOs"], short=r["verdicts"]["short prompts, loose TTFT"],
               gain=fmt(r["verdicts"]["long prompts, tight SLOs"]["gain"], "{:+.0%}"),
               loss=fmt(r["verdicts"]["short prompts, loose TTFT"]["gain"], "{:+.0%}")) + "\n"


def verdict(rows: dict, regime: str) -> dict:
    agg = rows[f"{regime} | aggregated x2"]["goodput_per_gpu"]
    pd = {d: rows[f"{regime} | {d}"]["goodput_per_gpu"] for d in DEPLOYMENTS if d != "aggregated x2"}
    best = max(pd, key=pd.get)
    gain = pd[best] / agg - 1 if agg > 0 else float("nan")
    winner = "disaggregated" if pd[best] > agg else "aggregated"
    return {"aggregated": agg, "best_pd": best, "best_pd_per_gpu": pd[best], "gain": gain, "winner": winner,
            "sentence": f"{winner} wins: best disaggregated ({best}) {pd[best]:.2f} req/s per GPU against "
                        f"aggregated {agg:.2f} ({gain:+.0%})"}


@register(NAME, "prefill/decode disaggregation against aggregated replicas (DistServe, Splitwise): "
                "goodput per GPU under tight and loose SLOs, long and short prompts", report=report)
def run(out_dir: Path, size: str = "full", backend: bool = False, quiet: bool = False) -> dict:
    study = StudyRun(NAME, out_dir, size, backend, quiet)
    p = PARAMS[size]
    rows: dict[str, dict] = {}
    with RowLog(study.out_dir / "results.csv", COLUMNS) as log:
        for regime, (prompt, reply, ttft, tpot) in REGIMES.items():
            slo, lengths = SLO(ttft_ms=ttft, tpot_ms=tpot), (prompt, reply)
            for name, dep in DEPLOYMENTS.items():
                found = max_rate(lambda rate: point(lengths, slo, rate, requests(rate, p), dep)["passes"],
                                 start=2.0, rel_tol=0.03)
                s = point(lengths, slo, found.rate, requests(found.rate, p), dep) if found.rate > 0 else {}
                rows[f"{regime} | {name}"] = log.add({
                    "regime": regime, "deployment": name, "gpus": gpus(dep), "max_rate": found.rate,
                    "goodput_per_gpu": found.rate / gpus(dep), "evaluations": len(found.evaluations),
                    **{k: s.get(k) for k in COLUMNS[6:]}})
                study.progress(f"{regime}, {name}: {found.rate:.2f} req/s ({found.rate / gpus(dep):.2f} per GPU)")
    figures = _figures(rows)
    result = {"name": NAME, "size": size, "model": MODEL, "hardware": HARDWARE, "policy": POLICY, "link": LINK,
              "attainment": ATTAINMENT, "requests": p["n"], "seconds": p["seconds"],
              "regimes": {k: {"prompt": f"uniform {a['low']}-{a['high']}", "reply": f"uniform {b['low']}-{b['high']}",
                              "ttft_ms": t, "tpot_ms": o} for k, (a, b, t, o) in REGIMES.items()},
              "rows": rows, "verdicts": {k: verdict(rows, k) for k in REGIMES},
              "files": ["results.csv", *fg.filenames(figures)]}
    return study.finish(result, figures, report)
