"""Speculative decoding on the torch backend: a draft proposes k tokens per decoding
sequence at the start of a step, the target verifies them and its last token in one
forward pass, and greedy verification keeps the target's own greedy tokens (the accepted
drafts and one more). The scheduler is the one every run uses, told of the drafts by an
emission (core/emission.py) that reports what verification kept."""
