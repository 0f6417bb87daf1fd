"""KV tiers: swap against recompute across KV pressure (who wins where, and why), and
whether a CPU tier lets multi-turn chat with longer conversations be served on fewer GPUs.

Plan. Llama-3-8B on one L4 (24 GB: its weights leave ~43k tokens of KV; a PCIe Gen4 x16
host link), chunked prefill, the roofline. (a) A chat workload at a fixed rate on KV pools
from a tight to an ample one; each preemption recomputed, swapped over 25 GB/s (PCIe Gen4
x16), 2 GB/s and 0.5 GB/s (a slow shared link), and `cheapest` over 0.5 GB/s. (b)
Multi-turn chat at a fixed conversation rate, users thinking 30 s between turns, 2 to 12
turns a conversation: the fewest replicas (prefix-aware routing) that meet the SLO, with
no tier and with a 64 GiB CPU tier per GPU keeping evicted prefix blocks. --backend: the
tiny model on the CPU torch backend, recompute against swapping to host memory (real
copies): the same tokens, and the bytes copied."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv_tiers import TierConfig
from batchlab.core.summary import SLO
from batchlab.core.workload import LengthSpec, Workload, WorkloadConfig, build_workload
from batchlab.experiments import figures as fg
from batchlab.experiments.markdown import table_of
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.output import StudyRun, register_study
from batchlab.experiments.studies.slo_search import fewest
from batchlab.experiments.studies.templates import template
from batchlab.sim import simulate

NAME = "kv-tiers"
MODEL, HARDWARE, POLICY, SEED = "llama-3-8b", "l4", "chunked", 0
SLO_SPEC = SLO(ttft_ms=2000, tpot_ms=150)
TIER_GIB = 64.0
# Preemption modes of (a): a name -> the tier (None: recompute, no tier).
MODES = {"recompute": None,
         "swap, 25 GB/s": TierConfig(capacity_gib=TIER_GIB, preemption="swap", bandwidth_gbs=25.0, prefix=False),
         "swap, 2 GB/s": TierConfig(capacity_gib=TIER_GIB, preemption="swap", bandwidth_gbs=2.0, prefix=False),
         "swap, 0.5 GB/s": TierConfig(capacity_gib=TIER_GIB, preemption="swap", bandwidth_gbs=0.5, prefix=False),
         "cheapest, 0.5 GB/s": TierConfig(capacity_gib=TIER_GIB, preemption="cheapest", bandwidth_gbs=0.5,
                                          prefix=False)}
CPU_TIER = TierConfig(capacity_gib=TIER_GIB, preemption="cheapest")
PARAMS = {
    "full": dict(chat_n=1000, chat_rate=3.0, pools=[300, 450, 600, 800, 1000, 1300, 1600],
                 conv_n=2000, conv_rate=0.5, turns=[2, 4, 8, 12], most=16,
                 long_n=1200, long_turns=[4, 8], long_replicas=6),
    "small": dict(chat_n=400, chat_rate=3.0, pools=[300, 600, 1000, 1600],
                  conv_n=800, conv_rate=0.5, turns=[2, 8], most=12,
                  long_n=500, long_turns=[8], long_replicas=4),
}
# (c): where KV binds: Qwen3-8B (40k context) on the same L4s, long messages, a minute's thought.
LONG_MODEL = "qwen3-8b"
LONG_COLUMNS = ("turns", "tier", "replicas", "slo_attainment", "p99_ttft_ms", "mean_ttft_ms", "p99_tpot_ms",
                "prefix_cache_hit_rate", "kv_tier_prefix_hit_rate", "kv_tier_bytes_in")
PRESSURE_COLUMNS = ("blocks", "mode", "output_throughput", "mean_ttft_ms", "p99_e2el_ms", "mean_tpot_ms",
                    "preemptions", "kv_tier_swaps", "kv_tier_recomputes", "recomputed_tokens", "kv_tier_bytes_out")
REPLICA_COLUMNS = ("turns", "tier", "replicas", "meets_slo", "p99_ttft_ms", "p99_tpot_ms", "slo_attainment",
                   "prefix_cache_hit_rate", "kv_tier_prefix_hit_rate", "preemptions")
BACKEND = dict(prompts=[5, 37, 12, 64, 1, 23, 50, 9], outputs=[20, 7, 33, 12, 15, 1, 25, 30], blocks=22)


def chat(n: int, rate: float):
    return build_workload(WorkloadConfig(source="chat", num_requests=n, rate=rate, seed=SEED))


def conversations(n: int, rate: float, turns: int):
    """Multi-turn chat: `rate` conversations/s of `turns` turns on average, 30 s between
    turns, a 256-token system prompt, messages and replies of 100 to 300 tokens."""
    return build_workload(WorkloadConfig(
        source="multiturn", num_requests=n, rate=rate, turns=turns, turn_gap_s=30.0, system_prompt_len=256,
        prompt=LengthSpec(dist="uniform", low=100, high=300), output=LengthSpec(dist="uniform", low=100, high=300),
        seed=SEED))


def long_conversations(n: int, turns: int):
    """Multi-turn chat whose history outgrows the GPUs: 0.25 conversations/s, 60 s between
    turns, messages of 400 to 800 tokens, replies of 100 to 300."""
    return build_workload(WorkloadConfig(
        source="multiturn", num_requests=n, rate=0.25, turns=turns, turn_gap_s=60.0, system_prompt_len=256,
        prompt=LengthSpec(dist="uniform", low=400, high=800), output=LengthSpec(dist="uniform", low=100, high=300),
        seed=SEED))


def kv_bound(study: StudyRun, p: dict) -> dict:
    """(c): a fixed number of replicas, with and without the tier, where KV binds."""
    cost, blocks, meta, spec = preset(LONG_MODEL, HARDWARE)
    rows = {}
    with RowLog(study.out_dir / "long.csv", LONG_COLUMNS) as log:
        for turns in p["long_turns"]:
            w = long_conversations(p["long_n"], turns)
            for label, tier in (("none", None), ("cpu", CPU_TIER)):
                res = simulate(w, SchedulerConfig(policy=POLICY, max_model_len=spec.max_context), cost, blocks,
                               replicas=p["long_replicas"], router="prefix_aware", record_steps=False,
                               kv_tier=tier, kv_bytes_per_token=float(spec.kv_bytes_per_token))
                s = res.summary(SLO_SPEC)
                rows[f"{turns}, {label}"] = log.add({"turns": turns, "tier": label, "replicas": p["long_replicas"],
                                                     **{k: s.get(k, 0.0) for k in LONG_COLUMNS[3:]}})
                study.progress(f"long messages, {turns} turns, tier {label}: SLO met by "
                               f"{s['slo_attainment']:.1%}, TTFT p99 {s['p99_ttft_ms']:.0f} ms")
    return {"setup": setup_line(meta), "workload": long_conversations(p["long_n"], p["long_turns"][-1]).describe(),
            "rows": rows}


def pressure(study: StudyRun, p: dict, cost, bpt: float) -> dict:
    """(a): every pool size under every preemption mode."""
    w, out = chat(p["chat_n"], p["chat_rate"]), {}
    with RowLog(study.out_dir / "pressure.csv", PRESSURE_COLUMNS) as log:
        for blocks in p["pools"]:
            for mode, tier in MODES.items():
                res = simulate(w, SchedulerConfig(policy=POLICY), cost, blocks, kv_tier=tier, kv_bytes_per_token=bpt)
                s = res.summary()
                row = {"blocks": blocks, "mode": mode, **{k: s.get(k, 0) for k in PRESSURE_COLUMNS[2:-2]},
                       "recomputed_tokens": int(res.steps["prefill_tokens"].sum()) - s["total_input_tokens"],
                       "kv_tier_bytes_out": s.get("kv_tier_bytes_out", 0)}
                out[f"{blocks}, {mode}"] = log.add(row)
            study.progress(f"pool {blocks} blocks: TTFT mean " + ", ".join(
                f"{m} {out[f'{blocks}, {m}']['mean_ttft_ms']:.0f} ms" for m in MODES))
    return {"workload": w.describe(), "rows": out}


def replicas(study: StudyRun, p: dict, cost, blocks: int, bpt: float) -> dict:
    """(b): the fewest replicas meeting the SLO for each conversation length, without and
    with the CPU tier."""
    found, rows = {}, {}
    with RowLog(study.out_dir / "replicas.csv", REPLICA_COLUMNS) as log:
        for turns in p["turns"]:
            w = conversations(p["conv_n"], p["conv_rate"], turns)
            for label, tier in (("none", None), ("cpu", CPU_TIER)):
                def passes(n: int) -> bool:
                    res = simulate(w, SchedulerConfig(policy=POLICY), cost, blocks, replicas=n, router="prefix_aware",
                                   record_steps=False, kv_tier=tier, kv_bytes_per_token=bpt)
                    s = res.summary(SLO_SPEC)
                    ok = (s["completed"] == len(w) and s["p99_ttft_ms"] <= SLO_SPEC.ttft_ms
                          and s["p99_tpot_ms"] <= SLO_SPEC.tpot_ms)
                    rows[f"{turns}, {label}, {n}"] = log.add({
                        "turns": turns, "tier": label, "replicas": n, "meets_slo": ok,
                        **{k: s.get(k, 0.0) for k in REPLICA_COLUMNS[4:]}})
                    return ok
                result = fewest(passes, p["most"])
                found[f"{turns}, {label}"] = result.count
                best = rows.get(f"{turns}, {label}, {result.count}") if result.count else None
                study.progress(f"{turns} turns, tier {label}: {result.count or 'more than ' + str(p['most'])} replicas"
                               + (f" (tier hit rate {best['kv_tier_prefix_hit_rate']:.1%})" if best and tier else ""))
    return {"found": found, "rows": rows, "turns": p["turns"], "most": p["most"]}


def _figures(a: dict, b: dict, pools: list[int]) -> list[fg.Figure]:
    rows = a["rows"]
    panels = [fg.Panel([fg.Line(pools, [rows[f"{n}, {m}"][key] for n in pools], m, fg.cycle_color(i), "o")
                        for i, m in enumerate(MODES)], title, xlabel="KV pool (blocks of 16 tokens)", ylabel=unit,
                       yscale=scale, legend=fg.Legend() if key == "mean_ttft_ms" else None)
              for key, title, unit, scale in (("mean_ttft_ms", "mean TTFT", "ms", "log"),
                                              ("output_throughput", "output throughput", "tokens/s", None))]
    turns = b["turns"]
    most = b["most"]
    lines = [fg.Line(turns, [b["found"][f"{t}, {label}"] or most + 1 for t in turns], name, fg.cycle_color(i), "o")
             for i, (label, name) in enumerate((("none", "no tier"), ("cpu", f"{TIER_GIB:g} GiB CPU tier")))]
    panels.append(fg.Panel(lines, "fewest replicas meeting the SLO", xlabel="turns per conversation",
                           ylabel=f"L4 GPUs ({most + 1}: more than {most})", legend=fg.Legend()))
    return [fg.Figure("kv_tiers.png", panels, 1, 3, f"KV tiers: {MODEL} on {HARDWARE}, {POLICY}",
                      width=4.6, height=4.0)]


def _serve(out_dir: Path, size: str, progress: Progress) -> tuple[dict, list[fg.Figure]]:
    """The tiny model on the CPU: recompute against swapping to host memory, for real.
    Needs torch and transformers."""
    from batchlab.backend.driver import run_workload  # lazy: torch (the --backend half)
    from batchlab.experiments.studies.common_backend import machine, runtime  # lazy: torch
    p, rt = BACKEND, runtime()
    w = Workload(np.zeros(len(p["prompts"])), p["prompts"], p["outputs"])
    cfg = SchedulerConfig(policy=POLICY, block_size=4, num_kv_blocks=p["blocks"], max_num_batched_tokens=32)
    rows, outputs = {}, {}
    for label, tier in (("recompute", None), ("swap", TierConfig(capacity_gib=1, preemption="swap", prefix=False))):
        outputs[label] = {}
        res = run_workload(rt, w, cfg, time_scale=0.0, progress=False, outputs=outputs[label], kv_tier=tier)
        s = res.summary()
        rows[label] = {"preemptions": s["preemptions"], "wall_s": res.meta.wall_s,
                       "prefill_tokens": int(res.steps["prefill_tokens"].sum()),
                       "bytes_copied": getattr(res.meta, "kv_tier_bytes_copied", 0) or 0}
        progress(f"backend, {label}: {s['preemptions']} preemptions")
    return {"machine": machine(rt), "rows": rows, "same_tokens": outputs["recompute"] == outputs["swap"],
            "files": []}, []


def _ratios(rows: dict) -> dict[str, float]:
    """Each mode's mean TTFT over recompute's, the median over the pools where recompute
    preempted (1.0 where none did)."""
    pools = sorted({row["blocks"] for row in rows.values()
                    if row["mode"] == "recompute" and row["preemptions"] > 0})
    out = {}
    for mode in MODES:
        ratios = [rows[f"{n}, {mode}"]["mean_ttft_ms"] / rows[f"{n}, recompute"]["mean_ttft_ms"] for n in pools]
        out[mode] = float(np.median(ratios)) if ratios else 1.0
    out["pools"] = len(pools)
    return out


def report(r: dict) -> str:
    tpl, b = template(NAME), r.get("backend")
    a_rows = r["pressure"]["rows"]
    pressure_table = table_of(a_rows.values(), (
        ("pool blocks", "blocks", None), ("preemption", "mode", None), ("TTFT mean ms", "mean_ttft_ms", "{:.0f}"),
        ("E2E p99 ms", "p99_e2el_ms", "{:.0f}"), ("output tok/s", "output_throughput", "{:.0f}"),
        ("preemptions", "preemptions", None), ("swapped", "kv_tier_swaps", None),
        ("tokens recomputed", "recomputed_tokens", None)))
    rep = r["replicas"]
    replica_table = table_of(({"turns": t, "none": rep["found"][f"{t}, none"] or f"> {rep['most']}",
                               "cpu": rep["found"][f"{t}, cpu"] or f"> {rep['most']}"} for t in rep["turns"]), (
        ("turns per conversation", "turns", None), ("replicas, no tier", "none", None),
        ("replicas, CPU tier", "cpu", None)))
    backend = tpl("backend", b=b, same="the same tokens" if b["same_tokens"] else "DIFFERENT tokens",
                  table=table_of(({"mode": k, **v} for k, v in b["rows"].items()), (
                      ("preemption", "mode", None), ("preemptions", "preemptions", None),
                      ("prefill tokens", "prefill_tokens", None), ("bytes copied", "bytes_copied", None),
                      ("wall s", "wall_s", "{:.2f}")))) if b else ""
    long_table = table_of(r["long"]["rows"].values(), (
        ("turns", "turns", None), ("tier", "tier", None), ("replicas", "replicas", None),
        ("SLO met", "slo_attainment", "{:.1%}"), ("TTFT p99 ms", "p99_ttft_ms", "{:.0f}"),
        ("TTFT mean ms", "mean_ttft_ms", "{:.0f}"), ("TPOT p99 ms", "p99_tpot_ms", "{:.0f}"),
        ("GPU hit rate", "prefix_cache_hit_rate", "{:.1%}"), ("tier hit rate", "kv_tier_prefix_hit_rate", "{:.1%}")))
    found = [(t, rep["found"][f"{t}, none"], rep["found"][f"{t}, cpu"]) for t in rep["turns"]]
    fewer = [t for t, none, cpu in found if none and cpu and cpu < none]
    return tpl("report", command=command_line(NAME, r["size"], bool(b)), r=r, pressure_table=pressure_table,
               x=_ratios(a_rows), fewer=(f"fewer with the tier at {', '.join(map(str, fewer))} turns" if fewer
                                         else "the same with and without the tier at every length"),
               replica_table=replica_table, long_table=long_table, tier=CPU_TIER.describe(), backend=backend) + "\n"


@register_study(NAME, "KV tiers: swap vs recompute across KV pressure and link speeds; fewest GPUs for "
                "multi-turn chat with and without a CPU tier; --backend: real swaps give the same tokens",
                PARAMS, _serve, report)
def run(study: StudyRun, p: dict) -> tuple[dict, list[fg.Figure]]:
    cost, blocks, meta, spec = preset(MODEL, HARDWARE)
    bpt = float(spec.kv_bytes_per_token)
    a = pressure(study, p, cost, bpt)
    b = replicas(study, p, cost, blocks, bpt)
    c = kv_bound(study, p)
    return {"long": c, "setup": setup_line(meta), "policy": POLICY, "slo": SLO_SPEC.model_dump(exclude_none=True),
            "kv_bytes_per_token": bpt, "default_blocks": blocks, "pressure": a, "replicas": b,
            "conversations": {str(t): conversations(p["conv_n"], p["conv_rate"], t).describe() for t in p["turns"]},
            "files": ["pressure.csv", "replicas.csv", "long.csv", "kv_tiers.png"]}, _figures(a, b, p["pools"])
