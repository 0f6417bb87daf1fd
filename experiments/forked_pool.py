"""A local process pool whose workers are forked from this process after the objects it
holds were registered (experiments/executor.py make_executor's `hold`): each worker starts
with them in its memory, so a task names one by key (executor.held) rather than carrying
it: the parent pickles and sends nothing of it, and no worker waits for another's share
to go through the pipe they read in turn."""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Callable


def forks() -> bool:
    """Whether a local pool's workers are forked here (Linux's default start method
    before Python 3.14): only then do they start with this process's memory."""
    return multiprocessing.get_start_method() == "fork"


class ForkedPool(ProcessPoolExecutor):
    """held_keys: the keys of the objects its workers inherit (executor._HELD)."""

    def __init__(self, workers: int, held_keys: set[int], initializer: Callable[[int], None], parent: int) -> None:
        self.held_keys = frozenset(held_keys)
        super().__init__(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                         initializer=initializer, initargs=(parent,))
