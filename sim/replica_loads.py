"""least_loaded's choice kept up to date, not read off every replica at each arrival
(issue 48 item 2; sim/simulate.py uses it where runs are priced ahead).

Runs priced ahead (sim/pending_run.py), the load a router sees on a replica at t is its
requests outstanding less those of its pending run that finished before t (Replica.load).
That moves only when the replica's state does (a request submitted or finished, a run
priced, cut or applied), which the replica reports (`changed`), and as the clock passes
a finish of its pending run, known as the run is priced (PendingRun.steady_until).
LoadBoard keeps each replica's load in a heap keyed by (load, index) and reads again only
the replicas that moved: O(log replicas) a change, where reading every replica's run at
each arrival was O(replicas) a request (at 64 replicas a quarter of a request's
instructions). The choice is the scan's (router._least_loaded): the least (load, index)."""
from __future__ import annotations

import math
from heapq import heapify, heappop, heappush
from typing import Any

import simpy

from batchlab.sim.pending_run import PendingRun


class LoadBoard:
    """The loads of replicas 0..n-1 (positions in the router's list; `indices`, their
    Replica.index, break ties)."""

    def __init__(self, env: simpy.Environment, indices: list[int]) -> None:
        self.env = env
        n = len(indices)
        self._n = n
        order = sorted(range(n), key=lambda p: indices[p])
        self._at_rank = order  # rank in index order -> position
        self._rank = [0] * n
        for k in range(n):
            self._rank[order[k]] = k
        self._outstanding = [0] * n
        self._pending: list[PendingRun | None] = [None] * n
        # Each replica's key load * n + rank, and a heap of keys: an entry that is not
        # its replica's key any more is stale, dropped when it comes to the top.
        self._key = [-1] * n
        self._heap: list[int] = []
        # A heap of (time, position) in two lists: the replica's load may fall once the
        # clock is past the time (its pending run's next finish); _drop_at, the latest
        # such time for each (an entry with another is stale).
        self._drop_time: list[float] = []
        self._drop_pos: list[int] = []
        self._drop_at = [math.inf] * n
        self._moved = list(range(n))  # to read again before the next choice
        self._is_moved = [True] * n

    def changed(self, pos: int, outstanding: int, pending: PendingRun | None) -> None:
        """Replica `pos` now has `outstanding` requests and this pending run (None: none)."""
        self._outstanding[pos] = outstanding
        self._pending[pos] = pending
        if not self._is_moved[pos]:
            self._is_moved[pos] = True
            self._moved.append(pos)

    def pick(self, replicas: list[Any], _request: object) -> Any:
        """The router's call (sim/router.py): least_loaded's choice among `replicas`,
        the board's replicas in its order."""
        return replicas[self.least(self.env._now)]

    def least(self, now: float) -> int:
        """The position of the replica with the least (load, index) at `now`."""
        times, is_moved, moved = self._drop_time, self._is_moved, self._moved
        while times and times[0] < now:
            t, pos = times[0], self._drop_pos[0]
            self._pop_drop()
            if t == self._drop_at[pos] and not is_moved[pos]:
                is_moved[pos] = True
                moved.append(pos)
        if moved:
            for pos in moved:
                is_moved[pos] = False
                self._read(pos, now)
            moved.clear()
        heap, key, n = self._heap, self._key, self._n
        while True:
            k = heap[0]
            pos = self._at_rank[k % n]
            if key[pos] == k:
                return pos
            heappop(heap)

    def _read(self, pos: int, now: float) -> None:
        """Replica pos's load at `now` (as Replica.load reads it), and when it may fall."""
        load = self._outstanding[pos]
        pending = self._pending[pos]
        until = math.inf
        if pending is not None:
            m = pending.stop_for(now)
            load -= pending.finished_at(m)
            until = pending.steady_from(m, now)
        if until != self._drop_at[pos]:
            self._drop_at[pos] = until
            if until < math.inf:
                self._push_drop(until, pos)
        k = load * self._n + self._rank[pos]
        if k != self._key[pos]:
            self._key[pos] = k
            heap = self._heap
            if len(heap) > 4 * self._n + 64:  # mostly stale: start again from the keys
                heap[:] = [x for x in self._key if x >= 0]
                heapify(heap)
            else:
                heappush(heap, k)

    # The drops' heap, by time (ties in any order: a drop only has a replica read again).
    # Compiled, two lists of plain values: heapq's tuples compare through Python.

    def _push_drop(self, t: float, pos: int) -> None:
        times, poss = self._drop_time, self._drop_pos
        times.append(t)
        poss.append(pos)
        i = len(times) - 1
        while i > 0:
            up = (i - 1) >> 1
            if times[up] <= t:
                break
            times[i], poss[i] = times[up], poss[up]
            i = up
        times[i], poss[i] = t, pos

    def _pop_drop(self) -> None:
        """Drop the earliest."""
        times, poss = self._drop_time, self._drop_pos
        t, pos = times.pop(), poss.pop()
        n = len(times)
        if n == 0:
            return
        i = 0
        while True:  # the last entry sifts down from the top
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and times[child + 1] < times[child]:
                child += 1
            if times[child] >= t:
                break
            times[i], poss[i] = times[child], poss[child]
            i = child
        times[i], poss[i] = t, pos
