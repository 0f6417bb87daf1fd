"""Where independent simulations run: one seam, concurrent.futures-style (submit ->
Future), so that a sweep or a capacity search runs the same code serially, on a local
process pool (the default: every core) or on a Dask cluster (`--dask ADDRESS`, or
`--dask local` for a LocalCluster; the `distributed` extra). Another backend (Ray) is
one more branch in make_executor returning a concurrent.futures.Executor.

Results do not depend on the executor: every task is a pure function of its arguments
(seeded workloads, deterministic schedulers), and callers order results by task, never
by completion. Every executor hands each result over as it finishes (a serial run too),
so that a caller can write it at once; a local pool's workers end with their parent,
even one killed with kill -9."""
from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import threading
from concurrent.futures import Executor, Future, as_completed
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from batchlab.experiments.errors import UserError
from batchlab.experiments.process_memory import keep_freed_memory

DASK_TIMEOUT_S = 10


class SerialExecutor(Executor):
    """Runs each task at submit, in this process: the reference the others must equal."""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            f.set_exception(e)
        return f


def add_executor_options(parser: argparse.ArgumentParser,
                         workers_help: str = "local processes (default: every core; 1: serial, in this process)"
                         ) -> None:
    g = parser.add_argument_group("execution")
    g.add_argument("--workers", type=int, metavar="N", help=workers_help)
    g.add_argument("--dask", metavar="ADDRESS|local",
                   help="run on a Dask cluster (tcp://host:8786), or 'local' for a LocalCluster "
                        "of --workers workers; needs pip install 'batchlab[distributed]'")


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# The objects a forked pool's workers find in memory (experiments/forked_pool.py), by key:
# put here in the parent before they are forked.
_HELD: dict[int, Any] = {}


def held(executor: Executor, obj: object) -> int | None:
    """The key by which `executor`'s workers find `obj` in their own memory (None: they
    do not hold it: a task must carry it)."""
    keys = getattr(executor, "held_keys", None)  # a ForkedPool's
    return None if keys is None or id(obj) not in keys else id(obj)


def inherited(key: int) -> Any:
    """In a ForkedPool's worker: the object the parent held under `key`."""
    try:
        return _HELD[key]
    except KeyError:
        raise RuntimeError("a task names an object its process did not inherit (not a "
                           "forked worker of the pool that held it)") from None


@contextmanager
def make_executor(workers: int | None = None, dask: str | None = None,
                  hold: list | None = None) -> Iterator[tuple[Executor, str]]:
    """(executor, a description of it for the output). hold: objects a local pool's
    workers should have in memory (held() names them in a task) where the pool forks its
    workers (the default start method is fork: Linux before Python 3.14); elsewhere its
    tasks carry them."""
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if dask:
        with _dask(dask, workers) as ex:
            yield ex
        return
    n = workers or cores()
    if n == 1:
        yield SerialExecutor(), "serial (1 process)"
        return
    from concurrent.futures import ProcessPoolExecutor  # lazy: multiprocessing, only for a local pool

    from batchlab.experiments.forked_pool import ForkedPool, forks  # lazy: the same

    if hold and forks():
        _HELD.update((id(obj), obj) for obj in hold)
        try:
            with ForkedPool(n, {id(obj) for obj in hold}, die_with_parent, os.getpid()) as forked:
                yield forked, f"process pool ({n} workers)"
        finally:
            for obj in hold:
                _HELD.pop(id(obj), None)
        return
    with ProcessPoolExecutor(max_workers=n, initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
        yield pool, f"process pool ({n} workers)"


_PARENT_POLL_S = 0.5
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """In a pool worker: end this process when `parent` ends, however it ends. Linux
    sends SIGKILL at the parent's death (prctl PR_SET_PDEATHSIG); everywhere, a thread
    also checks the parent is still ours (a parent gone before prctl, other systems)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(_PARENT_POLL_S)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


@contextmanager
def _dask(address: str, workers: int | None) -> Iterator[tuple[Executor, str]]:
    try:
        from distributed import Client, LocalCluster  # lazy: dask, only with --dask
    except ImportError:
        raise UserError("--dask needs Dask: pip install 'batchlab[distributed]'") from None
    # Dask logs each worker and comm it closes at shutdown as a warning: not ours to show.
    logging.getLogger("distributed").setLevel(logging.ERROR)
    if address == "local":
        n = workers or cores()
        # Processes, one thread each: simulations hold the GIL.
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            yield client.get_executor(), f"Dask LocalCluster ({n} workers)"
        return
    try:
        client = Client(address, timeout=DASK_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"--dask {address}: no Dask scheduler answered within "
                        f"{DASK_TIMEOUT_S} s ({reason[:120]})") from None
    with client:
        n = len(client.scheduler_info().get("workers", {}))
        yield client.get_executor(), f"Dask cluster at {address} ({n} workers)"


def run_all(executor: Executor, fn: Callable, tasks: list, on_done: Callable[[int, Any], None] | None = None,
            wait_out_ctrl_c: bool = False) -> list:
    """fn(task) for every task; results in task order; on_done(i, result) as each ends
    (in a serial run, before the next one starts). wait_out_ctrl_c: tasks that keep what
    they did when interrupted (keep_on_interrupt) are waited for after a Ctrl-C in this
    process: the terminal sent it to their processes too (one process group), and each
    hands back its part; a second Ctrl-C, or a task that could not keep its part, ends
    the wait."""
    if isinstance(executor, SerialExecutor):
        results = []
        for i, t in enumerate(tasks):
            results.append(executor.submit(fn, t).result())
            if on_done is not None:
                on_done(i, results[i])
        return results
    futures = {executor.submit(fn, t): i for i, t in enumerate(tasks)}
    keep_freed_memory()  # this process's part from here: the results (the workers are started)
    results: list = [None] * len(tasks)
    done: set[int] = set()
    try:
        for f in as_completed(futures):
            i = futures[f]
            results[i] = f.result()
            done.add(i)
            if on_done is not None:
                on_done(i, results[i])
    except KeyboardInterrupt:
        if not wait_out_ctrl_c:
            raise
        for f, i in futures.items():
            if i not in done:
                results[i] = f.result()  # the task's own KeyboardInterrupt, if it kept nothing
                if on_done is not None:
                    on_done(i, results[i])
    return results
