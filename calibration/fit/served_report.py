"""How a cost model fitted on served steps reads (a sweep's serving phase, --from-run): its
serving terms in words, and its error per step kind beside the profile it refined
(served_steps.py)."""
from __future__ import annotations

KINDS = ("all", "decode", "prefill", "small_chunk", "mixed", "after_prefill", "after_idle")


def _cell(e: dict | None) -> str:
    if not e or not e["n"]:
        return f"{'-':>28}"
    return f"{e['n']:>6} {e['median_ape']:>7.1f}% {e['median_error']:>+7.1f}% {e['faster_share']:>6.0%}"


def served_terms(c) -> str:
    """The cost terms serving fits (core.profile.CostParams), in words."""
    return (f"per sequence {c.per_seq_s * 1e3:.3f} ms, per prefill chunk {c.per_chunk_s * 1e3:.3f} ms, "
            f"after a prefill {c.after_prefill_s * 1e3:.3f} ms, after an idle gap "
            f"{c.after_idle_s * 1e3:.3f} ms, a steady decode {c.steady_s * 1e3:+.3f} ms")


def table(after: dict, before: dict | None, where: str, labels=("given profile", "fitted")) -> str:
    """Per step kind: n, median |error|, median signed error, share predicted faster."""
    cols = "n  |err|  signed  faster"
    head = f"  {'step kind':<14}" + (f"{labels[0]:>28}" if before else "") + f"{labels[1]:>28}"
    lines = [f"per-step error {where} (|err|: median absolute, signed: median, + = predicted "
             "slower; faster: share of steps predicted faster)", head,
             f"  {'':<14}" + (f"{cols:>28}" if before else "") + f"{cols:>28}"]
    for k in KINDS:
        lines.append(f"  {k:<14}{_cell(before.get(k)) if before else ''}{_cell(after.get(k))}")
    return "\n".join(lines)
