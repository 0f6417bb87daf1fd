"""What claim 4's study sweeps and how it reads a sweep, shared by the simulated sweep
(latency_vs_load.py) and the real-backend one (latency_vs_load_backend.py): the SLO, the
bracket a sweep gives the bisection, what fails first, and the plots."""
from __future__ import annotations

from pathlib import Path

from batchlab.core.summary import SLO
from batchlab.experiments import plots

NAME = "latency-vs-load"
POLICIES = ("static", "continuous", "chunked")
MODEL, HARDWARE, SEATS, SEED = "llama-3-8b", "a100-80gb", 32, 0
SLO_SPEC = SLO(ttft_ms=2000, tpot_ms=100)
COLUMNS = ("policy", "rate", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
           "request_throughput", "output_throughput", "request_goodput", "slo_attainment",
           "slot_utilization", "completed", "meets_slo", "search")


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


def sweep_plots(out_dir: Path, sweep: dict, limits: dict, samples: dict, slo: SLO = SLO_SPEC,
           title: str | None = None, prefix: str = "") -> list[str]:
    """latency_vs_load.png, throughput_vs_load.png, latency_cdf.png (names after `prefix`)."""
    title = title or f"{MODEL} on {HARDWARE}, {SEATS} seats, chat mix"
    fig, axes = plots.figure(2, 2, f"Latency vs load: {title}", width=6.0, height=4.0)
    panels = [("median_ttft_ms", "TTFT p50", None), ("p99_ttft_ms", "TTFT p99", slo.ttft_ms),
              ("median_tpot_ms", "TPOT p50", None), ("p99_tpot_ms", "TPOT p99", slo.tpot_ms)]
    for ax, (key, label, limit) in zip(axes, panels):
        for policy, rows in sweep.items():
            c = plots.color(policy)
            ax.plot([r["rate"] for r in rows], [r[key] for r in rows], marker=".", color=c, label=policy)
            ax.axvline(limits[policy]["max_rate"], color=c, ls=":", lw=1.2)
        if limit:
            plots.mark_y(ax, limit, f"SLO {limit:g} ms")
        ttft = key.endswith("ttft_ms")  # TTFT spans 4 decades; TPOT stays within one
        if ttft:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, slo.tpot_ms * 1.15)
        ax.set_title(f"{label} (dotted verticals: max rate under the SLO)", fontsize=9)
        ax.set_xlabel("request rate (req/s, Poisson)")
        ax.set_ylabel("ms (log)" if ttft else "ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    plots.save(fig, out_dir / f"{prefix}latency_vs_load.png")

    fig, axes = plots.figure(1, 2, f"Throughput vs load: {title}", width=5.6, height=4.0)
    for policy, rows in sweep.items():
        x, c = [r["rate"] for r in rows], plots.color(policy)
        axes[0].plot(x, [r["request_throughput"] for r in rows], marker=".", color=c, label=policy)
        axes[1].plot(x, [r["request_goodput"] for r in rows], marker=".", color=c, label=policy)
    top = max(r["rate"] for rows in sweep.values() for r in rows)
    for ax, panel in zip(axes, ("achieved throughput", "goodput (requests within the SLO per s)")):
        ax.plot([0, top], [0, top], color="#999999", ls="--", lw=1, label="offered")
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel("req/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    plots.save(fig, out_dir / f"{prefix}throughput_vs_load.png")

    rate = cdf_rate(sweep)
    fig, axes = plots.figure(1, 2, f"Latency CDFs at {rate:g} req/s: {title}", width=5.6, height=4.0)
    for policy in sweep:
        lat = samples[(policy, rate)]
        plots.cdf(axes[0], lat["ttft"] * 1000, policy, plots.color(policy))
        plots.cdf(axes[1], lat["tpot"] * 1000, policy, plots.color(policy), log=False)
    axes[0].set_xlabel("TTFT (ms, log)")
    axes[1].set_xlabel("TPOT (ms)")
    for ax, limit in zip(axes, (slo.ttft_ms, slo.tpot_ms)):
        ax.axvline(limit, color="#444444", ls=":", lw=1, label=f"SLO {limit:g} ms")
        ax.legend(fontsize=8)
    plots.save(fig, out_dir / f"{prefix}latency_cdf.png")
    return [f"{prefix}{n}" for n in ("latency_vs_load.png", "throughput_vs_load.png", "latency_cdf.png")]


def rate_text(v: dict) -> str:
    if v["max_rate"] > 0:
        return f"{v['max_rate']:.2f} req/s"
    return f"< {v['failing_rate']:.2f} req/s"  # even the lowest rate tried misses the SLO


def cdf_rate(sweep: dict) -> float:
    """The highest swept rate at which continuous meets the SLO (static usually does not)."""
    ok = [r["rate"] for r in sweep["continuous"] if r["meets_slo"]]
    return ok[-1] if ok else sweep["continuous"][0]["rate"]
