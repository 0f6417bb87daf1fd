"""A decode group's reads within a sliding window (core/decode_group.py), kept lazily so
that a windowed model's steps and runs cost what a window-free model's do.

A decode of a sequence holding c cached tokens reads min(c + 1, W) slots of a layer with
window W (core/features.py window_reads; as many pairs). A member with base b (computed
less its joining tick, decode_group.py) holds b + T tokens at tick T, so the step from
tick T reads min(b + T + 1, W) for it: b + T + 1 while T < W - 1 - b (it is *open*), W
from then on (*full*). WindowReads keeps the open members sorted by the tick they fill
at, with their count and base sum; a step's windowed read is then
    base_sum + count * (T + 1) + (members - count) * W,
and a run of steps changes slope only where a member fills or leaves."""
from __future__ import annotations

from bisect import bisect_left, insort


class WindowReads:
    __slots__ = ("window", "_open", "count", "base_sum")

    def __init__(self, window: int) -> None:
        self.window = window
        # (fill tick = W - 1 - base, admit_order, finish tick), sorted; admit_order is unique.
        self._open: list[tuple[int, int, int]] = []
        self.count = 0  # members in _open
        self.base_sum = 0  # their bases

    def join(self, base: int, admit_order: int, finish: int) -> None:
        """A member joins (whatever the tick: settle() drops the full ones)."""
        insort(self._open, (self.window - 1 - base, admit_order, finish))
        self.count += 1
        self.base_sum += base

    def leave(self, base: int, admit_order: int) -> None:
        """A member leaves the group (finished, or the group released)."""
        key = (self.window - 1 - base, admit_order)
        entries = self._open
        i = bisect_left(entries, key)
        if i < len(entries) and entries[i][0] == key[0] and entries[i][1] == admit_order:
            del entries[i]
            self.count -= 1
            self.base_sum -= base

    def clear(self) -> None:
        self._open, self.count, self.base_sum = [], 0, 0

    def settle(self, tick: int) -> None:
        """Drop the members full at `tick` (their read is W from the step from it on)."""
        entries = self._open
        n = 0
        w1 = self.window - 1
        for e in entries:  # a for statement: compiled, no iterator object per member
            if e[0] > tick:
                break
            n += 1
            self.count -= 1
            self.base_sum -= w1 - e[0]
        if n:
            del entries[:n]

    def read(self, tick: int, members: int) -> int:
        """The windowed KV read (and pairs) of every member's decode in the step from `tick`."""
        self.settle(tick)
        return self.base_sum + self.count * (tick + 1) + (members - self.count) * self.window

    def fills(self, tick: int, k: int) -> list[tuple[int, int, int]]:
        """(fill tick, admit_order, finish tick) of the open members that fill during
        steps 2..k from `tick` (settled there): step j runs from tick + j - 1, so a fill
        tick s is step s - tick + 1."""
        entries = self._open
        out: list[tuple[int, int, int]] = []
        last = tick + k - 1
        for e in entries:
            if e[0] > last:
                break
            out.append(e)
        return out
