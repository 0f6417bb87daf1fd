"""Claim 3: as concurrent sequences grow, per-user tokens/s falls and TPOT rises while
total tokens/s rises until memory or compute is the bottleneck. Marks the concurrency at
which TPOT crosses 100 ms and where the KV cache runs out (preemptions appear)."""
from __future__ import annotations

import math
from pathlib import Path

from batchlab.core.config import SchedulerConfig
from batchlab.core.kv import blocks_for
from batchlab.experiments.markdown import Report, fmt
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from batchlab.experiments.studies.registry import register
from batchlab.experiments.studies.tradeoff_setup import (COLUMNS, HARDWARE, MODEL, NAME, OUTPUT, PROMPT,
                                                closed_loop, landmarks, plot, summarise)
from batchlab.sim import simulate

PARAMS = {
    "full": dict(users=(1, 2, 4, 8, 16, 32, 40, 64, 96, 128, 192, 256, 320, 384, 448, 512, 576,
                        640, 704, 768, 896, 1024), rounds=3, policies=("continuous", "chunked")),
    "small": dict(users=(1, 8, 40, 128, 384, 768), rounds=2, policies=("continuous",)),
}


def measure(users: int, policy: str, rounds: int, cost, blocks: int, meta: dict) -> dict:
    res = simulate(closed_loop(users, rounds), SchedulerConfig(policy=policy, max_num_seqs=users),
                   cost, blocks, meta=meta)
    return summarise(res, policy, users)


@register(NAME, "claim 3: 1 ... hundreds of concurrent sequences: per-user vs total tokens/s, "
                "TPOT crossing 100 ms, KV exhaustion (preemptions); --backend sweeps 1-128 "
                "sequences on the CPU torch backend", backend=True)
def run(out_dir: Path, size: str = "full", backend: bool = False, quiet: bool = False) -> dict:
    p = pick(PARAMS, size)
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = Progress(NAME, quiet)
    cost, blocks, meta, _ = preset(MODEL, HARDWARE)
    mean_prompt, mean_out = (PROMPT[0] + PROMPT[1]) / 2, (OUTPUT[0] + OUTPUT[1]) / 2
    kv_users = blocks // blocks_for(math.ceil(mean_prompt + mean_out - 1), meta["block_size"])
    # Compute ceiling: every request's prompt and reply tokens each cost flops_per_token.
    compute_ceiling = cost.peak_flops / (cost.flops_per_token * (mean_prompt + mean_out)) * mean_out
    by_policy: dict[str, list[dict]] = {}
    with RowLog(out_dir / "sweep.csv", COLUMNS) as log:
        for policy in p["policies"]:
            for n in p["users"]:
                r = log.add(measure(n, policy, p["rounds"], cost, blocks, meta))
                by_policy.setdefault(policy, []).append(r)
                progress(f"{policy} {n:5d} users: {r['output_throughput']:7.0f} tok/s total, "
                         f"{r['per_user_tokens_per_s']:5.1f} tok/s per user, TPOT p50 "
                         f"{r['median_tpot_ms']:6.1f} ms, {r['preemptions']} preemptions")
    result = {"name": NAME, "size": size, "setup": setup_line(meta),
              "workload": closed_loop(1, p["rounds"]).description[0].split(",", 1)[1].strip(),
              "rounds": p["rounds"], "kv_users_estimate": kv_users,
              "compute_ceiling_tokens_per_s": compute_ceiling,
              "compute_efficiency": meta["compute_efficiency"],
              "landmarks": {pol: landmarks(rows) for pol, rows in by_policy.items()},
              "sweep": by_policy, "files": ["sweep.csv", plot(out_dir, by_policy)]}
    if backend:
        from batchlab.experiments.studies import tradeoff_backend  # needs torch: only when asked
        result["backend"] = tradeoff_backend.run(out_dir, size, progress)
        result["files"] += result["backend"]["files"]
    result["elapsed_s"] = progress.elapsed
    _report(out_dir, result, size, backend)
    result["files"].append("report.md")
    return result


def _report(out_dir: Path, r: dict, size: str, backend: bool = False) -> None:
    rep = Report("Claim 3: the concurrency trade-off")
    rep.para(f"Command: `{command_line(NAME, size, backend)}`. Setup: {r['setup']}. Workload per point: "
             f"N users in a closed loop (each sends its next request as soon as its reply ends), "
             f"{r['rounds']} requests each, {r['workload']}; N seats, so N sequences run "
             f"concurrently. One simulation per N.")
    lm = r["landmarks"]
    c = lm.get("continuous") or next(iter(lm.values()))
    pol = "continuous" if "continuous" in lm else next(iter(lm))

    def users(v: float | None) -> str:
        return f"~{v:.0f} sequences" if v else "not within the sweep"
    at40 = next((x for x in r["sweep"][pol] if x["users"] == 40), None)
    mid = (f" At 40 sequences: {at40['output_throughput']:,.0f} tokens/s in total, "
           f"{at40['per_user_tokens_per_s']:.0f} per user, TPOT p50 {at40['median_tpot_ms']:.1f} ms."
           if at40 else "")
    rep.claim(
        "as concurrent sequences grow (1 ... 40 ... hundreds), per-user tokens/s falls and TPOT "
        "rises while total tokens/s rises until memory or compute is the bottleneck.",
        f"({pol}) total output tokens/s rises from {c['throughput_1']:,.0f} at 1 sequence to "
        f"**{c['peak_throughput']:,.0f} at {c['peak_throughput_users']}** "
        f"(x{c['peak_throughput'] / c['throughput_1']:.0f}) while per-user tokens/s falls from "
        f"{c['per_user_1']:.0f}.{mid} TPOT p50 crosses 100 ms at **{users(c['tpot_p50_crosses_at'])}** "
        f"(p99 at {users(c['tpot_p99_crosses_at'])}). The KV cache runs out between "
        f"**{c['last_clean_users']} and {c['first_preemption_users']}** sequences (first "
        f"preemptions).",
        f"the bottleneck that flattens total throughput is compute: at {r['compute_efficiency']:.0%} "
        f"of the {HARDWARE}'s peak FLOP/s, "
        f"with every prompt and reply token costing the model's FLOPs, this mix cannot exceed "
        f"~{r['compute_ceiling_tokens_per_s']:,.0f} output tokens/s (two thirds of the tokens are "
        f"prompt tokens). Memory runs out a little later: the cache holds "
        f"~{r['kv_users_estimate']} sequences at their full length, and more fit because running "
        f"sequences are on average halfway through their replies; past that, preempted sequences "
        f"recompute their prompts and continuous's throughput falls back. TPOT here is what users "
        f"see: it includes the pauses caused by other requests' prefills (continuous runs "
        f"prefill-only steps; chunked puts prompt chunks inside decode steps), so it rises faster "
        f"than the pure decode-step time (dotted in the plot).")
    rep.heading("Sweep")
    for policy, rows in r["sweep"].items():
        rep.para(f"**{policy}**")
        rep.table(["users", "total tok/s", "per-user tok/s", "TPOT p50 (ms)", "TPOT p99 (ms)",
                   "decode step (ms)", "mean batch", "TTFT p50 (ms)", "KV peak", "preemptions"],
                  [[x["users"], fmt(x["output_throughput"], "{:,.0f}"),
                    fmt(x["per_user_tokens_per_s"], "{:.1f}"), fmt(x["median_tpot_ms"], "{:.1f}"),
                    fmt(x["p99_tpot_ms"], "{:.1f}"), fmt(x["decode_step_ms"], "{:.1f}"),
                    fmt(x["mean_batch"], "{:.0f}"), fmt(x["median_ttft_ms"], "{:,.0f}"),
                    fmt(x["kv_peak"], "{:.0%}"), x["preemptions"]] for x in rows])
    rep.para("*decode step*: median duration of decode-only steps (the price of the batch "
             "itself). *mean batch*: sequences per step, all steps. *KV peak*: most KV blocks "
             "in use at any step.")
    rep.image("tradeoff.png", "concurrency trade-off")
    if r.get("backend"):
        from batchlab.experiments.studies import tradeoff_backend
        tradeoff_backend.report_section(rep, r["backend"], r)
    else:
        rep.para("The real-backend variant (`--backend`) sweeps 1-128 concurrent sequences on the "
                 "CPU torch backend with a deliberately small KV pool; it was not run for this report.")
    rep.write(out_dir / "report.md")
