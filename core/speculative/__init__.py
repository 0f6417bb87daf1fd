"""Speculative decoding's home: a draft (a small model, an EAGLE-style head, or the
target's own MTP layers) proposes k tokens per decoding sequence, the target verifies
them with its last token in one step (k + 1 positions) and keeps the accepted drafts and
one more. Here: the deployment's settings (config.py), the acceptance model (acceptance.py),
the emission that draws from it with the run's seed (emission.py) and the draft's price
(draft_cost.py). The scheduler, step features and metrics read it through the emission
seam (core/emission.py); a run without speculation never touches this package."""
