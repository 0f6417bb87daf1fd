"""The request rows a group hands back (part.py to merge.py), in few bytes: what the run's
workload already says (each request's arrival, lengths and priority, and under
round-robin its replica) is read back from the workload by request id, text columns
travel as codes into their few values, and integers in the narrowest type that holds
them. unpack() rebuilds the table a single run writes, bit for bit (the same values,
types and column order; tests/test_replica_groups.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.core.workload import Workload

# Columns read back from the workload by request id (request i: the i-th row), and the
# replica, i mod replicas under round-robin.
FROM_WORKLOAD = ("replica", "arrival_s", "prompt_len", "output_len", "priority")
NARROW = (np.int8, np.int16, np.int32)


@dataclass
class PackedRows:
    """A group's request rows by request id, without the FROM_WORKLOAD columns."""
    columns: dict[str, np.ndarray | None]  # every column of the table, in order (None: read back)
    types: dict[str, np.dtype]  # each column's type in the table
    values: dict[str, list]  # a text column's distinct values, which its codes index

    def __len__(self) -> int:
        ids = self.columns["request_id"]
        return 0 if ids is None else len(ids)


def pack(requests: dict[str, np.ndarray]) -> PackedRows:
    """Consumes `requests` (a recorder's request table): each column let go once packed."""
    columns: dict[str, np.ndarray | None] = {}
    types, values = {}, {}
    for c in list(requests):
        col = requests.pop(c)
        types[c] = col.dtype
        if c in FROM_WORKLOAD:
            columns[c] = None
        elif col.dtype == object:
            columns[c], values[c] = _codes(col)
        elif col.dtype.kind == "i":
            columns[c] = _narrow(col)
        else:
            columns[c] = col
    return PackedRows(columns, types, values)


def unpack(parts: list[PackedRows], workload: Workload, replicas: int) -> dict[str, np.ndarray]:
    """The groups' rows as one table by request id; `workload`: the whole run's.
    Consumes the parts' columns."""
    ids = np.concatenate([p.columns["request_id"].astype(np.int64) for p in parts])
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    first = parts[0]
    out = {}
    for c in list(first.columns):
        if c in FROM_WORKLOAD:
            col = _from_workload(c, ids, workload, replicas)
        elif c in first.values:
            col = _decode([p.columns.pop(c) for p in parts], [p.values[c] for p in parts])[order]
        else:
            col = np.concatenate([p.columns.pop(c) for p in parts])[order]
        out[c] = col.astype(first.types[c], copy=False)
    return out


def _from_workload(c: str, ids: np.ndarray, workload: Workload, replicas: int) -> np.ndarray:
    if c == "replica":
        return ids % replicas
    if c == "arrival_s":
        return workload.arrival[ids]
    if c == "prompt_len":
        return workload.prompt_len[ids]
    if c == "output_len":
        return workload.output_len[ids]
    if workload.priority is None:  # a request without one has priority 0
        return np.zeros(len(ids), dtype=np.int64)
    return workload.priority[ids]


def _codes(col: np.ndarray) -> tuple[np.ndarray, list]:
    """A column of few distinct values (status, reject reason): codes into them."""
    values = list(set(col.tolist()))
    codes = np.zeros(len(col), dtype=np.int16 if len(values) > 127 else np.int8)
    for i, v in enumerate(values):
        codes[col == v] = i  # elementwise ==, None included
    return codes, values


def _decode(codes: list[np.ndarray], values: list[list]) -> np.ndarray:
    """The groups' coded columns (each part's codes into its own values) as one column of
    the values' objects."""
    table: dict = {}
    for vs in values:
        for v in vs:
            table.setdefault(v, len(table))
    merged = np.concatenate([np.array([table[v] for v in vs], dtype=np.int64)[c]
                             for c, vs in zip(codes, values)])
    lookup = np.empty(len(table), dtype=object)
    lookup[:] = list(table)
    return lookup[merged]


def _narrow(col: np.ndarray) -> np.ndarray:
    """An integer column in the narrowest type that holds its values."""
    if not len(col):
        return col
    lo, hi = int(col.min()), int(col.max())
    for t in NARROW:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return col.astype(t)
    return col
