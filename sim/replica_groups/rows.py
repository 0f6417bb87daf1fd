"""The request rows a group hands back (part.py to merge.py), in few bytes: what the run's
workload already says (each request's arrival, lengths and priority, and under
round-robin its replica) is read back from the workload by request id, text columns
travel as codes into their few values, and integers in the narrowest type that holds
them. unpack() rebuilds the table a single run writes, bit for bit (the same values,
types and column order; tests/test_replica_groups.py)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

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


def spare_columns(part: PackedRows, n: int) -> dict[str, np.ndarray]:
    """Columns of n rows, in the table's types, for the columns unpack() fills from the
    parts' own (not read back from the workload, not coded), every page written once:
    made while another group still runs, unpack() fills these rather than fresh ones,
    whose pages the kernel would zero in the parent's serial part."""
    out = {}
    for c in part.columns:
        if c not in FROM_WORKLOAD and c not in part.values:
            out[c] = np.empty(n, part.types[c])
            out[c].fill(0)
    return out


def unpack(parts: list[PackedRows], workload: Workload, replicas: int,
           groups: list[range] | None = None, spare: dict[str, np.ndarray] | None = None
           ) -> dict[str, np.ndarray]:
    """The groups' rows as one table by request id; `workload`: the whole run's.
    Consumes the parts' columns. Each part's rows are put at their places in the table, in
    its column's type: no concatenated copy, sort or cast of a whole column. groups: each
    part's replicas (merge.py), where known: when every request has its row, a part's are
    the ones round-robin deals it, copied in by stride, not scattered by id (_dealt).
    spare: spare_columns(), filled where their length and type fit (consumed)."""
    n = sum(len(p) for p in parts)
    spare = {} if spare is None else spare
    put = _dealt([p.columns["request_id"] for p in parts], groups, replicas, n) \
        if groups is not None and n == len(workload) else None
    ids = None
    if put is None:
        places = _places([p.columns["request_id"] for p in parts])
        ids = np.empty(n, np.int64)
        for p, at in zip(parts, places):
            ids[at] = p.columns["request_id"]
        put = functools.partial(_scatter, places)
    first = parts[0]
    out = {}
    for c in list(first.columns):
        if c in FROM_WORKLOAD:
            col = _table_column(_from_workload(c, ids, workload, replicas, n), first.types[c], workload)
        elif c in first.values:
            col = _decode([p.columns.pop(c) for p in parts], [p.values[c] for p in parts], put, n)
        else:
            made = spare.pop(c, None)
            if made is None or len(made) != n or made.dtype != first.types[c]:
                made = np.empty(n, first.types[c])
            col = put(made, [p.columns.pop(c) for p in parts])
        out[c] = col
    return out


Put = Callable[[np.ndarray, list], np.ndarray]  # fills a table's column from the parts' own


def _table_column(col: np.ndarray, kind: np.dtype, workload: Workload) -> np.ndarray:
    """col in the table's type: made for the table (a gather, the replicas' indices) it
    is the table's own; the workload's own column (every request has its row) is read
    through a view that cannot write it, not copied (at 10M rows: 80 MB a column, and
    its pages faulted in, in the parent's serial part)."""
    if col.dtype != kind:
        return col.astype(kind)
    if any(col is w for w in (workload.arrival, workload.prompt_len, workload.output_len, workload.priority)):
        view = col.view()
        view.flags.writeable = False
        return view
    return col


def _scatter(places: list[np.ndarray], out: np.ndarray, cols: list) -> np.ndarray:
    for col, at in zip(cols, places):
        out[at] = col
    return out


def _dealt(ids: list[np.ndarray | None], groups: list[range], replicas: int, n: int) -> Put | None:
    """Where the parts' ids are the n requests as round-robin deals them to consecutive
    groups (each part every one of its group's, ascending): the table's rows as rounds of
    `replicas`, a part's the columns of its group in each round (None: not so)."""
    if [g.start for g in groups] != [0, *(g.stop for g in groups[:-1])] or groups[-1].stop != replicas:
        return None
    rounds, extra = divmod(n, replicas)
    for g, i in zip(groups, ids):
        dealt = rounds * len(g) + max(0, min(g.stop, extra) - g.start)
        if i is None or len(i) != dealt or (dealt > 1 and not (i[1:] > i[:-1]).all()):
            return None  # (a part's ids are its group's by construction: part.py global_ids)

    def put(out: np.ndarray, cols: list) -> np.ndarray:
        table = out[:rounds * replicas].reshape(rounds, replicas)
        for g, col in zip(groups, cols):
            size, whole = len(g), rounds * len(g)
            table[:, g.start:g.stop] = col[:whole].reshape(rounds, size)
            out[rounds * replicas + g.start:rounds * replicas + g.start + len(col) - whole] = col[whole:]
        return out
    return put


def _places(ids: list[np.ndarray]) -> list[np.ndarray]:
    """Each part's rows' places in the table by request id (ids distinct): the id itself
    where the ids are 0..n-1 (every request has its row), else its rank."""
    n = sum(len(i) for i in ids)
    if n and max(int(i.max()) for i in ids if len(i)) == n - 1:
        seen = np.zeros(n, bool)
        for i in ids:
            seen[i] = True
        if seen.all():
            return [i.astype(np.int64) for i in ids]
    every = np.concatenate([i.astype(np.int64) for i in ids])
    rank = np.empty(n, np.int64)
    rank[np.argsort(every, kind="stable")] = np.arange(n)
    return np.split(rank, np.cumsum([len(i) for i in ids])[:-1])


def _from_workload(c: str, ids: np.ndarray | None, workload: Workload, replicas: int, n: int) -> np.ndarray:
    """Column c of rows `ids`; None: of every request, in order (the workload's own column:
    the caller copies it)."""
    if c == "replica":
        if ids is None:
            return np.tile(np.arange(replicas, dtype=np.int64), -(-n // replicas))[:n]
        return ids % replicas
    if c == "priority" and workload.priority is None:  # a request without one has priority 0
        return np.zeros(n, dtype=np.int64)
    column = {"arrival_s": workload.arrival, "prompt_len": workload.prompt_len,
              "output_len": workload.output_len, "priority": workload.priority}[c]
    return column if ids is None else column[ids]


def _codes(col: np.ndarray) -> tuple[np.ndarray, list]:
    """A column of few distinct values (status, reject reason): codes into them."""
    values = list(set(col.tolist()))
    codes = np.zeros(len(col), dtype=np.int16 if len(values) > 127 else np.int8)
    for i, v in enumerate(values[1:], 1):  # the first value's rows keep code 0
        codes[col == v] = i  # elementwise ==, None included
    return codes, values


def _decode(codes: list[np.ndarray], values: list[list], put: Put, n: int) -> np.ndarray:
    """The groups' coded columns (each part's codes into its own values), each row put at
    its place (put), as one column of the values' objects."""
    table: dict = {}
    for vs in values:
        for v in vs:
            table.setdefault(v, len(table))
    if len(table) == 1:  # every row the one value (a status where all finished), one object
        one = np.empty(n, dtype=object)
        one.fill(next(iter(table)))  # (np.full would make a str object a row)
        return one
    merged = put(np.empty(n, np.int64), [np.array([table[v] for v in vs], dtype=np.int64)[c]
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
