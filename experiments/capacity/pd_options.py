"""`capacity deploy`'s disaggregated search: its flags, and the glue between the
aggregated search's answer and the disaggregated one (pd_search, pd_report)."""
from __future__ import annotations

import argparse

from batchlab.core.model.links import LINKS
from batchlab.experiments.capacity.deploy import Option, ranked
from batchlab.experiments.capacity.pd_report import render_pd
from batchlab.experiments.capacity.pd_search import PDLine, best_pd, lines, parse_ratios, search_pd
from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.capacity.space import DeploySpace, Deployment, configure, parse_list
from batchlab.experiments.capacity.tier_options import parse_tier_options
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError


def add_pd_options(q: argparse.ArgumentParser) -> None:
    g = q.add_argument_group("disaggregated deployments (prefill and decode pools), searched beside")
    g.add_argument("--pd-ratios", metavar="P:D,...",
                   help="prefill:decode replica ratios to search, e.g. 1:1,1:2,2:1, each scaled "
                        "up; or all: every split of up to 16 replicas, fewest GPUs first (default: none)")
    g.add_argument("--prefill-tp-options", default="1", metavar="1,2", help="prefill pool TP degrees (default 1)")
    g.add_argument("--decode-tp-options", default="1", metavar="1,2", help="decode pool TP degrees (default 1)")
    g.add_argument("--link", default="ib-ndr", metavar="NAME",
                   help=f"the link the KV crosses: {' | '.join(LINKS)} (default ib-ndr)")


def check_pd_options(args: argparse.Namespace) -> list[PDLine]:
    """The options to search ([] without --pd-ratios); bad values are one-line errors."""
    if not args.pd_ratios:
        return []
    if args.link not in LINKS:
        raise UserError(f"--link: unknown link {args.link!r}; expected one of {', '.join(LINKS)}")
    ptp = parse_list(args.prefill_tp_options, "--prefill-tp-options", int)
    dtp = parse_list(args.decode_tp_options, "--decode-tp-options", int)
    tiers = tuple(parse_tier_options(args.kv_tier_options))  # each line with and without each tier
    return lines(parse_ratios(args.pd_ratios), [(a, b) for a in ptp for b in dtp], args.max_replicas, tiers)


def run_pd(args: argparse.Namespace, cfg: ExperimentConfig, criteria: Criteria, samples: list,
           space: DeploySpace, options: list[Option], searched: list[PDLine], executor) -> tuple[list[str], dict]:
    """The disaggregated search against the aggregated answer: report lines, JSON."""
    best = ranked(options, criteria)
    winner = best[0] if best else None
    seats = winner.dep.seats if winner else space.seats[0]
    budget = winner.dep.budget if winner else space.budgets[0]
    launch = {"model": space.models[0], "gpu": space.gpus[0], "dtype": space.dtypes[0],
              "seats": seats, "budget": budget}
    base = configure(cfg, Deployment(launch["model"], launch["gpu"], 1, launch["dtype"], seats, budget))
    launch["kv_tier"] = base.kv_tier  # the config's [kv_tier]; a searched line's own replaces it
    bound = winner.gpus if winner else float("inf")
    found = search_pd(base, criteria, samples, searched, args.link, bound, executor)
    lines = render_pd(found, criteria, args.link, bound, winner.dep.label() if winner else None, launch)
    pd = best_pd(found)
    summary = {"link": args.link,
               "options": [{"searched": o.line.name, **({"kv_tier": o.line.kv_tier} if o.line.kv_tier else {}),
                            "pools": o.found.label() if o.found else None,
                            "gpus": o.gpus if o.found else None, "why_none": o.why, **(o.row or {})}
                           for o in found],
               "winner": ("disaggregated" if pd is not None else "aggregated" if winner else None),
               "disaggregated_winner": pd.found.label() if pd and pd.found else None}
    return lines, summary
