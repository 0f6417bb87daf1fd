"""What a server says about a reply, checked against what replay received: a server that
reports -5 completion tokens, or 60 while it streamed 6, has not produced a measurement.
Such a reply is `invalid`, with the reason: counted apart, never averaged in.

One chunk with a choice per token is what batchlab serve and vLLM stream (with
ignore_eos and no speculative decoding); a server that packs several tokens in a chunk
is reported as such, not silently re-counted."""
from __future__ import annotations

from batchlab.experiments.replay.outcome import Outcome


def _count(value: object) -> int | None:
    """A count as JSON sends one (an integer, not true/false), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_claims(o: Outcome) -> str:
    """'' when the server's usage agrees with the stream and the request, else why not."""
    chunks = len(o.token_times)
    for name, value in (("completion_tokens", o.usage_tokens), ("prompt_tokens", o.usage_prompt_tokens),
                        ("cached_tokens", o.cached_tokens)):
        if value is None:
            continue
        n = _count(value)
        if n is None:
            return f"invalid: the server's usage.{name} is {str(value)[:40]!r}, not a count"
        if n < 0:
            return f"invalid: the server reported {n} {name.replace('_', ' ')}"
    if o.usage_tokens is not None and o.usage_tokens != chunks:
        return (f"invalid: the server reported {o.usage_tokens} completion tokens but streamed "
                f"{chunks} token chunks")
    made = o.usage_tokens if o.usage_tokens is not None else chunks
    if made > o.requested:
        return f"invalid: {made} completion tokens for a request of max_tokens={o.requested}"
    if o.usage_prompt_tokens is not None and o.usage_prompt_tokens != o.prompt_len:
        return (f"invalid: the server reported {o.usage_prompt_tokens} prompt tokens for a prompt "
                f"of {o.prompt_len} token ids")
    if o.cached_tokens is not None and o.cached_tokens > o.prompt_len:
        return f"invalid: the server reported {o.cached_tokens} cached tokens of a {o.prompt_len}-token prompt"
    return ""
