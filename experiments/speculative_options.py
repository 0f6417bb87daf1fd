"""The speculative-decoding flags simulate and run share: each sets a [speculative] field."""
from __future__ import annotations

import argparse
import sys
from typing import Iterable

from batchlab.core.run_meta import RunMeta
from batchlab.core.speculative.acceptance import write_acceptance_file
from batchlab.core.speculative.config import METHODS
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.options import note_flags


def _rates(text: str) -> list[float]:
    try:
        return [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability or a comma list of them, got {text!r}") from None


def add_speculative_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("speculative decoding ([speculative])")
    g.add_argument("--speculative", dest="sp_method", choices=METHODS, metavar="METHOD",
                   help=f"{' | '.join(METHODS)}: drafts from a small model, an EAGLE-style head or "
                        "the model's MTP layers, verified by the model in one step")
    g.add_argument("--num-speculative-tokens", dest="sp_num_speculative_tokens", type=int, metavar="K",
                   help="drafts a step per decoding sequence (default 3)")
    g.add_argument("--acceptance", dest="sp_acceptance", type=_rates, metavar="P[,P...]",
                   help="simulator: probability a draft is accepted (one, or one per position)")
    g.add_argument("--acceptance-file", dest="sp_acceptance_file", metavar="CSV",
                   help="simulator: measured acceptance (as `batchlab run --speculative` writes)")
    g.add_argument("--draft-model", dest="sp_draft_model", metavar="NAME|DIR",
                   help="draft_model: a separate draft of the same vocabulary (a preset, a "
                        "config.json dir, or on the backend a local checkpoint)")
    g.add_argument("--draft-layers", dest="sp_draft_layers", type=int, metavar="N",
                   help="layers of the draft: an EAGLE head's or MTP's (1), or the target's first N "
                        "(draft_model without --draft-model)")
    note_flags(parser)


# What the backend runs of [speculative] (backend/speculative/setup.py says why): checked
# here, before the model loads, with the same words.
_SIM_ONLY = ("acceptance", "acceptance_file")


def check_run_speculative(cfg: ExperimentConfig, acceptance_out: str | None) -> None:
    sp = cfg.speculative
    if acceptance_out and not sp.on:
        raise UserError("--acceptance-out: the run does not speculate (give --speculative draft_model "
                        "--draft-model NAME|DIR, or --draft-layers N)")
    if not sp.on:
        return
    for name in _SIM_ONLY:
        if getattr(sp, name) is not None:
            raise UserError(f"speculative.{name}: a simulator setting; a real run measures its acceptance")
    if sp.method != "draft_model":
        raise UserError(f"speculative.method {sp.method}: the backend drafts with a draft model "
                        f"(method draft_model, with draft_model NAME|DIR or draft_layers N of the "
                        f"target's own)")
    if cfg.run.temperature != 0:
        raise UserError(f"run.temperature (--temperature) {cfg.run.temperature:g}: speculative decoding "
                        f"on the backend verifies greedily; give 0")


def write_acceptance(path: str, k: int, metas: Iterable[RunMeta]) -> None:
    """The runs' measured acceptance, pooled, as the simulator's acceptance file."""
    counts: dict[int, int] = {}
    for m in metas:
        for e, n in enumerate((m.speculative.acceptance_counts or []) if m.speculative else [], start=1):
            counts[e] = counts.get(e, 0) + n
    write_acceptance_file(path, k, counts)
    print(f"acceptance: {sum(counts.values())} verifications of {k} drafts written to {path}",
          file=sys.stderr)
