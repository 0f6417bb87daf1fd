"""Step features: the shape of one engine step, all a cost model may look at, and the
step-to-step context both worlds derive the same way (core imports nothing else of ours
here, so cost models, the batch and the fast-forward code can all depend on this).

Two features are not in the Batch but in what ran before it, because serving prices
them (a step on an engine that sat idle, and the step right after a prefill, cost more
than the same shape timed warm and repeated; docs/results/2026-12-01-calibration-serving.md):
- after_prefill: the previous step of this engine ran a prefill chunk;
- after_idle: the engine found nothing to run since its previous step, and that step
  ended IDLE_GAP_S or longer before this one starts (the first step of a run counts).
StepHistory computes both; the simulator and the real driver call it at the same
points of the loop (an empty schedule; the start of a step; its end)."""
from __future__ import annotations

from typing import Final, NamedTuple

FEATURE_NAMES = ("num_seqs", "num_prefill_seqs", "prefill_tokens", "decode_tokens",
                 "kv_tokens_read", "attention_pairs", "after_prefill", "after_idle", "masked_pairs",
                 "window_kv_tokens_read", "window_attention_pairs", "prefill_attention_pairs",
                 "prefill_self_pairs")
# Features that describe the step's context rather than its batch: 0 in step tables
# written before they existed.
CONTEXT_FEATURES = ("after_prefill", "after_idle")
# Features step tables written before them lack (readers derive them: served_runs).
LATER_FEATURES = CONTEXT_FEATURES + ("masked_pairs",)
# The windowed counterparts of kv_tokens_read and attention_pairs: equal to them for a
# model without sliding windows (and in tables written before they existed).
WINDOW_FEATURES = ("window_kv_tokens_read", "window_attention_pairs")
# The pairs of the step's prefill chunks (of attention_pairs): engines run them with another
# kernel than decodes' (MLA: projections applied, not absorbed). Tables written before it
# get an estimate (core/run_folder.py).
PREFILL_PAIRS = "prefill_attention_pairs"
# The pairs of each prefill chunk with itself (causal), of prefill_attention_pairs: GPU
# kernels compute the diagonal blocks at a lower rate than pairs against cached keys.
# Tables written before it get an estimate (self_pairs_estimate).
SELF_PAIRS = "prefill_self_pairs"

# An idle engine this long (no step running) prices its next step as after_idle. Below
# it, the gap is the loop's own overhead between two steps (well under 1 ms).
IDLE_GAP_S = 0.002


class StepFeatures(NamedTuple):
    """The shape of a step. (A named tuple: the simulator builds one per step, or per
    stretch of a fast-forward run, so it must be cheap.)

    kv_tokens_read: KV slots attention reads, summed over sequences (context + new).
    attention_pairs: (query, key) pairs attended, causal: a chunk of c tokens after s
    cached ones attends c*s + c(c+1)/2 pairs; a decode token attends s + 1.
    after_prefill, after_idle: 0 or 1, see the module docstring.
    masked_pairs: pairs an attention kernel computes and then masks out: see
    masked_pairs().
    window_kv_tokens_read, window_attention_pairs: the same two counts with every query
    attending at most the model's sliding window of keys (window_reads / window_pairs);
    equal to kv_tokens_read and attention_pairs for a model without windows.
    prefill_attention_pairs: the part of attention_pairs that prefill chunks attend.
    prefill_self_pairs: the part of those that are a chunk's own tokens: c(c+1)/2 per
    chunk of c tokens, whatever it follows."""

    num_seqs: int = 0
    num_prefill_seqs: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    kv_tokens_read: int = 0
    attention_pairs: int = 0
    after_prefill: int = 0
    after_idle: int = 0
    masked_pairs: int = 0
    window_kv_tokens_read: int = 0
    window_attention_pairs: int = 0
    prefill_attention_pairs: int = 0
    prefill_self_pairs: int = 0

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens


# tuple's own constructor and the class, read once: compiled, looked up by name a call
# (a method lookup on the tuple type, a dict lookup for the class) they cost more than
# the tuple they make.
_TUPLE_NEW: Final = tuple.__new__
_STEP_FEATURES: Final = StepFeatures


def features_of(num_seqs: int, num_prefill_seqs: int, prefill_tokens: int, decode_tokens: int,
                kv_tokens_read: int, attention_pairs: int, after_prefill: int, after_idle: int,
                masked_pairs: int, window_kv_tokens_read: int, window_attention_pairs: int,
                prefill_attention_pairs: int, prefill_self_pairs: int) -> StepFeatures:
    """StepFeatures(every field, in order), made without the named tuple's own __new__: a
    Python function, which compiled code calls through the interpreter (a step's worth of
    work, once a step)."""
    return _TUPLE_NEW(_STEP_FEATURES, (num_seqs, num_prefill_seqs, prefill_tokens, decode_tokens,
                                        kv_tokens_read, attention_pairs, after_prefill, after_idle,
                                        masked_pairs, window_kv_tokens_read, window_attention_pairs,
                                        prefill_attention_pairs, prefill_self_pairs))


# torch's CPU flash attention works on key tiles of 512 and, with is_causal, skips the
# tiles above the diagonal: a fresh chunk computes its diagonal tiles whole.
MASK_TILE: Final = 512  # (Final: compiled, a constant)


def masked_pairs(chunk: int, cached: int = 0) -> int:
    """Pairs of a c-token chunk after `cached` tokens that attention computes beyond its
    causal ones. A first chunk (is_causal): the masked half of each diagonal tile; a later
    one (an explicit mask, nothing skipped): the masked half of the whole c x c block.
    A kernel that works on whole tiles pays for these pairs (torch's CPU SDPA: measured in
    docs/results/2026-12-01-calibration-serving.md); a causal GPU kernel skips at finer
    tiles, and a fit there prices the term ~0."""
    if cached:
        return chunk * (chunk - 1) // 2
    full, rest = chunk // MASK_TILE, chunk % MASK_TILE  # divmod: a call through Python, compiled
    return full * (MASK_TILE * (MASK_TILE - 1) // 2) + rest * (rest - 1) // 2


def window_reads(chunk: int, cached: int, window: int) -> int:
    """KV slots a chunk of `chunk` tokens after `cached` ones reads when each query sees
    at most `window` keys (itself included): the last window - 1 cached ones and the chunk."""
    return min(cached + chunk, window + chunk - 1)


def window_pairs(chunk: int, cached: int, window: int) -> int:
    """(query, key) pairs of that chunk: query i (0-based) attends min(cached + i + 1, window)."""
    hi = cached + chunk
    if hi <= window:
        return chunk * cached + chunk * (chunk + 1) // 2
    if cached >= window:
        return chunk * window
    return window * (window + 1) // 2 - cached * (cached + 1) // 2 + window * (hi - window)


def masked_pairs_estimate(prefill_tokens: int, prefill_seqs: int) -> int:
    """masked_pairs of a step table written before the feature: each chunk taken as a
    first one (exact up to MASK_TILE tokens, where both kinds agree: longer chunks are
    whole prompts), equal chunks assumed where a step has several."""
    if prefill_seqs <= 1:
        return masked_pairs(prefill_tokens)
    return prefill_seqs * masked_pairs(prefill_tokens // prefill_seqs)


def self_pairs_estimate(prefill_tokens: int, prefill_seqs: int, prefill_pairs: int) -> int:
    """prefill_self_pairs of a step table written before the feature: the step's prefill
    tokens taken as equal chunks (exact for one chunk a step), never above its prefill pairs."""
    if prefill_seqs <= 0 or prefill_tokens <= 0:
        return 0
    c, extra = divmod(prefill_tokens, prefill_seqs)
    # extra chunks of c + 1 tokens, the rest of c
    pairs = (prefill_seqs - extra) * (c * (c + 1) // 2) + extra * ((c + 1) * (c + 2) // 2)
    return min(pairs, prefill_pairs)


def recorded_features(given: dict[str, int]) -> StepFeatures:
    """A step's features as a profile or step table recorded them: the ones it lacks 0,
    prefill_self_pairs estimated where it was recorded before that feature."""
    f = StepFeatures(**{n: given.get(n, 0) for n in FEATURE_NAMES})
    if SELF_PAIRS not in given:
        f = f._replace(prefill_self_pairs=self_pairs_estimate(f.prefill_tokens, f.num_prefill_seqs,
                                                              f.prefill_attention_pairs or f.attention_pairs))
    return f


class StepHistory:
    """What one engine ran before the step it is about to run. Call went_idle() when a
    schedule comes back empty, context(start) when a step starts, and ran(end, prefill)
    when it ends (for a fast-forward run: once, with the run's end and no prefill)."""

    __slots__ = ("_end", "_prefill", "_idle")

    def __init__(self) -> None:
        self._end: float | None = None  # when the previous step ended
        self._prefill = False  # whether it ran a prefill chunk
        self._idle = True  # the engine found nothing to run since then

    def went_idle(self) -> None:
        self._idle = True

    def context(self, start: float) -> tuple[int, int]:
        """(after_prefill, after_idle) of a step starting at `start`."""
        idle = self._idle and (self._end is None or start - self._end >= IDLE_GAP_S)
        return int(self._prefill), int(idle)

    def ran(self, end: float, prefill: bool) -> None:
        self._end, self._prefill, self._idle = end, prefill, False
