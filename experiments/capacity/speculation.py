"""`batchlab capacity speculation`: where speculative decoding stops paying. The config's
deployment serves a closed loop of N users (each sends its next request when its reply
ends: a batch of about N) with speculation off and at each draft length k, and the
summary compares TPOT (median) and output throughput: speculation helps at small batch,
where a decode step reads the weights for few tokens and verifying k+1 costs little more,
and hurts beyond the batch where the step turns compute-bound and the draft's passes and
rejected positions cost more than the kept tokens save. The answer is, per k, the fewest
users from which its TPOT is no better than without it."""
from __future__ import annotations

import argparse
import csv
import io
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from batchlab.core import atomic
from batchlab.core.workload import build_workload
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import load_experiment
from batchlab.experiments.output import make_out_dir, to_json
from batchlab.experiments.report import layout
from batchlab.experiments.setup import CAPACITY_EXPERIMENT, sim_setup
from batchlab.sim import simulate

USERS = "1,2,4,8,16,32,64,128,256"
K_OPTIONS = "1,3,5"
REQUESTS_PER_USER = 4  # each user's requests in a point: enough for the loop to settle


@dataclass(frozen=True)
class Level:
    users: int
    k: int  # 0: no speculation
    median_tpot_ms: float
    output_throughput: float
    mean_acceptance_length: float  # nan without speculation


def _counts(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected comma-separated whole numbers") from None
    if not values or min(values) < 1:
        raise UserError(f"{flag} {text!r}: expected whole numbers >= 1")
    return sorted(set(values))


def _at(cfg: ExperimentConfig, k: int) -> ExperimentConfig:
    """cfg with speculation off (k 0) or at k drafts (a per-position list must then be one rate)."""
    c = cfg.model_copy(deep=True)
    if k == 0:
        c.speculative.method = "off"
    else:
        if c.speculative.acceptance is not None and len(c.speculative.acceptance) > 1:
            raise UserError("speculative.acceptance: one rate for every position (--acceptance P), so "
                            "that it applies at each --k-options value; or an acceptance file")
        c.speculative.num_speculative_tokens = k
    return c


def levels(cfg: ExperimentConfig, users: list[int], ks: list[int]) -> list[Level]:
    out = []
    for k in [0, *ks]:
        c = _at(cfg, k)
        setup = sim_setup(c)
        _, scheduler = next(iter(setup.schedulers.items()))
        for n in users:
            wl = c.workload.model_copy(update={"max_concurrency": n, "rate": math.inf,
                                               "num_requests": max(c.workload.num_requests or 0,
                                                                   REQUESTS_PER_USER * n)})
            result = simulate(build_workload(wl), scheduler, setup.cost, setup.blocks, meta=setup.meta,
                              record_steps=False, emission=setup.emission(wl.seed),
                              **setup.tier_options)  # a [kv_tier], if any
            s = result.summary()
            out.append(Level(n, k, s["median_tpot_ms"], s["output_throughput"],
                             s.get("mean_acceptance_length", math.nan)))
    return out


def stops_paying(rows: list[Level], k: int) -> int | None:
    """The fewest users from which k's median TPOT is no better than without speculation
    (None: it pays at every level tried)."""
    off = {r.users: r.median_tpot_ms for r in rows if r.k == 0}
    worse = [r.users for r in rows if r.k == k and r.median_tpot_ms >= off[r.users]]
    return min(worse) if worse else None


def render(rows: list[Level], users: list[int], ks: list[int]) -> str:
    by = {(r.users, r.k): r for r in rows}
    header = ["off", *(f"k={k}" for k in ks)]
    table = [(f"{n} users: TPOT p50 ms", [f"{by[n, 0].median_tpot_ms:.2f}"]
              + [f"{by[n, k].median_tpot_ms:.2f} ({by[n, 0].median_tpot_ms / by[n, k].median_tpot_ms:.2f}x)"
                 for k in ks]) for n in users]
    table += [(f"{n} users: output tok/s", [f"{by[n, 0].output_throughput:.0f}"]
               + [f"{by[n, k].output_throughput:.0f}" for k in ks]) for n in users]
    table.append(("acceptance length (mean)", ["-"] + [f"{by[users[0], k].mean_acceptance_length:.2f}"
                                                      for k in ks]))
    lines = [layout(header, table), ""]
    for k in ks:
        n = stops_paying(rows, k)
        lines.append(f"k={k}: " + (f"stops paying at {n} users (TPOT p50 no better than without speculation)"
                                   if n is not None else f"pays at every level tried (up to {users[-1]} users)"))
    return "\n".join(lines)


def run_speculation(args: argparse.Namespace) -> int:
    cfg = load_experiment(args, CAPACITY_EXPERIMENT)
    if not cfg.speculative.on:
        raise UserError("capacity speculation compares a speculative method with none: give "
                        "--speculative METHOD and its --acceptance (or a [speculative] table)")
    users = _counts(args.users, "--users")
    ks = _counts(args.k_options, "--k-options")
    for k in ks:  # every setting is checked before anything runs
        sim_setup(_at(cfg, k))
    rows = levels(cfg, users, ks)
    text = render(rows, users, ks)
    if args.out:
        out = make_out_dir(args.out, cfg.model_dump())
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(asdict(rows[0])))
        w.writeheader()
        w.writerows(asdict(r) for r in rows)
        atomic.write_text(out / "speculation.csv", buf.getvalue())
        from batchlab.experiments.capacity.speculation_plot import plot_speedups  # lazy: matplotlib
        plot_speedups(out / "speculation.png", rows, ks, f"{cfg.model.name} on {cfg.hardware.name}, "
                      f"{cfg.speculative.method}")
        text += f"\nresults written to {out}/ (speculation.csv, speculation.png)"
    if args.format == "json":
        print(to_json({"levels": [asdict(r) for r in rows],
                       "stops_paying_at_users": {str(k): stops_paying(rows, k) for k in ks}}))
    else:
        print(text)
    return 0


def add_speculation_options(q: argparse.ArgumentParser) -> None:
    q.add_argument("--users", default=USERS, metavar="1,2,4", help=f"closed-loop users (default {USERS})")
    q.add_argument("--k-options", default=K_OPTIONS, metavar="1,3,5",
                   help=f"draft lengths to compare with none (default {K_OPTIONS})")
