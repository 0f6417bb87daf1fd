"""The acceptance model: how many tokens a verification step keeps (1 to k + 1: the
accepted drafts and the target's own next token), as a distribution.

Two sources: per-position acceptance probabilities (draft i is accepted with probability
a_i given drafts before it were; one number is the same for every position), or a file
of measured acceptance lengths (rows `num_speculative_tokens,emitted,count`, written by
`batchlab run` with speculation on, backend/speculative/). A file measured with k_m
drafts serves any k <= k_m (a step that would keep more keeps k + 1); a larger k is
refused, since what the draft does past k_m was never seen."""
from __future__ import annotations

import csv
import io
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from batchlab.core import atomic, text_input

ACCEPTANCE_COLUMNS = ("num_speculative_tokens", "emitted", "count")


@dataclass(frozen=True)
class Acceptance:
    """P(a verification step keeps j + 1 tokens), j = 0..k: `probs[j]`."""
    probs: tuple[float, ...]
    source: str  # in words, for the assumptions line

    @property
    def k(self) -> int:
        return len(self.probs) - 1

    @property
    def mean_length(self) -> float:
        """Expected tokens kept per verification (vLLM's mean acceptance length)."""
        return sum((j + 1) * p for j, p in enumerate(self.probs))

    def cumulative(self) -> tuple[float, ...]:
        out, total = [], 0.0
        for p in self.probs[:-1]:
            total += p
            out.append(total)
        return tuple(out)


def per_position(rates: list[float], k: int) -> Acceptance:
    """Acceptance from per-position probabilities: one rate for every position, or k of them."""
    if len(rates) == 1:
        rates = rates * k
    if len(rates) != k:
        raise ValueError(f"speculative.acceptance has {len(rates)} rates for "
                         f"num_speculative_tokens={k}: give one, or one per position")
    probs, reach = [], 1.0  # reach: probability drafts 0..j-1 were all accepted
    for a in rates:
        probs.append(reach * (1.0 - a))
        reach *= a
    probs.append(reach)
    each = ", ".join(f"{a:g}" for a in rates)
    shown = f"{rates[0]:g} per position" if len(set(rates)) == 1 else f"per position {each}"
    return Acceptance(tuple(probs), f"acceptance {shown}")


def from_counts(counts: dict[int, int], measured_k: int, k: int, source: str) -> Acceptance:
    """A measured histogram (tokens kept -> steps, with measured_k drafts) cut to k drafts."""
    if k > measured_k:
        raise ValueError(f"{source}: measured with num_speculative_tokens={measured_k}; "
                         f"it cannot say how a draft of k={k} is accepted (use k <= {measured_k})")
    total = sum(counts.values())
    probs = [0.0] * (k + 1)
    for emitted, n in counts.items():
        probs[min(emitted, k + 1) - 1] += n / total
    return Acceptance(tuple(probs), f"measured acceptance from {source} ({total} verifications)")


def read_acceptance_file(path: str | Path, k: int) -> Acceptance:
    """The acceptance measured in `path`; ValueError (one line naming the file and row) where
    it is not one."""
    where = str(path)
    try:  # a byte-order mark and CR-only line endings read as any other file
        rows = list(csv.reader(io.StringIO(text_input.read_text(path))))
    except OSError as e:
        raise ValueError(f"{where}: cannot read the acceptance file ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not UTF-8 text; expected a CSV of "
                         f"{','.join(ACCEPTANCE_COLUMNS)}") from None
    if not rows or tuple(c.strip() for c in rows[0]) != ACCEPTANCE_COLUMNS:
        raise ValueError(f"{where}: row 1: expected the header {','.join(ACCEPTANCE_COLUMNS)}")
    counts: dict[int, int] = {}
    measured = None
    for i, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):  # a blank line
            continue
        try:
            mk, emitted, n = (int(c) for c in row)
        except ValueError:
            raise ValueError(f"{where}: row {i}: expected three whole numbers "
                             f"({','.join(ACCEPTANCE_COLUMNS)}), got {','.join(row)[:60]!r}") from None
        if measured is not None and mk != measured:
            raise ValueError(f"{where}: row {i}: num_speculative_tokens {mk}, earlier rows {measured}")
        if mk < 1 or not 1 <= emitted <= mk + 1 or n < 0:
            raise ValueError(f"{where}: row {i}: expected num_speculative_tokens >= 1, emitted "
                             f"from 1 to num_speculative_tokens + 1, count >= 0")
        measured = mk
        counts[emitted] = counts.get(emitted, 0) + n
    if measured is None or not sum(counts.values()):
        raise ValueError(f"{where}: no verification counted")
    return from_counts(counts, measured, k, where)


def write_acceptance_file(path: str | Path, k: int, counts: dict[int, int]) -> None:
    """Write a measured histogram (tokens kept -> verifications) atomically."""
    lines = [",".join(ACCEPTANCE_COLUMNS)] + [f"{k},{e},{counts.get(e, 0)}" for e in range(1, k + 2)]
    atomic.write_text(path, "\n".join(lines) + "\n")


def draw(cumulative: tuple[float, ...], u: float) -> int:
    """Tokens kept (1..k+1) for a uniform draw u in [0, 1): the inverse of the distribution."""
    return bisect_right(cumulative, u) + 1
