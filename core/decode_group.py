"""The running sequences that decode, kept lazily on one shared decode clock.

In a decode step every decoding sequence gains one token (a width-1 emission, core/emission.py:
wider ones are never grouped), needs a new KV block every
block_size tokens, and finishes after a known number of steps. Updating each one's
counters every step costs O(batch) per step; the simulator (fast-forward mode) instead
keeps them as a group with a clock `tick` (steps the group has decoded) and aggregates:
members sorted by the tick they finish at, members counted by the tick residue at
which they need a block, and the sum of their cached tokens. A step, or a run of steps,
then costs O(sequences that finish), not O(batch).

A member that joined at tick J with counters (c, g) has, at tick T, computed c + T - J
tokens and generated g + T - J. Its table is tight when it joins (it holds exactly
ceil(c / block_size) blocks, as every step reserves just what it processes), so the step
from tick T needs a block for it iff (c - J + T) % block_size == 0. Blocks taken for
members sit in `owed` until a member is materialised (when it finishes, or when the
scheduler needs every counter: release()); block ids may then differ from stepping's,
the counts never do.

With a sliding window (window > 0), the members' windowed reads are kept as well
(core/decode_window.py), and runs are priced by them.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from itertools import accumulate
from typing import Callable

from batchlab.core.cost.form import CostModel
from batchlab.core.decode_window import WindowReads
from batchlab.core.fast_forward import DecodeRun, decode_run, window_decode_run
from batchlab.core.kv import BlockManager
from batchlab.core.request import Sequence


class DecodeGroup:
    def __init__(self, block_size: int, order: Callable[[Sequence], tuple], window: int = 0) -> None:
        self.block_size = block_size
        self.window = window  # the model's sliding window (0: none)
        self._window = WindowReads(window) if window else None
        self._order = order  # protection order: finishes at one tick leave in it
        self.tick = 0
        # (finish tick, order key, admit_order, base = computed - joined tick, seq),
        # sorted; admit_order is unique, so sequences are never compared.
        self._by_finish: list[tuple[int, tuple, int, int, Sequence]] = []
        self._phase = [0] * block_size  # members by tick residue of their block needs
        self._base_sum = 0
        self.owed: list[int] = []  # KV blocks taken for members, not yet in their tables
        self.last = -1.0  # token time of the members that took part in the last tick
        self.fresh: list[Sequence] = []  # joined since the last tick: own last_token
        self.now = -1.0  # when the step being formed starts (the simulator sets it)

    @property
    def size(self) -> int:
        return len(self._by_finish)

    @property
    def kv_sum(self) -> int:
        """Tokens cached over all members: what the next step's decodes read (less one each)."""
        return self._base_sum + len(self._by_finish) * self.tick

    def window_read(self) -> int:
        """Windowed KV slots (and pairs) the next step's decodes read (0 without a window)."""
        w = self._window
        return w.read(self.tick, len(self._by_finish)) if w is not None else 0

    def steps_left(self) -> tuple[int, int]:
        """Steps until the first member finishes, and until the last one does."""
        return self._by_finish[0][0] - self.tick, self._by_finish[-1][0] - self.tick

    def join(self, seq: Sequence) -> None:
        t, c = self.tick, seq.num_computed
        base = c - t
        seq.group_tick = t
        finish = t + seq.request.output_len - seq.num_generated
        insort(self._by_finish, (finish, self._order(seq), seq.admit_order, base, seq))
        if self._window is not None:
            self._window.join(base, seq.admit_order, finish)
        self._phase[-base % self.block_size] += 1
        self._base_sum += base
        self.fresh.append(seq)

    def gaps_as_stepped(self) -> bool:
        """Whether the next step's inter-token gaps, recorded for the group
        (MetricsRecorder._group_gaps), are the very entries a step of the same decodes
        without a group records: those whose previous token came at `now` in one entry,
        and at most one other. A windowed model's group is used only then, so that its
        summary keeps the bits it had when it was stepped (float sums run in entry order)."""
        now = self.now
        if len(self._by_finish) > len(self.fresh) and self.last != now:
            return False  # the old members' gaps would be one entry, not one each
        others = 0
        for seq in self.fresh:
            if seq.last_token != now:
                others += 1
        return others <= 1

    def reserve(self, kv: BlockManager) -> bool:
        """Take the blocks the next step needs, if free (else False: nothing taken)."""
        need = self._phase[self.tick % self.block_size]
        if need > kv.num_free:
            return False
        if need:
            self.owed += kv.take(need)
        return True

    def step(self) -> list[Sequence]:
        """One decode step of every member (its blocks reserved): those that finish."""
        self.tick += 1
        entries = self._by_finish
        if entries[0][0] != self.tick:
            return []
        n = _before(entries, self.tick + 1)
        done = entries[:n]
        del entries[:n]
        return [self._leave(e) for e in done]

    def release(self) -> list[Sequence]:
        """Materialise every member and empty the group (the scheduler takes over)."""
        t, members = self.tick, [e[4] for e in self._by_finish]
        for seq in members:
            if seq.group_tick != t:  # took part in the last tick
                seq.last_token = self.last
            self._materialise(seq, t)
        assert not self.owed, "decode group: blocks owed to no member"
        self._by_finish, self._phase, self._base_sum = [], [0] * self.block_size, 0
        if self._window is not None:
            self._window.clear()
        self.fresh = []
        return members

    # -- runs of steps (fast-forward) ----------------------------------------------
    def price(self, cost: CostModel, k: int, context: tuple[int, int] = (0, 0),
              rows: bool = True, t0: float = 0.0) -> DecodeRun:
        """Durations (and times from t0), sizes and KV reads of the next k steps (k <= last
        finish); context: the first one's (after_prefill, after_idle), core/features.py.
        rows=False: no KV reads (fast_forward.decode_run and window_decode_run)."""
        if self._window is not None:
            return self._window_price(cost, k, context, t0, rows)
        t, entries = self.tick, self._by_finish
        # Members finishing before step k, grouped by their last step (entries are in
        # finish order): the stretches of equal batch size between them.
        stops: list[int] = []
        counts: list[int] = []
        c_sums: list[int] = []
        for i in range(_before(entries, t + k)):
            f, _, _, base, _ = entries[i]
            if not stops or stops[-1] != f - t:
                stops.append(f - t)
                counts.append(0)
                c_sums.append(0)
            counts[-1] += 1
            c_sums[-1] += base + t
        return decode_run(cost, self.size, self.kv_sum, stops, counts, c_sums, k, context[0], context[1],
                          rows, t0)

    def _window_price(self, cost: CostModel, k: int, context: tuple[int, int], t0: float,
                      rows: bool = True) -> DecodeRun:
        """price() with windowed reads: the batch changes where members finish (as
        without a window) and its windowed reads' slope where open members fill."""
        t, entries, reads = self.tick, self._by_finish, self._window
        assert reads is not None
        w1 = reads.window - 1
        reads.settle(t)
        open_n, open_base = reads.count, reads.base_sum
        # What changes at the start of step j: (j, members, cached tokens, open members,
        # their bases) leaving; none at step 1.
        changes: list[tuple[int, int, int, int, int]] = []
        for i in range(_before(entries, t + k)):
            f, _, _, base, _ = entries[i]
            if f <= w1 - base:  # still open in its last step, f - t (from tick f - 1)
                changes.append((f - t + 1, 1, base + t, 1, base))
            else:
                changes.append((f - t + 1, 1, base + t, 0, 0))
        for fill, _, f in reads.fills(t, k):
            if f > fill:  # it runs in the step from its fill tick: full from that step on
                changes.append((fill - t + 1, 0, 0, 1, w1 - fill))
        changes.sort()
        return window_decode_run(cost, self.size, self.kv_sum, open_n, open_base, t, reads.window,
                                 changes, k, context[0], context[1], t0, rows)

    def kv_steps(self, m: int, free: int) -> int:
        """How many of the next m steps (the first one's blocks already reserved) fit
        in `free` blocks, not counting blocks that finishing members give back."""
        if self.size * -(-(m - 1) // self.block_size) <= free:
            return m
        taken = list(accumulate(self._taken(m)))
        return bisect_left(taken, free + 1)  # taken[0] = 0: at least 1

    def advance(self, m: int, kv: BlockManager, rows: bool = True) -> tuple[list[int], list[tuple[Sequence, int]]]:
        """Apply the next m steps (the first one's blocks reserved): the KV blocks in use
        at each step, after its allocation, and the members that finish with their step
        (materialised, still running: the scheduler retires them). rows=False: instead of
        a count a step, their sum alone, as a list of one (what a recorder without a step
        table keeps)."""
        t = self.tick
        if rows:
            diffs = self._taken(m)
            total = weighted = 0
            for d in diffs:
                total += d
        else:  # diffs[i] would weigh in m - i of the counts: summed so, without a list
            diffs = []
            total, weighted = self._taken_sums(m)
        used = kv.num_used
        if total:
            self.owed += kv.take(total)
        entries = self._by_finish
        n = _before(entries, t + m + 1)
        leaving = entries[:n]
        del entries[:n]
        done = [(self._leave(e), e[0] - t) for e in leaving]
        # Given back after each one's last step (a shared cached block by the last
        # member to drop it); `leaving` is in finish order, as the scheduler frees them.
        freed = kv.freed_in_order([seq.block_table for seq, _ in done])
        for (seq, step), blocks in zip(done, freed):
            if step < m:
                if rows:
                    diffs[step] -= blocks
                else:
                    weighted -= blocks * (m - step)
        self.tick = t + m
        in_use: list[int] = []
        if rows:
            for d in diffs:
                used += d
                in_use.append(used)
        else:
            in_use.append(m * used + weighted)
        return in_use, done

    def _taken_sums(self, m: int) -> tuple[int, int]:
        """_taken(m)'s sum, and its sum with the i-th weighted by m - i (the steps whose
        count of blocks in use it is part of), without the list: between finishes the
        members' needs cycle with the block size, summed in closed form (_cycle_sums)."""
        t, bs = self.tick, self.block_size
        total = weighted = 0
        if len(self._by_finish) < bs:  # member by member: fewer terms than the residues
            first = (t + 1) % bs  # the residue of step 2
            for f, _, _, base, _ in self._by_finish:
                last = f - t if f - t < m else m  # it takes blocks in steps 2..last
                s0 = 2 + (-base % bs - first) % bs  # the first of them at its residue
                if s0 <= last:
                    q = (last - s0) // bs + 1
                    total += q
                    weighted += q * (m + 1 - s0) - bs * (q * (q - 1) // 2)
            return total, weighted
        phase = self._phase[:]
        j = 2  # next step to count; step j runs from tick t + j - 1 (index j - 1)
        for f, _, _, base, _ in self._by_finish[:_before(self._by_finish, t + m)]:
            r = f - t  # its last step: from r + 1 on it takes nothing
            if r >= j:
                more, more_weighted = _cycle_sums(phase, t, j, r, m)
                total, weighted, j = total + more, weighted + more_weighted, r + 1
            phase[-base % bs] -= 1
        if m >= j:
            more, more_weighted = _cycle_sums(phase, t, j, m, m)
            total, weighted = total + more, weighted + more_weighted
        return total, weighted

    def _taken(self, m: int) -> list[int]:
        """Blocks taken at each of the next m steps (0 at the first: reserved)."""
        t, bs = self.tick, self.block_size
        phase = self._phase[:]
        out = [0]
        j = 2  # next step to fill; step j runs from tick t + j - 1
        for f, _, _, base, _ in self._by_finish[:_before(self._by_finish, t + m)]:
            r = f - t  # its last step: from r + 1 on it takes nothing
            if r >= j:
                out += _cycle(phase, t + j - 1, r - j + 1)
                j = r + 1
            phase[-base % bs] -= 1
        if m >= j:
            out += _cycle(phase, t + j - 1, m - j + 1)
        return out

    # -- members ---------------------------------------------------------------------
    def _leave(self, entry: tuple[int, tuple, int, int, Sequence]) -> Sequence:
        f, _, _, base, seq = entry
        self._phase[-base % self.block_size] -= 1
        self._base_sum -= base
        if self._window is not None:
            self._window.leave(base, seq.admit_order)
        self._materialise(seq, f)
        return seq

    def _materialise(self, seq: Sequence, t: int) -> None:
        """Counters as of tick t, and the blocks they need from `owed`."""
        d = t - seq.group_tick
        seq.num_computed += d
        seq.num_generated += d
        seq.group_tick = -1
        need = -(-seq.num_computed // self.block_size) - len(seq.block_table)
        if need:
            seq.block_table += self.owed[-need:]
            del self.owed[-need:]


def _before(entries: list[tuple[int, tuple, int, int, Sequence]], tick: int) -> int:
    """How many entries (in finish order) finish before `tick`: bisect_left(entries,
    (tick,)) by a scan, as its callers then walk those entries anyway (compiled, a
    bisect compares the tuples through Python)."""
    n = 0
    for e in entries:
        if e[0] >= tick:
            break
        n += 1
    return n


def _cycle_sums(phase: list[int], t: int, a: int, b: int, m: int) -> tuple[int, int]:
    """Over steps a..b (step s takes phase[(t + s - 1) % len(phase)] blocks): the blocks
    taken, and their sum weighted by m - s + 1. A residue's steps are s0, s0 + bs, ...:
    q of them, weights summing to q (m + 1 - s0) - bs q (q - 1) / 2."""
    bs = len(phase)
    total = weighted = 0
    first = (t + a - 1) % bs  # the residue of step a
    for rho in range(bs):
        c = phase[rho]
        if c:
            s0 = a + (rho - first) % bs
            if s0 <= b:
                q = (b - s0) // bs + 1
                total += c * q
                weighted += c * (q * (m + 1 - s0) - bs * (q * (q - 1) // 2))
    return total, weighted


def _cycle(phase: list[int], start: int, length: int) -> list[int]:
    """phase[(start + i) % len(phase)] for i in range(length)."""
    size = len(phase)
    out: list[int] = []
    for i in range(length):  # a for statement: compiled, a comprehension's range is a Python call
        out.append(phase[(start + i) % size])
    return out
