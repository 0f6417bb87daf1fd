"""When replay sends what: each request at its arrival time (times `time_scale`; open
loop, as `vllm bench serve --request-rate`), or, for a workload with max_concurrency, a
closed loop of that many users: each sends its next request at max(its arrival, its
previous reply + think time), as `batchlab run` and `simulate` do. Requests go out in
workload order either way. On Ctrl-C the outcomes gathered so far are kept: those in
flight are cut and marked failed ("interrupted")."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx
from tqdm import tqdm

from batchlab.core.workload import Workload
from batchlab.experiments.replay.client import send
from batchlab.experiments.replay.outcome import Outcome
from batchlab.experiments.replay.prompts import completion_body, prompt_ids


@dataclass
class Target:
    url: str  # the completions URL
    model: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0
    vocab_size: int = 32000
    seed: int = 0


@dataclass
class Replay:
    """What a replay gathered: one Outcome per request sent, by workload index."""
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    t0: float = 0.0  # perf_counter at the start: arrival 0
    interrupted: bool = False


async def _run(workload: Workload, target: Target, rep: Replay, time_scale: float, bar) -> None:
    n = len(workload)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    timeout = httpx.Timeout(target.timeout_s, connect=min(10.0, target.timeout_s))
    async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) as client:

        async def one(i: int) -> None:
            plen, olen = int(workload.prompt_len[i]), int(workload.output_len[i])
            out = rep.outcomes[i] = Outcome(i, plen, olen)
            body = completion_body(target.model, prompt_ids(i, plen, target.seed, target.vocab_size), olen)
            await send(client, target.url, body, out, target.headers, target.timeout_s)
            bar.update(1)

        async def until(i: int) -> None:
            delay = rep.t0 + float(workload.arrival[i]) * time_scale - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)

        await _warm_up(client, target)
        rep.t0 = time.perf_counter()
        if workload.max_concurrency is None:
            tasks = []
            for i in range(n):
                await until(i)
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
            return
        queue = iter(range(n))  # one shared order: the first free user takes the next

        async def user() -> None:
            for i in queue:
                await until(i)
                await one(i)
                if workload.think_time_s:
                    await asyncio.sleep(workload.think_time_s)

        await asyncio.gather(*(user() for _ in range(min(workload.max_concurrency, n))))


async def _warm_up(client: httpx.AsyncClient, target: Target) -> None:
    """Open a connection and load the client's lazy parts before the clock starts (the
    first request otherwise pays ~0.1-0.3 s of them): a GET of /v1/models, whatever it
    answers."""
    try:
        await client.get(target.url.rsplit("/", 1)[0] + "/models", headers=target.headers,
                         timeout=min(10.0, target.timeout_s))
    except httpx.HTTPError:
        pass  # a server that is down fails each request with its reason


def replay(workload: Workload, target: Target, *, time_scale: float = 1.0,
           progress: bool = False) -> Replay:
    rep = Replay()
    with tqdm(total=len(workload), unit="req", desc="batchlab replay", disable=not progress,
              dynamic_ncols=True, mininterval=0.5) as bar:
        try:
            asyncio.run(_run(workload, target, rep, time_scale, bar))
        except KeyboardInterrupt:
            rep.interrupted = True
    now = time.perf_counter()
    for out in rep.outcomes.values():
        if out.end < 0 and not out.error:  # in flight when interrupted
            out.error, out.end = "interrupted", now
    return rep
