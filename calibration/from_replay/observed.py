"""One replay as a client observed it: per request the send time, prompt and output
lengths, time to first token and the inter-token gaps (or only the end-to-end time where a
format keeps no gaps). Rows that cannot be used are counted with their reason, never
used; every reader builds its replay through `Builder`, so all formats are checked alike."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from batchlab.core.checks import MAX_TIME_S, MAX_TOKENS

# Fewer usable requests than this in all replays together: nothing to fit.
MIN_USABLE = 20
# More than this share of a replay's rows with missing or out-of-order timings (failed
# requests aside): the record itself is broken, not a row of it.
MAX_UNUSABLE = 0.1


@dataclass(frozen=True, slots=True)
class ObservedRequest:
    send_s: float  # seconds from the replay's first send
    prompt_len: int
    output_len: int
    ttft_s: float
    e2e_s: float  # send to last token
    gaps: tuple[float, ...] | None = None  # inter-token gaps as streamed (None: not kept)

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (vLLM's TPOT); None for one token."""
        if self.output_len < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_len - 1)


@dataclass
class ObservedReplay:
    where: str  # the file or folder, and the run within it
    fmt: str  # which reader: batchlab-replay | vllm-bench | sglang-bench
    model: str | None  # the model the server named (None: the format keeps none)
    requests: list[ObservedRequest]
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count
    settings: dict[str, object] = field(default_factory=dict)  # as the client recorded them
    endpoint: str | None = None

    @property
    def failed(self) -> int:
        return sum(n for r, n in self.dropped.items() if r.startswith("failed"))

    @property
    def unusable(self) -> int:
        return sum(self.dropped.values()) - self.failed

    @property
    def impossible(self) -> int:
        return sum(n for r, n in self.dropped.items() if r.startswith("impossible"))

    def describe_dropped(self) -> str:
        if not self.dropped:
            return "none"
        return "; ".join(f"{n} {r}" for r, n in sorted(self.dropped.items(), key=lambda kv: -kv[1]))


class Builder:
    """Collects one replay's rows: each row is used or dropped with a reason."""

    def __init__(self, where: str, fmt: str) -> None:
        self.where, self.fmt = where, fmt
        self.rows: list[ObservedRequest] = []
        self.dropped: dict[str, int] = {}
        self.row = 0  # rows read so far (for errors naming a row)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def add(self, send_s, prompt_len, output_len, ttft_s, e2e_s=None, gaps=None, error="") -> None:
        """One request as read; dropped (counted) if it failed or its timings cannot be
        used. e2e_s None: ttft + the gaps' sum. A boolean where a number belongs is not a
        row to drop but a record that is not what it claims: a one-line ValueError."""
        self.row += 1
        for name, v in (("start_time", send_s), ("input_len", prompt_len), ("output_len", output_len),
                        ("ttft", ttft_s), ("latency", e2e_s)):
            if isinstance(v, bool):
                raise ValueError(f"{self.where}: request {self.row - 1}: {name} is {v!r}; expected "
                                 f"a number (JSON true/false is not one)")
        if gaps is not None and any(isinstance(g, bool) for g in gaps):
            raise ValueError(f"{self.where}: request {self.row - 1}: an inter-token gap is a "
                             f"boolean; expected numbers (seconds)")
        if error:
            return self.drop("failed (the client recorded an error)")
        if not _finite(send_s, ttft_s) or (e2e_s is not None and not _finite(e2e_s)):
            return self.drop("missing timings")
        if not (isinstance(prompt_len, (int, np.integer)) and prompt_len >= 1
                and isinstance(output_len, (int, np.integer)) and output_len >= 1):
            return self.drop("missing or zero prompt/output length")
        if prompt_len > MAX_TOKENS or output_len > MAX_TOKENS:
            return self.drop(f"impossible lengths (over {MAX_TOKENS:,} tokens)")
        if gaps is not None:
            if not _finite(*gaps):
                return self.drop("missing timings (an inter-token gap that is not a number)")
            # A gap per streamed chunk after the first: a chunk may carry several tokens, or
            # none (a last chunk with only the finish reason), so their count need not be
            # output - 1, but more than output_len gaps are chunks of tokens never counted:
            # the lengths are not this request's.
            if len(gaps) > output_len:
                return self.drop("impossible timings (more inter-token gaps than output tokens)")
            gaps = tuple(float(g) for g in gaps)
            if any(g < 0 for g in gaps):
                return self.drop("non-monotonic timings (a negative inter-token gap)")
            # TPOT comes from the span, (e2e - ttft) / (output - 1), as vLLM computes it.
            if e2e_s is None:
                e2e_s = ttft_s + sum(gaps)
        if e2e_s is None:
            return self.drop("missing timings")
        if e2e_s < ttft_s:
            return self.drop("impossible timings (time to first token longer than the latency)")
        if ttft_s <= 0 or send_s < 0:
            return self.drop("non-monotonic timings (send, first token, last token out of order)")
        if max(send_s, e2e_s) > MAX_TIME_S:
            return self.drop(f"impossible timings (beyond {MAX_TIME_S:g} s)")
        if output_len > 1 and e2e_s <= ttft_s:
            return self.drop("non-monotonic timings (several tokens, no time between them)")
        self.rows.append(ObservedRequest(float(send_s), int(prompt_len), int(output_len),
                                         float(ttft_s), float(e2e_s), gaps))

    def done(self, model: str | None, settings: dict | None = None,
             endpoint: str | None = None) -> ObservedReplay:
        rows = sorted(self.rows, key=lambda r: r.send_s)
        t0 = rows[0].send_s if rows else 0.0
        rows = [ObservedRequest(r.send_s - t0, r.prompt_len, r.output_len, r.ttft_s, r.e2e_s, r.gaps)
                for r in rows]
        return ObservedReplay(self.where, self.fmt, model, rows, dict(self.dropped), settings or {},
                              endpoint)


def _finite(*xs) -> bool:
    return all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)
               and math.isfinite(x) for x in xs)


def check_usable(replays: list[ObservedReplay]) -> None:
    """Each replay's timings mostly whole and in order, and enough usable requests in all:
    a one-line ValueError if not."""
    for r in replays:
        rows = len(r.requests) + sum(r.dropped.values())
        if r.impossible:  # no client records these: the lengths and timings do not belong together
            why = "; ".join(f"{n} {k}" for k, n in r.dropped.items() if k.startswith("impossible"))
            raise ValueError(f"{r.where}: {r.impossible} of {rows} requests cannot have happened ({why}); "
                             f"expected the record as the benchmark wrote it")
        if r.unusable > max(1, MAX_UNUSABLE * rows):
            raise ValueError(f"{r.where}: {r.unusable} of {rows} rows have missing or out-of-order "
                             f"timings ({r.describe_dropped()}); expected a whole record")
    n = sum(len(r.requests) for r in replays)
    if n < MIN_USABLE:
        what = "; ".join(f"{r.where}: {len(r.requests)} usable, dropped {r.describe_dropped()}"
                         for r in replays)
        raise ValueError(f"too few usable requests to fit ({n}, at least {MIN_USABLE}): {what}")


def check_same(replays: list[ObservedReplay]) -> None:
    """One model and one server setting across the replays: a ValueError naming the first
    that differs."""
    first = replays[0]
    for r in replays[1:]:
        if r.model and first.model and r.model != first.model:
            raise ValueError(f"{r.where}: model {r.model!r}, but {first.where} served "
                             f"{first.model!r}: replays to fit together must be of one model")
        for k in set(r.settings) & set(first.settings):
            if r.settings[k] != first.settings[k]:
                raise ValueError(f"{r.where}: {k} {r.settings[k]!r}, but {first.where} has "
                                 f"{first.settings[k]!r}: replays to fit together must share the "
                                 f"server's settings")
