"""One streamed completion as the client saw it: its times, what the server claimed
(usage counts), and why it failed or was not believed (experiments/replay/claims.py)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outcome:
    index: int  # the workload's request index
    prompt_len: int
    requested: int  # max_tokens asked for
    start: float = 0.0  # perf_counter seconds
    first: float = -1.0
    end: float = -1.0
    token_times: list[float] = field(default_factory=list)  # one per chunk with a choice
    usage_tokens: object = None  # usage.completion_tokens as the server sent it (claims.py checks it)
    usage_prompt_tokens: object = None  # usage.prompt_tokens, as sent
    cached_tokens: object = None  # usage.prompt_tokens_details.cached_tokens, if given
    text: str = ""
    response_id: str = ""
    error: str = ""  # it failed: no complete reply
    invalid: str = ""  # a complete reply whose server's claims disagree with what came (claims.py)

    @property
    def ok(self) -> bool:
        """A complete reply whose claims hold: the only kind averaged in."""
        return not self.error and not self.invalid

    @property
    def output_tokens(self) -> int:
        """What the server generated: its usage count once checked, else the chunks."""
        n = self.usage_tokens
        return n if self.ok and isinstance(n, int) else len(self.token_times)
