"""What `capacity deploy --pd-ratios` adds to the answer: each disaggregated option's
fewest-GPU pools that pass (or why none), aggregated against disaggregated, and for the
disaggregated winner its launch lines (vLLM's disaggregated serving: one `vllm serve`
per pool with the NIXL connector) and what binds each pool.

The --kv-transfer-config flag is vLLM's (vllm/engine/arg_utils.py @ 99d7eb5d, the
VllmConfig group, a JSON KVTransferConfig); the value is the NixlConnector usage
guide's (docs.vllm.ai, features/nixl_connector_usage: kv_connector NixlConnector,
kv_role kv_both on both pools). A proxy in front sends each request to a prefill
replica with max_tokens=1, then to a decode replica with the KV's whereabouts (vLLM's
tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, or llm-d's / Dynamo's router)."""
from __future__ import annotations

import json
import math

from batchlab.core.kv_tiers import TierConfig
from batchlab.experiments.capacity.launch import checkpoint, serve_flags
from batchlab.experiments.capacity.pd_search import PDOption, PDShape, best_pd
from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.capacity.space import Deployment
from batchlab.experiments.capacity.tables import text_table
from batchlab.experiments.capacity.tier_options import tier_config, tier_gib

NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))


def pool_commands(model: str, gpu: str, dtype: str, seats: int, budget: int, s: PDShape,
                  tier: TierConfig | None = None) -> list[str]:
    """One `vllm serve` line per pool, with how many replicas of it to run (tier: the
    config's [kv_tier], below each replica of both pools: vLLM's offloading flags)."""
    ckpt = checkpoint(model)
    if ckpt is None:
        return [f"# {model} is batchlab's embedded model, not a Hugging Face checkpoint: no vLLM command"]
    out = []
    for pool, n, tp in (("prefill", s.prefill, s.prefill_tp), ("decode", s.decode, s.decode_tp)):
        dep = Deployment(model, gpu, tp, dtype, seats, budget)
        out.append(" ".join(["vllm serve", ckpt, *serve_flags(dep, tier), "--kv-transfer-config", f"'{NIXL}'"])
                   + f"  # {pool} pool: x {n} replica(s), {n * tp} GPU(s)")
    out.append("# a proxy sends each request to a prefill replica (max_tokens=1), then to a decode replica "
               "with its kv_transfer_params (vLLM's nixl_integration/toy_proxy_server.py, llm-d, Dynamo)")
    return out


def _headroom(value: float, limit: float | None) -> str:
    if limit is None or not math.isfinite(value):
        return ""
    return f" of {limit:g} ms ({1 - value / limit:+.0%} headroom)"


def binding_lines(option: PDOption, criteria: Criteria) -> list[str]:
    """Each pool's load and its own objective at the winner's scale; the pool whose
    objective has the least headroom binds (TTFT is the prefill pool's, TPOT the decode
    pool's, the KV transfer included), and the next scale down says what failed."""
    r, s = option.row or {}, option.found
    assert s is not None, "binding lines are for an option that passed"
    by_percentile = criteria.goodput is None
    ttft, tpot = criteria.slo.ttft_ms, criteria.slo.tpot_ms
    lines = [f"  prefill pool ({s.prefill} x TP{s.prefill_tp}): stepping {r.get('prefill_busy_fraction', math.nan):.0%}, "
             f"p99 TTFT {r.get('p99_ttft_ms', math.nan):.0f} ms{_headroom(r.get('p99_ttft_ms', math.nan), ttft if by_percentile else None)}",
             f"  decode pool ({s.decode} x TP{s.decode_tp}): stepping {r.get('decode_busy_fraction', math.nan):.0%}, "
             f"seats {r.get('decode_slot_utilization', math.nan):.0%} (all full "
             f"{r.get('decode_seats_full_fraction', math.nan):.0%} of the time), KV {r.get('decode_kv_utilization', math.nan):.0%}, "
             f"p99 TPOT {r.get('p99_tpot_ms', math.nan):.1f} ms{_headroom(r.get('p99_tpot_ms', math.nan), tpot if by_percentile else None)} "
             f"(KV transfer mean {r.get('mean_kv_transfer_ms', math.nan):.2f} ms)"]
    if criteria.goodput is not None:  # judged by the share within both, not by a percentile
        lines.append(f"  binds: goodput {r.get('slo_attainment', math.nan):.1%} of requests within both "
                     f"objectives (needs {criteria.goodput:.0%})")
        ttft = tpot = None
    rooms = {}
    if ttft is not None:
        rooms["prefill"] = 1 - r.get("p99_ttft_ms", math.nan) / ttft
    if tpot is not None:
        rooms["decode"] = 1 - r.get("p99_tpot_ms", math.nan) / tpot
    rooms = {p: h for p, h in rooms.items() if math.isfinite(h)}
    if rooms:
        lines.append(f"  binds: the {min(rooms, key=rooms.get)} pool (its objective has the least headroom)")
    if len(option.tried) > 1:  # the candidate before it, one step smaller
        before = option.tried[-2]
        lines.append(f"  the next smaller ({before.get('deployment', '')}): {before['failures'] or 'passes'}")
    return lines


def untiered(best: PDOption, options: list[PDOption]) -> str:
    """For a winner with a searched KV tier: its line without the tier, its answer and
    what it fails on at the winner's pools (what the tier buys); '' otherwise."""
    if tier_gib(best.line.kv_tier) is None:
        return ""
    twin = next((o for o in options if o.line.kv_tier == "off" and o.line.candidates == best.line.candidates), None)
    if twin is None:
        return ""
    needs = f"needs {twin.found.label()} ({twin.gpus:.0f} GPUs)" if twin.found else twin.why
    assert best.found is not None
    at = next((r for r in twin.tried if r.get("deployment") == best.found.label() and not r["passes"]), None)
    fails = f"; at {best.found.label()} it fails: {at['failures']}" if at is not None else ""
    return f"without the KV tier: {needs}{fails}"


def render_pd(options: list[PDOption], criteria: Criteria, link: str, aggregated_gpus: float,
              aggregated_label: str | None, launch: dict) -> list[str]:
    """launch: model, gpu, dtype, seats, budget of the pools' servers."""
    lines = ["", f"disaggregated (prefill and decode pools, KV over {link}; {launch['model']} on "
                 f"{launch['gpu']} {launch['dtype']}, {launch['seats']} seats, {launch['budget']} tokens):"]
    rows = [{"option": o.line.name, "shape": o.found.label() if o.found else "-",
             "gpus": o.gpus if o.found else math.nan,
             "p99_ttft_ms": (o.row or {}).get("p99_ttft_ms", math.nan),
             "p99_tpot_ms": (o.row or {}).get("p99_tpot_ms", math.nan),
             "per_gpu": (o.row or {}).get("request_goodput", math.nan) / o.gpus if o.found else math.nan,
             "why": o.why} for o in options]
    lines.append(text_table(rows, [("option", "searched", "{}"), ("shape", "pools", "{}"), ("gpus", "GPUs", "{:.0f}"),
                                   ("p99_ttft_ms", "TTFT p99 (ms)", "{:.0f}"), ("p99_tpot_ms", "TPOT p99 (ms)", "{:.1f}"),
                                   ("per_gpu", "goodput/GPU (req/s)", "{:.3f}"), ("why", "none because", "{}")]))
    best = best_pd(options)
    agg = f"{aggregated_label} ({aggregated_gpus:.0f} GPUs)" if aggregated_label else "none"
    if best is None:
        lines.append(f"aggregated against disaggregated: aggregated wins ({agg}); no disaggregated shape "
                     f"meets the criteria below its GPUs")
        return lines
    assert best.found is not None
    lines.append(f"aggregated against disaggregated: disaggregated wins, {best.found.label()} "
                 f"({best.gpus:.0f} GPUs) against aggregated {agg}")
    lines.append("disaggregated winner's launch (vLLM disaggregated serving, NIXL connector):")
    tier = tier_config(best.line.kv_tier, launch.get("kv_tier")) if best.line.kv_tier else launch.get("kv_tier")
    lines += ["  " + c for c in pool_commands(launch["model"], launch["gpu"], launch["dtype"], launch["seats"],
                                              launch["budget"], best.found, tier)]
    if without := untiered(best, options):
        lines.append(f"  {without}")
    lines.append("what binds each pool:")
    lines += binding_lines(best, criteria)
    return lines
