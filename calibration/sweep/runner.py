"""The timing sweep: every grid point, warmed up, then timed once per round, rounds
interleaved and shuffled (the VM's speed drifts; timing one point many times in a row
would bake that drift into it). Each timing is appended to a JSONL file the moment it
is taken, so an interrupted sweep keeps what it measured and a re-run resumes: rounds
already recorded for the same model, device, threads, dtype and block size are skipped."""
from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from batchlab.calibration.sweep.grid import Grid, GridPoint, build_batch, release_batch, reset_batch
from batchlab.core.batch import step_features
from batchlab.core.kv import BlockManager

if TYPE_CHECKING:
    from batchlab.backend.engine import Engine


def measurements_path(out: str | Path) -> Path:
    """Raw timings live next to the profile: small.json -> small.jsonl."""
    out = Path(out)
    return out.with_suffix(".jsonl") if out.suffix == ".json" else out.with_name(out.name + ".jsonl")


def read_records(path: Path, ident: dict[str, Any]) -> list[dict]:
    """Timings in `path` taken with the same identity (round -1: a warm-up). A torn last
    line (the process was killed mid-write) and other unreadable lines are skipped."""
    return [rec for rec in _lines(path, ident)
            if isinstance(rec.get("t"), (int, float)) and isinstance(rec.get("round"), int)]


def _lines(path: Path, ident: dict[str, Any]):
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and all(rec.get(k) == v for k, v in ident.items()):
            yield rec


def append_roofline(path: Path, ident: dict[str, Any], roof: dict[str, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps({**ident, "roofline": roof}) + "\n")


def read_roofline(path: Path, ident: dict[str, Any]) -> dict[str, float]:
    """The best of every roofline measured for this sweep: a peak, which other work on
    the machine only ever lowers; kept with the timings so a re-fit is reproducible."""
    best: dict[str, float] = {}
    for rec in _lines(path, ident):
        for k, v in (rec.get("roofline") or {}).items():
            if isinstance(v, (int, float)):
                best[k] = max(best.get(k, 0.0), float(v))
    return best


def plan(grid: Grid, done: Counter, rounds: dict[str, int], seed: int) -> list[tuple[int, GridPoint]]:
    """[(round, point)] still to time: each round a fresh shuffle of the points that
    need it, so no point is timed twice in a row and drift spreads over all of them."""
    rng = random.Random(seed)
    timed = []
    for r in range(max(rounds.values(), default=0)):
        pts = [p for p in grid.points if done[p.key] <= r < rounds[p.key]]
        rng.shuffle(pts)
        timed += [(r, p) for p in pts]
    return timed


def _first_times(records: list[dict]) -> dict[str, float]:
    """Each point's first timing (its first warm-up): what sizes its rounds. Only the
    first, so the count stays the same however often a sweep is resumed (a first
    execution is close enough to the point's median to size its rounds)."""
    first: dict[str, float] = {}
    for r in records:
        first.setdefault(r["key"], r["t"])
    return first


FRESH_SHIFTS = (0, 8, 16, 24, 32, 40, 48, 56)  # cached-prefix shifts, once chunk lengths run out


def _reach(point: GridPoint) -> int:
    return max(3, point.chunk // 8)


def fresh_variant(point: GridPoint, seen: set[GridPoint]) -> GridPoint:
    """The point with its chunk a few tokens longer or shorter (and, for a chunk after a
    cached prefix, that prefix shifted), in a shape this process has not run yet:
    serving meets a new prompt length at nearly every prefill, and a shape's first run
    costs more than its repeats (docs/results/2026-12-01-calibration-serving.md). Decode-only
    points are returned as they are."""
    if not point.chunk:
        return point
    deltas = (0, *(s * k for k in range(1, _reach(point) + 1) for s in (1, -1)))
    for shift in FRESH_SHIFTS if point.cached else (0,):
        for d in deltas:
            v = replace(point, chunk=point.chunk + d, cached=point.cached + shift)
            if v.chunk >= 1 and v not in seen:
                return v
    return point


def fresh_count(point: GridPoint) -> int:
    """How many distinct shapes fresh_variant has for `point` (decodes: unlimited)."""
    if not point.chunk:
        return 1 << 30
    deltas = sum(1 for d in range(-_reach(point), _reach(point) + 1) if point.chunk + d >= 1)
    return deltas * (len(FRESH_SHIFTS) if point.cached else 1)


def widest_variant(point: GridPoint, executions: int) -> GridPoint:
    """The largest shape fresh_variant builds from `point` when run `executions` times
    (to size the KV pool)."""
    if not point.chunk:
        return point
    shifts = -(-executions // (2 * _reach(point) + 1)) - 1  # chunk lengths run out this often
    shift = FRESH_SHIFTS[min(shifts, len(FRESH_SHIFTS) - 1)] if point.cached else 0
    return replace(point, chunk=point.chunk + _reach(point), cached=point.cached + shift)


def widest_points(grid: Grid) -> list[GridPoint]:
    return [widest_variant(p, grid.warmup + grid.max_rounds) for p in grid.points]


class Sweep:
    """Runs a grid on a backend Engine. `reference` times the reference kernel (or None).
    Prefill and mixed points are timed in a fresh shape each time (fresh_variant)."""

    def __init__(self, engine: Engine, grid: Grid, path: Path, ident: dict[str, Any],
                 reference: Callable[[], float] | None = None, seed: int = 0) -> None:
        self.engine, self.grid, self.path, self.ident = engine, grid, path, ident
        self.reference, self.seed = reference, seed
        cache = engine.cache
        self.kv = BlockManager(cache.num_blocks, cache.block_size)
        self.seen: set[GridPoint] = set()

    def _records(self) -> list[dict]:
        keys = {p.key for p in self.grid.points}
        return [r for r in read_records(self.path, self.ident) if r["key"] in keys]

    def rounds(self, records: list[dict]) -> dict[str, int]:
        """Timed rounds each point needs, from its first timing; a prefill point no more
        than it has fresh shapes for (but at least grid.rounds)."""
        est = _first_times(records)
        g = self.grid
        return {p.key: min(g.rounds_for(est.get(p.key)), max(g.rounds, fresh_count(p) - g.warmup))
                for p in g.points}

    def _execute(self, point: GridPoint) -> tuple[float, dict]:
        point = fresh_variant(point, self.seen)
        self.seen.add(point)
        batch = build_batch(point, self.kv)
        try:
            features = step_features(batch, window=self.engine.runner.window)
            t = self.engine.execute(batch)
            reset_batch(batch)
        finally:
            for seq in batch.seqs:
                self.engine.forget(seq)
            release_batch(batch, self.kv)
        return t, features._asdict()

    def _write(self, f, point: GridPoint, r: int, t: float, ref: float | None, features: dict) -> None:
        rec = {**self.ident, "key": point.key, "round": r, "t": t, "ref": ref, "features": features}
        f.write(json.dumps(rec) + "\n")
        f.flush()  # an interrupted sweep keeps every timing taken

    def run(self, progress: Callable[[int, int | None], None] | None = None) -> int:
        """Measure what is missing; returns the number of timings appended.
        progress(steps_done, new_total_or_None) after every step."""
        records = self._records()
        done = Counter(r["key"] for r in records if r["round"] >= 0)
        need = self.rounds(records)
        rng = random.Random(self.seed)
        # Warm every point still to time (a new shape costs kernel selection once); the
        # warm-up times (round -1, never used as measurements) size the rounds.
        warm = [p for p in self.grid.points if done[p.key] < need[p.key]] * self.grid.warmup
        rng.shuffle(warm)
        guess = len(warm) + sum(max(0, need[p.key] - done[p.key]) for p in self.grid.points)
        if progress:
            progress(0, guess)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            for p in warm:
                t, features = self._execute(p)
                self._write(f, p, -1, t, None, features)
                if progress:
                    progress(1, None)
            need = self.rounds(self._records())
            timed = plan(self.grid, done, need, self.seed + 1)
            if progress:
                progress(0, len(warm) + len(timed))
            for r, p in timed:
                ref = self.reference() if self.reference else None
                t, features = self._execute(p)
                self._write(f, p, r, t, ref, features)
                if progress:
                    progress(1, None)
        return len(timed)
