"""What claim 3's study sweeps and how it reads a sweep, shared by the simulated sweep
(tradeoff.py) and the real-backend one (tradeoff_backend.py): the closed-loop workload,
one point's summary, the landmarks (TPOT crossing, first preemption) and the plot."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from batchlab.core.result import RunResult
from batchlab.core.workload import Workload
from batchlab.experiments import plots

NAME = "tradeoff"
MODEL, HARDWARE, SEED, TPOT_LIMIT_MS = "llama-3-8b", "a100-80gb", 0, 100.0
PROMPT, OUTPUT = (256, 768), (128, 384)
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


def plot(out_dir: Path, by_policy: dict[str, list[dict]], title: str | None = None,
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
