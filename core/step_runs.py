"""A step table's fast-forward runs, kept as runs while the simulation records them and
expanded into rows once, when the table is read.

A run of m grouped decode steps (core/decode_group.py) has four values that vary by step
(its clock, batch size, KV read, KV blocks in use) and seventeen that are constant or
copies of those; writing all 21 columns row by row cost more than pricing the run. The
recorder keeps each run's lists (RunRows) and where it fell among the stepped rows;
`with_runs` builds the same rows, in the same order, with a few numpy calls."""
from __future__ import annotations

from array import array

import numpy as np


class RunRows:
    """One run's rows as the recorder was given them. (A plain class: this module is
    compiled with the hot path, where a named tuple's __new__ would run interpreted.)"""
    __slots__ = ("after", "replica", "times", "num_seqs", "kv_read", "kv_blocks_used", "kv_blocks_total",
                 "seats", "cached_blocks", "after_prefill", "after_idle")

    def __init__(self, after: int, replica: int, times: list[float], num_seqs: list[int], kv_read: list[int],
                 kv_blocks_used: list[int], kv_blocks_total: int, seats: int, cached_blocks: int,
                 after_prefill: int, after_idle: int) -> None:
        self.after = after  # stepped rows recorded before the run: its rows come after them
        self.replica = replica
        self.times = times  # m + 1: step j ran from times[j - 1] to times[j]
        self.num_seqs = num_seqs  # m each, as are kv_read and kv_blocks_used
        self.kv_read = kv_read
        self.kv_blocks_used = kv_blocks_used
        self.kv_blocks_total = kv_blocks_total
        self.seats = seats
        self.cached_blocks = cached_blocks
        self.after_prefill = after_prefill  # the run's first step's; the later ones follow a decode
        self.after_idle = after_idle


def flat(lists, typecode: str = "q") -> np.ndarray:
    """The lists, end to end, as an int64 ("q") or float64 ("d") array: through an array,
    as numpy converts a list at twice the work."""
    out: list = []
    for values in lists:
        out.extend(values)
    return np.frombuffer(array(typecode, out), dtype=np.float64 if typecode == "d" else np.int64)


def with_runs(stepped: dict[str, np.ndarray], runs: list[RunRows]) -> dict[str, np.ndarray]:
    """The step table's columns (stepped: the stepped rows, in recording order), with the
    runs' rows in the places they were recorded, as record_step would have written them."""
    lens = np.array([len(r.num_seqs) for r in runs], dtype=np.int64)
    n = int(lens.sum())
    times = flat((r.times for r in runs), "d")
    step = np.ones(len(times), bool)  # a time that starts a step (each run's last ends one)
    step[np.cumsum(lens + 1) - 1] = False
    first = np.cumsum(lens) - lens  # each run's first row

    def each(values) -> np.ndarray:
        return np.repeat(np.array(list(values), dtype=np.int64), lens)

    def at_first(values) -> np.ndarray:
        col = np.zeros(n, dtype=np.int64)
        col[first] = list(values)
        return col
    zeros = np.zeros(n, dtype=np.int64)
    num_seqs, kv = flat(r.num_seqs for r in runs), flat(r.kv_read for r in runs)
    rows = {"replica": each(r.replica for r in runs), "start_s": times[step],
            "duration_s": (times[1:] - times[:-1])[step[:-1]], "num_seqs": num_seqs,
            "num_prefill_seqs": zeros, "prefill_tokens": zeros, "decode_tokens": num_seqs,
            "kv_tokens_read": kv, "attention_pairs": kv, "num_preempted": zeros,
            "kv_blocks_used": flat(r.kv_blocks_used for r in runs),
            "kv_blocks_total": each(r.kv_blocks_total for r in runs), "seats": each(r.seats for r in runs),
            "cached_blocks": each(r.cached_blocks for r in runs),
            "after_prefill": at_first(r.after_prefill for r in runs),
            "after_idle": at_first(r.after_idle for r in runs), "masked_pairs": zeros,
            # grouped decodes are a window-free model's: windowed = full
            "window_kv_tokens_read": kv, "window_attention_pairs": kv,
            "prefill_attention_pairs": zeros, "prefill_self_pairs": zeros}
    assert rows.keys() == stepped.keys(), "step_runs: the step table's columns changed"
    # Recording order: stepped row i has key 2i + 1, a run after a stepped rows 2a (a
    # stable sort keeps runs after the same row in the order they came).
    after = np.repeat(np.array([r.after for r in runs], dtype=np.int64), lens)
    k = len(stepped["start_s"])
    order = np.argsort(np.concatenate((2 * after, 2 * np.arange(k, dtype=np.int64) + 1)), kind="stable")
    return {c: np.concatenate((rows[c], stepped[c]))[order] for c in stepped}
