"""Claim 3: as concurrent sequences grow, per-user tokens/s falls and TPOT rises while
total tokens/s rises until memory or compute is the bottleneck. Marks the concurrency at
which TPOT crosses 100 ms and where the KV cache runs out (preemptions appear)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from core.config import SchedulerConfig
from core.kv import blocks_for
from core.result import RunResult
from core.workload import Workload
from experiments import plots
from experiments.markdown import Report, fmt
from experiments.studies.common import Progress, RowLog, command_line, pick, preset, setup_line
from experiments.studies.registry import register
from sim import simulate

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


def measure(users: int, policy: str, rounds: int, cost, blocks: int, meta: dict) -> dict:
    res = simulate(closed_loop(users, rounds), SchedulerConfig(policy=policy, max_num_seqs=users),
                   cost, blocks, meta=meta)
    return summarise(res, policy, users)


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
              "sweep": by_policy, "files": ["sweep.csv", _plot(out_dir, by_policy)]}
    if backend:
        from experiments.studies import tradeoff_backend  # needs torch: only when asked
        result["backend"] = tradeoff_backend.run(out_dir, size, progress)
        result["files"] += result["backend"]["files"]
    result["elapsed_s"] = progress.elapsed
    _report(out_dir, result, size, backend)
    result["files"].append("report.md")
    return result


def _plot(out_dir: Path, by_policy: dict[str, list[dict]], title: str | None = None,
          limit_ms: float = TPOT_LIMIT_MS, filename: str = "tradeoff.png") -> str:
    title = title or f"{MODEL} on {HARDWARE}: concurrency trade-off (closed loop, N users = N seats)"
    fig, axes = plots.figure(2, 2, title, width=6.0, height=4.0)
    primary = next(iter(by_policy))
    for policy, rows in by_policy.items():
        c, x = plots.color(policy), [r["users"] for r in rows]
        col = lambda k: [r[k] for r in rows]  # noqa: E731
        axes[0].plot(x, col("output_throughput"), marker=".", color=c, label=policy)
        axes[1].plot(x, col("per_user_tokens_per_s"), marker=".", color=c, label=policy)
        axes[2].plot(x, col("median_tpot_ms"), marker=".", color=c, label=f"{policy} TPOT p50")
        axes[2].plot(x, col("p99_tpot_ms"), ls="--", color=c, label=f"{policy} TPOT p99")
        if policy == primary:  # decode-only steps: the price of the batch alone
            axes[2].plot(x, col("decode_step_ms"), ls=":", color=c, label=f"{policy} decode-only step")
        axes[3].plot(x, [100 * v for v in col("kv_peak")], marker=".", color=c, label=f"{policy} KV peak")
    ax3b = axes[3].twinx()
    for policy, rows in by_policy.items():
        ax3b.plot([r["users"] for r in rows], [r["preemptions"] for r in rows], ls="--",
                  color=plots.color(policy), label=f"{policy} preemptions")
    ax3b.set_ylabel("preemptions in the run (dashed)")
    lm = landmarks(by_policy[primary], limit_ms)  # the first policy's landmarks, on every panel
    for ax in axes:
        if lm["tpot_p50_crosses_at"]:
            plots.mark_x(ax, lm["tpot_p50_crosses_at"],
                         f"TPOT p50 = {limit_ms:g} ms at ~{lm['tpot_p50_crosses_at']:.0f}", "#333333", y=0.6)
        if lm["first_preemption_users"]:
            plots.mark_x(ax, lm["first_preemption_users"],
                         f"KV full: preemptions from {lm['first_preemption_users']}", "#8b0000", y=0.6)
    plots.mark_y(axes[2], limit_ms, f"{limit_ms:g} ms")
    labels = [("total output tokens/s", "tokens/s"), ("per-user tokens/s (1 / TPOT p50)", "tokens/s per user"),
              ("TPOT (time per output token)", "ms"), ("KV cache: peak use", "% of blocks")]
    for ax, (title, ylabel) in zip(axes, labels):
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("concurrent sequences (users)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left" if ax is not axes[1] else "upper right")
    axes[2].set_yscale("log")
    plots.save(fig, out_dir / filename)
    return filename


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
        from experiments.studies import tradeoff_backend
        tradeoff_backend.report_section(rep, r["backend"], r)
    else:
        rep.para("The real-backend variant (`--backend`) sweeps 1-128 concurrent sequences on the "
                 "CPU torch backend with a deliberately small KV pool; it was not run for this report.")
    rep.write(out_dir / "report.md")
