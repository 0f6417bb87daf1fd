"""What `capacity deploy` prints and writes: the winner and the runner-up with their vLLM
launch commands and what binds them, the cheapest options as a table, what could not
run or was pruned, and (with --sensitivity) the range of the winner's and the runner-up's
answer over the knobs of their price."""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from batchlab.experiments.capacity import sensitivity
from batchlab.experiments.capacity.binding import binding, failure_text
from batchlab.experiments.capacity.deploy import Option, next_cheaper, ranked, runner_up
from batchlab.experiments.capacity.launch import data_parallel_command, vllm_command
from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.capacity.tier_options import tier_gib
from batchlab.experiments.capacity.tables import text_table, write_rows

SHOWN = 10  # options in the printed table (options.csv has them all)


def _cost(o: Option, prices: dict | None) -> str:
    gpus = f"{o.gpus:.0f} GPU(s)"
    return gpus if prices is None else f"{gpus}, ${o.cost:.2f}/hour"


def option_row(o: Option, prices: dict | None, criteria: Criteria | None = None) -> dict:
    b = (o.answer.best if o.answer is not None else None) or {}
    row = {"deployment": o.dep.label(), "model": o.dep.model, "hardware": o.dep.hardware, "tp": o.dep.tp,
           "pp": o.dep.pp, "ep": o.dep.ep, "dtype": o.dep.dtype, "max_num_seqs": o.dep.seats,
           "max_num_batched_tokens": o.dep.budget, "replicas": o.replicas,
           "gpus": o.gpus if o.replicas is not None else math.nan,
           "cost_per_hour": o.cost if prices is not None and o.replicas is not None else math.nan,
           "searched_up_to": o.cap or None, "why_none": o.why_none()}
    if o.dep.kv_tier:  # searched (--kv-tier-options): its column, absent otherwise
        row["kv_tier"] = o.dep.kv_tier
    for k in ("p99_ttft_ms", "p99_tpot_ms", "slo_attainment", "requests", "rejected", "unfinished",
              "kv_utilization", "slot_utilization", "preemptions"):
        row[k] = b.get(k) if o.replicas is not None else math.nan
    if criteria is not None and o.replicas is not None:
        nxt, label = o.answer.next_cheaper()
        bind = binding(b, nxt, criteria, label)
        row.update({"tightest": bind.tightest, "tightest_headroom": bind.tightest_headroom, "binds": bind.constraint, "binds_headroom": bind.headroom, "one_fewer_fails": bind.next_failure})
    return row


def _block(title: str, o: Option, options: list[Option], criteria: Criteria, prices: dict | None,
           compare_cheaper: bool, more: Callable[[Option], list[str]]) -> list[str]:
    lines = [f"{title}: {o.dep.label()} x {o.replicas}: {_cost(o, prices)}",
             f"  {vllm_command(o.dep, o.replicas, o.cfg.kv_tier)}"]
    if dp := data_parallel_command(o.dep, o.replicas, o.cfg.kv_tier):
        lines.append(f"  or: {dp}")
    if o.dep.dtype == "fp8":
        lines.append("  (fp8 weights and KV cache: faster and smaller, at some accuracy this simulator "
                     "does not judge)")
    nxt, label = next_cheaper(options, o, criteria) if compare_cheaper else o.answer.next_cheaper()
    lines.append("  " + binding(o.answer.best, nxt, criteria, label).text())
    if without := untiered(o, options, criteria):
        lines.append(f"  {without}")
    return lines + [f"  {x}" for x in more(o)]


def untiered(o: Option, options: list[Option], criteria: Criteria) -> str:
    """For a winner with a searched KV tier: the same deployment without it, its answer and
    what it fails on at the winner's replica count (what the tier buys); '' otherwise."""
    if tier_gib(o.dep.kv_tier) is None:
        return ""
    twin = next((x for x in options if x.dep == o.dep._replace(kv_tier="off")), None)
    if twin is None or twin.answer is None:
        return ""
    needs = (f"needs {twin.replicas} replica(s)" if twin.replicas is not None else twin.why_none())
    at = next((p for p in twin.answer.points if p["replicas"] == o.replicas and not p["passes"]), None)
    fails = f"; at x {o.replicas} it fails: {failure_text(at, criteria)}" if at is not None else ""
    return f"without the KV tier: {needs}{fails}"


def render(options: list[Option], criteria: Criteria, header: list[str], prices: dict | None,
           sens: dict[str, list] | None = None, more: Callable[[Option], list[str]] = lambda o: []) -> str:
    """more(option): lines to add under the winner's and the runner-up's (how it was
    priced, the command that reproduces it)."""
    lines = list(header)
    best = ranked(options, criteria)
    lines.append("")
    if not best:
        lines.append("no deployment in the space meets the criteria")
    else:
        lines += _block("winner", best[0], options, criteria, prices, True, more)
        second = runner_up(best)
        if second is not None:
            lines += _block("runner-up (another GPU, model, layout or dtype)", second, options, criteria,
                            prices, False, more)
        else:
            lines.append("runner-up: none (no deployment of other hardware or dtype met the criteria "
                         "within the winner's cost)")
    shown = best[:SHOWN]
    if shown:
        cols = [("deployment", "deployment", "{}"), ("replicas", "replicas", "{:.0f}"), ("gpus", "GPUs", "{:.0f}")]
        if prices is not None:
            cols.append(("cost_per_hour", "$/hour", "{:.2f}"))
        cols += [("p99_ttft_ms", "TTFT p99 (ms)", "{:.0f}"), ("p99_tpot_ms", "TPOT p99 (ms)", "{:.1f}"),
                 ("rejected", "rejected", "{:.0f}"), ("unfinished", "unfinished", "{:.0f}"),
                 ("kv_utilization", "KV used", "{:.0%}")]
        cols += [("tightest", "tightest", "{}"), ("binds", "binds", "{}")]
        lines += ["", (f"the {len(shown)} cheapest of {len(best)} deployments that meet the criteria (ties: "
                       f"the most headroom first):"),
                  text_table([option_row(o, prices, criteria) for o in shown], cols)]
    none = [o for o in options if o.replicas is None]
    if none:
        reasons: dict[str, int] = {}
        for o in none:
            key = o.why_none()
            reasons[key] = reasons.get(key, 0) + 1
        lines += ["", (f"{len(none)} deployment(s) without an answer: "
                       + "; ".join(f"{n} x {r}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])))]
    per_replica = {o.dep.label(): o.dep.gpus_per_replica for o in options}
    for label, (base, varied) in (sens or {}).items():
        got = [a.value for a in [base, *(a for _, a in varied)] if a.value is not None]
        gpus = (f" = {min(got) * per_replica[label]:g}-{max(got) * per_replica[label]:g} GPUs"
                if got and per_replica.get(label, 1) > 1 else "")
        lines.append(f"sensitivity of {label}: {sensitivity.answer_range(base, [a for _, a in varied])}"
                     f"{gpus} over the knobs of its price:")
        for knob in dict.fromkeys(v.knob for v, _ in varied):
            ends = [(v, a) for v, a in varied if v.knob == knob]
            lines.append(f"  {knob} {ends[0][0].base:.4g} ({ends[0][0].source}): " + "; ".join(
                f"{v.end} {v.value:.4g}: {a.value if a.value is not None else 'none'}" for v, a in ends))
    return "\n".join(lines)


def write(out: Path, options: list[Option], prices: dict | None, sens: dict[str, list] | None,
          criteria: Criteria | None = None) -> list[str]:
    files = write_rows(out / "options", [option_row(o, prices, criteria) for o in options])
    points = [{"deployment": o.dep.label(), **p} for o in options if o.answer is not None for p in o.answer.points]
    if points:
        files += write_rows(out / "points", points)
    rows = [r for _, (_, varied) in (sens or {}).items() for r in sensitivity.rows(varied)]
    if rows:
        files += write_rows(out / "sensitivity", rows)
    return files
