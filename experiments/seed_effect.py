"""What a workload's seed moves, so that repeating seeds is never three identical samples
called noise: a synthetic preset's seed moves generated arrivals and lengths; a trace's
moves only what is generated on top of it (--jitter, a length file's arrivals). Repeated
seeds that change nothing are refused with what to do instead."""
from __future__ import annotations

import numpy as np

from batchlab.core.workload import Workload, WorkloadConfig, build_workload
from batchlab.experiments.errors import UserError


def seed_effect(wl: WorkloadConfig, a: Workload | None = None, b: Workload | None = None) -> str:
    """What two consecutive seeds of wl change, in words ('' where nothing changes);
    a, b: those two workloads where the caller has built them."""
    a = a if a is not None else build_workload(wl.model_copy(update={"seed": wl.seed}))
    b = b if b is not None else build_workload(wl.model_copy(update={"seed": wl.seed + 1}))
    moved = []
    if len(a) != len(b) or not np.array_equal(a.arrival, b.arrival):
        moved.append(f"arrival jitter (+-{wl.jitter_s:g} s)" if wl.jitter_s else "arrivals")
    # as multisets: jitter reorders requests without changing their lengths
    if len(a) != len(b) or not (np.array_equal(np.sort(a.prompt_len), np.sort(b.prompt_len))
                                and np.array_equal(np.sort(a.output_len), np.sort(b.output_len))):
        moved.append("lengths")
    if moved and wl.resample:
        drawn = "requests" if wl.resample == "requests" else f"{wl.resample_block_s:g} s windows"
        return f"a bootstrap replicate of the trace (its {drawn} drawn with replacement)"
    return " and ".join(moved)


def check_seeds_vary(wl: WorkloadConfig, seeds: int, windows_option: str | None = None,
                     built: list[Workload] | None = None, seeds_option: str = "--seeds",
                     jitter_option: str = "--jitter S",
                     resample_option: str = "--resample requests|windows") -> str:
    """What the seeds vary ('' for one seed); a one-line error where they vary nothing,
    naming the options (as the caller spells them) that would vary something. built: the
    first two seeds' workloads, where already built."""
    if seeds < 2:
        return ""
    moved = seed_effect(wl, *(built or [])[:2])
    if not moved:
        instead = (f"{resample_option} (each seed a bootstrap replicate of the trace), "
                   f"{jitter_option} (each seed spreads arrivals within S seconds)")
        if windows_option:
            instead += f" or {windows_option} (W windows of the trace)"
        raise UserError(f"{seeds_option} {seeds} on {wl.source}: every seed gives the same requests (a "
                        f"trace replays its arrivals and lengths); vary something with {instead}, or "
                        f"give {seeds_option} 1")
    return f"the seed moves {moved}"
