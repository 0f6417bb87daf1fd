"""The requests round robin deals to one replica, made from the workload's columns: a
replica run apart (sim/apart.py) pulls its own, every `every`-th from its index on."""
from __future__ import annotations

from batchlab.core.request import Request
from batchlab.core.workload import Workload


def dealt_block(workload: Workload, first: int, every: int, n: int) -> list[Request]:
    """Requests first, first + every, ... (n of them), each with its own id: the objects
    workload.request_block makes for them (a compiled loop, columns read in one go)."""
    stop = first + every * (n - 1) + 1
    arrival = workload.arrival[first:stop:every].tolist()
    prompt = workload.prompt_len[first:stop:every].tolist()
    output = workload.output_len[first:stop:every].tolist()
    priority = workload.priority[first:stop:every].tolist() if workload.priority is not None else [0] * n
    hashes = workload.prefix_hashes[first:stop:every] if workload.prefix_hashes is not None else [None] * n
    size = workload.hash_block_size
    out: list[Request] = []
    for j in range(n):  # a for statement: a comprehension's range is a Python call
        out.append(Request(first + every * j, arrival[j], prompt[j], output[j], None, priority[j],
                           hashes[j], size))
    return out
