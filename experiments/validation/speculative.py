"""A validation of speculative runs: the simulation drafts as the real runs did. Read from
the real runs' own meta (served here or stored), so that `validate --real` re-judges stored
speculative runs alike: their k, their measured acceptance (pooled over the runs: the
simulator's acceptance model, core/speculative/acceptance.py) and the draft's cost share
(the profile's price scaled by the draft's weight bytes a pass, core/speculative/draft_cost.py)."""
from __future__ import annotations

from batchlab.core.cost.form import CostForm, Slowed
from batchlab.core.run_meta import RunMeta, Speculation
from batchlab.core.speculative.acceptance import from_counts
from batchlab.core.speculative.draft_cost import DraftedCost
from batchlab.core.speculative.emission import SpeculativeEmission


def speculation(metas: list[RunMeta]) -> Speculation | None:
    """The real runs' speculation (None: they did not speculate)."""
    return metas[0].speculative if metas and metas[0].speculative is not None else None


def drafted(cost: CostForm, spec: Speculation | None) -> CostForm:
    """`cost` with the draft's passes, as the real runs drafted (itself without speculation)."""
    if spec is None:
        return cost
    share = spec.draft_cost_share
    if share is None:
        raise ValueError("the real runs speculated without recording their draft's cost share "
                         "(meta.speculative.draft_cost_share): serve them again")
    # A draft of the target's own first layers shares its KV; a separate draft model runs
    # the step's tokens through its own (backend/speculative/separate.py).
    return DraftedCost(cost, Slowed(cost, float(share)), int(spec.num_speculative_tokens),
                       shares_kv=spec.draft_model is None)


def emission(metas: list[RunMeta], seed: int = 0) -> SpeculativeEmission | None:
    """A fresh emission drawing from the runs' measured acceptance (None without speculation)."""
    spec = speculation(metas)
    if spec is None:
        return None
    k = int(spec.num_speculative_tokens)
    counts: dict[int, int] = {}
    for m in metas:
        for e, n in enumerate(m.speculative.acceptance_counts or [], start=1):
            counts[e] = counts.get(e, 0) + n
    if not sum(counts.values()):  # no verification of all k drafts: every draft cut short
        counts = {1: 1}
    return SpeculativeEmission(k, from_counts(counts, k, k, "the real runs"), seed, spec.method or "draft_model")
