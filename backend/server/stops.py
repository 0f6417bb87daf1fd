"""Stop strings: a request ends when its text contains one of them, and the text sent
stops just before it (OpenAI's and vLLM's default). Text that could be the start of a
stop string is held back until the next token says whether it is, so a streamed reply
never shows a stop string, nor part of one, that its full reply would not."""
from __future__ import annotations

from collections.abc import Callable


class StopMatcher:
    def __init__(self, stops: list[str], decode: Callable[[int], str], min_tokens: int = 0) -> None:
        self.stops, self.decode, self.min_tokens = stops, decode, min_tokens
        self.pending = ""  # decoded, not yet sent
        self.tokens = 0
        self.stopped = False

    def feed(self, token: int, last: bool) -> str:
        """The text to send with this token ('' while held back). Sets `stopped` when a
        stop string is complete; not before min_tokens tokens (as vLLM): until then
        text is sent as it comes."""
        self.tokens += 1
        self.pending += self.decode(token)
        if self.tokens < self.min_tokens:
            out, self.pending = self.pending, ""
            return out
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            out, self.pending = self.pending[:min(hits)], ""
            return out
        if last:
            out, self.pending = self.pending, ""
            return out
        keep = self._held()
        out, self.pending = self.pending[:len(self.pending) - keep], self.pending[len(self.pending) - keep:]
        return out

    def _held(self) -> int:
        """Length of the longest end of `pending` that begins some stop string."""
        text = self.pending
        for n in range(min(len(text), max(map(len, self.stops)) - 1), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self.stops):
                return n
        return 0
