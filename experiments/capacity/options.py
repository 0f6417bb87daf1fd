"""Options shared by `batchlab capacity` and `batchlab sweep`: how a point is judged
(criteria), how noise is sampled (seeds, windows), and what a GPU-hour costs."""
from __future__ import annotations

import argparse
import math

from batchlab.core.summary import SLO
from batchlab.experiments.capacity.point import Criteria
from batchlab.experiments.errors import UserError
from batchlab.experiments.limits import check_samples as check_runs


def positive_price(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a price per GPU-hour (a positive number), got {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a price per GPU-hour (a positive number), got {text!r}")
    return v


def add_criteria_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("capacity criteria (with --slo-ttft-ms / --slo-tpot-ms / --slo-e2el-ms)")
    g.add_argument("--percentile", type=int, choices=(50, 90, 99), default=99,
                   help="the SLO limits apply to this percentile (default 99)")
    g.add_argument("--goodput", type=float, metavar="F",
                   help="instead: at least this share of requests (0-1] meets every SLO limit")
    g.add_argument("--max-rejected-share", type=float, default=0.0, metavar="F",
                   help="a point may reject or leave unfinished at most this share [0, 1) of its "
                        "requests (default 0: every request must be served, but those longer than "
                        "the model's context: see --count-too-long)")
    g.add_argument("--count-too-long", action="store_true",
                   help="count requests longer than the model's context against --max-rejected-share "
                        "too (default: they are counted and reported, column too_long, but do not "
                        "fail a point: no deployment of the model serves them)")
    g.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="samples per point: N workload seeds (generated arrivals and lengths)")
    g.add_argument("--windows", type=int, default=1, metavar="W",
                   help="samples per point: W equal windows of the trace; a point passes when "
                        "every sample (seed x window) passes")
    g.add_argument("--gpu-hour-price", type=positive_price, metavar="USD",
                   help="price one GPU-hour: adds cost per hour to the tables")


def criteria_from(slo: SLO | None, percentile: int, goodput: float | None,
                  max_rejected_share: float = 0.0, count_too_long: bool = False) -> Criteria:
    if slo is None or not any((slo.ttft_ms, slo.tpot_ms, slo.e2el_ms)):
        raise UserError("capacity needs an SLO: --slo-ttft-ms, --slo-tpot-ms or --slo-e2el-ms "
                        "(or [run.slo] in the config)")
    if goodput is not None and not 0 < goodput <= 1:
        raise UserError(f"--goodput must be a share in (0, 1], got {goodput}")
    if not 0 <= max_rejected_share < 1:
        raise UserError(f"--max-rejected-share must be a share in [0, 1), got {max_rejected_share}")
    return Criteria(slo, percentile, goodput, max_rejected_share, count_too_long)


def check_samples(seeds: int, windows: int) -> None:
    if seeds < 1:
        raise UserError(f"--seeds must be >= 1, got {seeds}")
    if windows < 1:
        raise UserError(f"--windows must be >= 1, got {windows}")
    check_runs(f"--seeds {seeds} x --windows {windows}" if windows > 1 else f"--seeds {seeds}",
               seeds * windows)
