"""Which replicas go together, and the requests a group of them is dealt."""
from __future__ import annotations

import numpy as np

from batchlab.core.front_end import FrontEnd
from batchlab.core.workload import Workload


def check_splittable(router: str, workload: Workload, front_end: FrontEnd | None = None,
                     speculative: bool = False, kv_tier: bool = False) -> None:
    """ValueError (one line) where the replicas' runs depend on each other."""
    why = None
    if router != "round_robin":
        why = f"router {router!r} reads every replica's state"
    elif workload.max_concurrency:
        why = "a closed loop (max_concurrency) sends a request when any replica replies"
    elif front_end is not None and not front_end.empty:
        why = "the profile's front end serves every replica's requests in turn"
    elif speculative:
        why = "speculative decoding's acceptance is drawn from one stream for all replicas"
    elif kv_tier:
        why = "a KV tier's totals are not merged across groups yet"
    if why:
        raise ValueError(f"replicas run apart only when they do not depend on each other: {why}")


def replica_groups(replicas: int, groups: int) -> list[range]:
    """Replicas 0..replicas-1 in at most `groups` runs of consecutive indices, sizes
    differing by one at most (the larger first)."""
    n = max(1, min(groups, replicas))
    size, extra = divmod(replicas, n)
    out, lo = [], 0
    for g in range(n):
        hi = lo + size + (g < extra)
        out.append(range(lo, hi))
        lo = hi
    return out


def dealt(n: int, replicas: int, group: range) -> np.ndarray:
    """The indices of the requests (of n) that round-robin deals to `group`, in order."""
    rounds = -(-n // replicas)
    idx = (np.arange(rounds, dtype=np.int64)[:, None] * replicas
           + np.arange(group.start, group.stop, dtype=np.int64)[None, :]).ravel()
    return idx[idx < n]


def group_workload(workload: Workload, replicas: int, group: range) -> Workload:
    """The requests dealt to `group`: a run of len(group) replicas on them deals each to
    the replica it had (the k-th goes to the group's k mod len(group)-th)."""
    return workload.take(dealt(len(workload), replicas, group))


class Share:
    """The requests round-robin deals to a group (group_workload), taken from the whole
    workload when asked for, and when pickled: a task sent to another process carries
    the group's requests alone, and its sender holds no copy of them meanwhile."""

    def __init__(self, workload: Workload, replicas: int, group: range, taken: bool = False) -> None:
        self._workload, self.replicas, self.group, self._taken = workload, replicas, group, taken

    def requests(self) -> Workload:
        return self._workload if self._taken else group_workload(self._workload, self.replicas, self.group)

    def __len__(self) -> int:
        if self._taken:
            return len(self._workload)
        rounds, extra = divmod(len(self._workload), self.replicas)
        return rounds * len(self.group) + len(range(self.group.start, min(self.group.stop, extra)))

    def __reduce__(self) -> tuple:
        return (Share, (self.requests(), self.replicas, self.group, True))


def global_ids(local: np.ndarray, replicas: int, group: range) -> np.ndarray:
    """The run's request ids of a group's requests 0, 1, ... (dealt() of them, in order)."""
    size = len(group)
    return (local // size) * replicas + group.start + local % size
