"""Claim 3 on the real backend: N users in a closed loop (N seats) on batchlab-tiny, CPU
torch backend, N from 1 to 128: total and per-user tokens/s, TPOT, and a deliberately
small KV pool so that memory runs out (preemptions appear) within minutes. Each point
is also simulated on the identical requests and KV pool, to check the KV limit against
the shared scheduler's. Imported only with --backend: it needs torch and transformers."""
from __future__ import annotations

from pathlib import Path

from batchlab.core.config import SchedulerConfig
from batchlab.experiments.markdown import Report, fmt
from batchlab.experiments.studies.common import Progress, RowLog, command_line, pick, preset
from batchlab.experiments.studies.common_backend import MODEL, machine, runtime, serve
from batchlab.experiments.studies.tradeoff_setup import (COLUMNS as SIM_COLUMNS, HARDWARE, MODEL as SIM_MODEL,
                                                NAME, closed_loop, landmarks, plot, summarise)
from batchlab.sim import simulate

PROMPT, OUTPUT, BLOCK = (32, 96), (32, 96), 16
# 576 blocks of 16 = 9,216 tokens (54 MiB for batchlab-tiny): about 72 sequences at their
# mean full length, so the KV limit falls inside the sweep instead of at thousands.
KV_BLOCKS = 576
# The GPU's 100 ms says nothing on a CPU: batchlab-tiny's 1-sequence TPOT here is 3-8 ms
# (by CPU model: AMD EPYC ~3.6, Intel Xeon ~8) and the CPU saturates near 16-32 sequences,
# so TPOT p50 tops out at ~7-8x its 1-sequence value. The limit is therefore relative to
# the run's own 1-sequence TPOT: 5x it (the same kind of limit as the GPU's 100 ms, about
# 9x its 11 ms), one that every CPU crosses before its KV pool runs out.
TPOT_LIMIT_FACTOR = 5.0
PARAMS = {
    "full": dict(users=(1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 128), rounds=2,
                 policies=("continuous", "chunked")),
    "small": dict(users=(1, 8, 32, 96), rounds=1, policies=("continuous",)),
}
COLUMNS = (*SIM_COLUMNS, "sim_preemptions", "run_s")


def run(out_dir: Path, size: str, progress: Progress) -> dict:
    p = pick(PARAMS, size)
    cost, _, meta, _ = preset(SIM_MODEL, HARDWARE, block_size=BLOCK)  # for the schedule only
    by_policy: dict[str, list[dict]] = {}
    with RowLog(out_dir / "backend_sweep.csv", COLUMNS) as log:
        for policy in p["policies"]:
            for n in p["users"]:
                w = closed_loop(n, p["rounds"], prompt=PROMPT, output=OUTPUT)
                cfg = SchedulerConfig(policy=policy, max_num_seqs=n, block_size=BLOCK,
                                      num_kv_blocks=KV_BLOCKS)
                res = serve(w, cfg)
                row = summarise(res, policy, n)
                row["run_s"] = res.meta.wall_s
                row["sim_preemptions"] = simulate(w, cfg, cost, KV_BLOCKS, meta=meta).summary()["preemptions"]
                by_policy.setdefault(policy, []).append(log.add(row))
                progress(f"backend {policy} {n:4d} users: {row['output_throughput']:5.0f} tok/s total, "
                         f"{row['per_user_tokens_per_s']:5.1f} per user, TPOT p50 "
                         f"{row['median_tpot_ms']:5.1f} ms, {row['preemptions']} preemptions "
                         f"({row['run_s']:.1f} s)")
    limit_ms = TPOT_LIMIT_FACTOR * next(iter(by_policy.values()))[0]["median_tpot_ms"]
    m = runtime().meta()
    title = (f"Real backend ({MODEL}, CPU, 1 thread): concurrency trade-off, KV pool "
             f"{KV_BLOCKS * BLOCK:,} tokens")
    return {"size": size, "model": MODEL, "machine": machine(), "rounds": p["rounds"],
            "prompt": PROMPT, "output": OUTPUT, "kv_blocks": KV_BLOCKS, "block_size": BLOCK,
            "kv_mib": KV_BLOCKS * BLOCK * m["kv_bytes_per_token"] / 2**20,
            "tpot_limit_ms": limit_ms, "sweep": by_policy,
            "landmarks": {pol: _landmarks(rows, limit_ms) for pol, rows in by_policy.items()},
            "files": ["backend_sweep.csv",
                      plot(out_dir, by_policy, title, limit_ms, "backend_tradeoff.png")]}


def _landmarks(rows: list[dict], limit_ms: float) -> dict:
    lm = landmarks(rows, limit_ms)
    # Where total throughput stops paying for more sequences: first point within 10% of the peak.
    lm["saturates_at"] = next(r["users"] for r in rows if r["output_throughput"] >= 0.9 * lm["peak_throughput"])
    sim_pre = [r["users"] for r in rows if r["sim_preemptions"] > 0]
    lm["sim_first_preemption_users"] = sim_pre[0] if sim_pre else None
    return lm


def report_section(rep: Report, b: dict, study: dict) -> None:
    pol = "continuous" if "continuous" in b["landmarks"] else next(iter(b["landmarks"]))
    c, rows = b["landmarks"][pol], b["sweep"][pol]
    g = study["landmarks"].get(pol) or next(iter(study["landmarks"].values()))
    lim = b["tpot_limit_ms"]

    worst = max(rows, key=lambda x: x["median_tpot_ms"])
    after = [x for x in rows if x["preemptions"] > 0]
    if not after:
        past = ""
    elif after[-1]["output_throughput"] < 0.95 * c["peak_throughput"]:
        past = (f" Past the KV limit total throughput falls back, to "
                f"{after[-1]['output_throughput']:,.0f} tokens/s at {after[-1]['users']} sequences "
                f"({after[-1]['preemptions']} preemptions), as in the simulation: evicted sequences "
                f"recompute their prompt and what they had generated.")
    else:
        past = (f" Past the KV limit total throughput holds within 5% of its peak "
                f"({after[-1]['output_throughput']:,.0f} tokens/s at {after[-1]['users']} sequences, "
                f"{after[-1]['preemptions']} preemptions): the recompute of evicted sequences "
                f"does not show in total throughput here, but TPOT keeps rising.")

    def users(v: float | None) -> str:
        return f"~{v:.0f} sequences" if v else "not within the sweep"
    rep.heading("Real backend (CPU)")
    rep.para(f"Command: `{command_line(NAME, b['size'], True)}`. {b['machine']}. Per point: N users "
             f"in a closed loop with N seats, {b['rounds']} request(s) each, prompts "
             f"{b['prompt'][0]}-{b['prompt'][1]} and replies {b['output'][0]}-{b['output'][1]} "
             f"tokens (uniform, seed 0); KV pool deliberately small: {b['kv_blocks']} blocks of "
             f"{b['block_size']} tokens ({b['kv_blocks'] * b['block_size']:,} tokens, "
             f"{b['kv_mib']:.0f} MiB). TPOT threshold {lim:.1f} ms, {TPOT_LIMIT_FACTOR:g}x the "
             f"1-sequence TPOT ({1000 / lim:.0f} tokens/s per user): "
             f"batchlab-tiny's 1-sequence TPOT here is ~{rows[0]['median_tpot_ms']:.0f} ms and "
             f"TPOT p50 reaches only {worst['median_tpot_ms']:.0f} ms (at {worst['users']} sequences), "
             f"so the GPU's 100 ms says nothing on this CPU; {lim:.1f} ms is the same kind of "
             f"limit, one the CPU does cross.")
    first, pre = c["first_preemption_users"], c["sim_first_preemption_users"]
    kv = (f"The KV pool runs out between **{c['last_clean_users']} and {first}** sequences "
          f"(first preemptions; the simulation of the same requests and pool puts them "
          f"{'at the same point' if pre == first else f'from {pre}'})" if first else
          "The KV pool did not run out within the sweep")
    rep.para(
        f"*Measured on the CPU ({pol}):* total output tokens/s rises from "
        f"{c['throughput_1']:,.0f} at 1 sequence to **{c['peak_throughput']:,.0f} at "
        f"{c['peak_throughput_users']}** (x{c['peak_throughput'] / c['throughput_1']:.1f}; within "
        f"10% of that from {c['saturates_at']} sequences) while per-user tokens/s falls from "
        f"{c['per_user_1']:.0f}. TPOT p50 crosses {lim:.1f} ms at **{users(c['tpot_p50_crosses_at'])}** "
        f"(p99 at {users(c['tpot_p99_crosses_at'])}). {kv}.")
    rep.para(
        f"*Against the claim and the simulation:* the shape is the claim's: per-user speed "
        f"falls, TPOT rises, total throughput rises and then flattens, and the KV limit shows as "
        f"preemptions. The scale is the CPU's. On the A100 (simulated above) total throughput "
        f"grows x{g['peak_throughput'] / g['throughput_1']:.0f} and flattens only near "
        f"{g['peak_throughput_users']} sequences; on one CPU core it flattens from "
        f"~{c['saturates_at']}, because a CPU's FLOP/s per byte of bandwidth is so low that a "
        f"decode step is compute-bound from ~14-18 sequences (claim 1's bend): past it, every "
        f"extra sequence costs its full matmul time, so TPOT grows in proportion to N and total "
        f"tokens/s stays flat.{past}")
    for policy, sweep in b["sweep"].items():
        rep.para(f"**{policy}** (real backend)")
        rep.table(["users", "total tok/s", "per-user tok/s", "TPOT p50 (ms)", "TPOT p99 (ms)",
                   "decode step (ms)", "mean batch", "TTFT p50 (ms)", "KV peak", "preemptions",
                   "sim. preemptions", "run (s)"],
                  [[x["users"], fmt(x["output_throughput"], "{:,.0f}"),
                    fmt(x["per_user_tokens_per_s"], "{:.1f}"), fmt(x["median_tpot_ms"], "{:.1f}"),
                    fmt(x["p99_tpot_ms"], "{:.1f}"), fmt(x["decode_step_ms"], "{:.1f}"),
                    fmt(x["mean_batch"], "{:.0f}"), fmt(x["median_ttft_ms"], "{:,.0f}"),
                    fmt(x["kv_peak"], "{:.0%}"), x["preemptions"], x["sim_preemptions"],
                    fmt(x["run_s"], "{:.1f}")] for x in sweep])
    rep.para("*sim. preemptions*: the same requests, scheduler and KV pool simulated. Both "
             "worlds admit a user's next request, sent the instant its reply ends, before "
             "forming the next step, so they take the same scheduling decisions and the "
             "counts should agree. Rows in `backend_sweep.csv`.")
    rep.image("backend_tradeoff.png", "real-backend concurrency trade-off")
