"""The speculative-decoding flags simulate and run share: each sets a [speculative] field."""
from __future__ import annotations

import argparse

from batchlab.core.speculative.config import METHODS
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
                   help="draft_model: the draft (a preset or config.json dir)")
    g.add_argument("--draft-layers", dest="sp_draft_layers", type=int, metavar="N",
                   help="layers of the draft: an EAGLE head's or MTP's (1), or the target's first N "
                        "(draft_model without --draft-model)")
    note_flags(parser)
