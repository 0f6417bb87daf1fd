"""The calibration grid: which step shapes to time, and the synthetic Batch of each.

Three regions, as a serving run produces them:
- decode: b sequences decoding one token each after about `context` cached tokens
  (contexts spread over [context/2, 3 context/2], as a live batch's are, so the
  backend's grouping and padding are exercised);
- prefill: n prompt chunks of c tokens, each after `cached` tokens already in cache
  (cached=0 is a whole prompt; > 0 is chunked prefill or recompute; n > 1 is a burst
  of admissions under continuous batching); every chunk ends its prompt and samples;
- mixed: what the chunked-prefill scheduler builds: b decodes plus one prefill chunk.

Every point is a key string ("d16x256", "p512@0", "p4x128@0", "m16x256+p256@128"), so
measurements can be matched on resume."""
from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass, field

import numpy as np

from batchlab.core.batch import Batch, StepFeatures, step_features
from batchlab.core.kv import BlockManager, blocks_for
from batchlab.core.request import Request, Sequence

REGIONS = ("decode", "prefill", "mixed")


@dataclass(frozen=True)
class GridPoint:
    decodes: int = 0  # sequences decoding
    context: int = 0  # their typical cached context
    chunk: int = 0  # prefill chunk length (0: none)
    cached: int = 0  # tokens of that prompt already in cache
    chunks: int = 1  # how many such prefill chunks (prefill region only)

    @property
    def region(self) -> str:
        if self.decodes and self.chunk:
            return "mixed"
        return "decode" if self.decodes else "prefill"

    @property
    def key(self) -> str:
        d = f"{self.decodes}x{self.context}"
        p = f"p{self.chunks}x{self.chunk}@{self.cached}" if self.chunks > 1 else f"p{self.chunk}@{self.cached}"
        return {"decode": f"d{d}", "prefill": p, "mixed": f"m{d}+{p}"}[self.region]

    def contexts(self) -> list[int]:
        """Cached tokens of each decoding sequence (deterministic spread)."""
        if self.decodes == 1:
            return [self.context]
        lo, hi = self.context // 2, self.context + self.context // 2
        return [int(x) for x in np.linspace(lo, hi, self.decodes).round()]


_KEY = re.compile(r"^(?:d(\d+)x(\d+)|p(?:(\d+)x)?(\d+)@(\d+)|m(\d+)x(\d+)\+p(\d+)@(\d+))$")


def parse_key(key: str) -> GridPoint:
    m = _KEY.match(key)
    if not m:
        raise ValueError(f"not a grid point key: {key!r}")
    g = [int(x) if x is not None else None for x in m.groups()]
    if g[0] is not None:
        return GridPoint(g[0], g[1])
    if g[3] is not None:
        return GridPoint(chunk=g[3], cached=g[4], chunks=g[2] or 1)
    return GridPoint(g[5], g[6], g[7], g[8])


@dataclass
class Grid:
    """Points, and how often to time each: at least `rounds` times, and more for cheap
    points until about `target_s` seconds of timings are collected (at most
    `max_rounds`): a 40 ms decode step needs many repeats to pin its median down, a
    1 s prefill few. One timing per point per round; rounds interleaved."""
    points: list[GridPoint] = field(default_factory=list)
    rounds: int = 5
    target_s: float = 0.0
    max_rounds: int = 40
    warmup: int = 1  # executions of each point before its first round (recorded, not used)
    heldout_every: int = 4  # 1 in n points of each region is held out of the fit
    name: str = "custom"  # recorded in the profile: "quick" profiles are flagged when used
    serve_s: float = 0.0  # seconds of the serving phase after the sweep (calibration/sweep/serve_phase.py)

    def rounds_for(self, seconds: float | None) -> int:
        """Timed rounds for a point whose step takes about `seconds`."""
        if not self.target_s or not seconds or seconds <= 0:
            return self.rounds
        return max(self.rounds, min(self.max_rounds, math.ceil(self.target_s / seconds)))

    def heldout(self) -> set[str]:
        """A fixed pseudo-random 1/heldout_every of each region (by a hash of the key,
        so it does not line up with any one context or batch size)."""
        out: set[str] = set()
        for region in REGIONS:
            keys = sorted((p.key for p in self.points if p.region == region),
                          key=lambda k: zlib.crc32(k.encode()))
            out.update(keys[:round(len(keys) / self.heldout_every)] if self.heldout_every else [])
        return out


def default_grid() -> Grid:
    """About 3 minutes for batchlab-small on one CPU thread, sweep and fit, then the 40 s
    serving phase (calibration/sweep/serve_phase.py). Every row
    count up to 8 (the small-row corrections), then sparser; contexts and chunk
    lengths as chat serving sees them."""
    pts = [GridPoint(b, c) for b in (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)
           for c in (48, 192, 512, 1024) if b * c <= 24576]
    pts += [GridPoint(chunk=c, cached=s) for c in (16, 32, 64, 128, 256, 512)
            for s in (0, 256, 1024) if c + s <= 1536]
    pts += [GridPoint(chunk=c, chunks=n) for n, c in ((2, 32), (4, 32), (8, 16), (2, 128), (4, 64))]
    pts += [GridPoint(b, c, ch, s) for b in (4, 16, 48) for c in (128, 512)
            for ch, s in ((32, 0), (128, 256), (256, 0)) if b * c <= 24576]
    return Grid(pts, rounds=5, target_s=1.2, name="default", serve_s=40.0)


def tiny_grid() -> Grid:
    """A few points for tests and `--grid quick`: seconds on batchlab-tiny. A smoke
    test: too few points to pin every rate down (fits can be non-physical)."""
    pts = [GridPoint(b, c) for b in (1, 2, 4, 8, 16) for c in (16, 48)]
    pts += [GridPoint(chunk=c, cached=s) for c in (8, 32) for s in (0, 16)]
    pts += [GridPoint(chunk=8, chunks=3)]
    pts += [GridPoint(4, 32, 16, 0), GridPoint(2, 16, 8, 8), GridPoint(8, 16, 24, 0)]
    return Grid(pts, rounds=3, warmup=1, heldout_every=4, name="quick", serve_s=3.0)


def max_context(points: list[GridPoint]) -> int:
    """The longest sequence (cached + new tokens) any point builds."""
    def longest(p: GridPoint) -> int:
        decode = max(p.contexts()) + 1 if p.decodes else 0
        return max(decode, p.cached + p.chunk if p.chunk else 0)
    return max((longest(p) for p in points), default=0)


def max_chunk(points: list[GridPoint]) -> int:
    """The longest prefill (cached + chunk) any point builds."""
    return max((p.cached + p.chunk for p in points if p.chunk), default=0)


def blocks_needed(points: list[GridPoint], block_size: int) -> int:
    """Blocks the largest point needs (points are built one at a time)."""
    def need(p: GridPoint) -> int:
        n = sum(blocks_for(c + 1, block_size) for c in p.contexts()) if p.decodes else 0
        return n + (p.chunks * blocks_for(p.cached + p.chunk, block_size) if p.chunk else 0)
    return max((need(p) for p in points), default=1)


def build_batch(point: GridPoint, kv: BlockManager) -> Batch:
    """The point as a Batch the backend Engine can execute, with block tables from `kv`
    (freed again by release_batch). Decoding sequences carry the output ids their
    bookkeeping implies; the engine appends one more per step (reset_batch drops it)."""
    batch = Batch()
    rid = 0
    for ctx in point.contexts() if point.decodes else []:
        # prompt of ctx tokens, one generated token: that token is fed at position ctx
        seq = Sequence(Request(rid, 0.0, max(ctx, 1), 1 << 20))
        seq.num_generated, seq.num_computed = 1, max(ctx, 1)
        seq.output_token_ids = [rid % 97]
        kv.grow(seq.block_table, seq.num_computed + 1)
        batch.add(seq, 1)
        rid += 1
    for _ in range(point.chunks if point.chunk else 0):
        seq = Sequence(Request(rid, 0.0, point.cached + point.chunk, 1 << 20))
        seq.num_computed = point.cached
        kv.grow(seq.block_table, point.cached + point.chunk)
        batch.add(seq, point.chunk)
        rid += 1
    return batch


def reset_batch(batch: Batch) -> None:
    """Undo the engine's appended tokens so the same batch can run again."""
    for seq in batch.seqs:
        del seq.output_token_ids[seq.num_generated:]


def release_batch(batch: Batch, kv: BlockManager) -> None:
    for seq in batch.seqs:
        kv.free(seq.block_table)


def features_of(point: GridPoint, block_size: int = 16) -> StepFeatures:
    kv = BlockManager(blocks_needed([point], block_size), block_size)
    return step_features(build_batch(point, kv))
