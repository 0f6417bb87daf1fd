"""[workload] settings and how they become a Workload: a named synthetic preset or a
trace file, then the transformations, in a fixed order, each recorded.

The order (each step only when asked for):
  1. source: a preset generates `num_requests` requests at `rate`; a trace is read
     whole; a length file (no timestamps) gives its first `num_requests` rows arrivals
     at `rate` (default inf, as vllm bench serve: all at once) with `burstiness`
  2. jitter_s       spread coarse timestamps within their step
  3. window         keep [window_start_s, window_start_s + window_duration_s), shifted
                    to t = 0
  4. num_requests   traces: the first N of what is left
     resample       traces: a bootstrap replicate of what is left, drawn from the seed
                    (requests, or windows of resample_block_s; core/workload/resample.py)
  5. rate           traces: stretch or compress time to this mean rate
  6. rate_scale     multiply the arrival rate
  7. length_scale   divide prompt and output lengths (at least 1 token)
  8. max_prompt_len, max_output_len   clip
  9. max_concurrency, think_time_s    closed loop (recorded; the driver enforces it)
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from batchlab.core.checks import (MAX_TIME_S, MAX_TOKENS, Count, Positive, PositiveSeconds, Rate,
                         Seconds, Seed, Tokens)
from batchlab.core.checks import Burstiness, shown
from batchlab.core.sizes import BYTES_PER_REQUEST, require_memory
from batchlab.core.workload import transforms as tf
from batchlab.core.workload.conversations import multi_turn, with_system_prompt
from batchlab.core.workload.errors import WorkloadError
from batchlab.core.workload.formats import FORMAT_NAMES, Format, detect_format, load_trace
from batchlab.core.workload.lengths import THREADED_DRAWS, LengthSpec, sample_lengths
from batchlab.core.workload.resample import resample
from batchlab.core.workload.sources import PRESETS, TRACES, resolve, traces_dir
from batchlab.core.workload.synthetic import gamma_arrivals
from batchlab.core.workload.workload import Workload

__all__ = ["PRESETS", "WorkloadConfig", "build_workload"]


class WorkloadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field("chat", description="a synthetic preset (chat, multiturn, uniform, "
                        "sharegpt, arxiv), a shared trace (azure_code, azure_conv, mooncake) or a file")
    trace_format: str = Field("auto", description="auto (detect from the file) | azure | "
                              "mooncake | lengths | batchlab")
    num_requests: Count | None = Field(None, description="presets: how many to generate; "
                                     "traces: keep the first N (after the window)")
    rate: Rate | None = Field(None, description="requests/s (inf: all at t=0); presets "
                               "and length files: the arrival rate; traces: rescale time to "
                               "this mean rate")
    burstiness: Burstiness | None = Field(None, description="generated arrivals: Gamma shape "
                                     "of the gaps, 1 Poisson (default), <1 burstier, >1 smoother")
    prompt: LengthSpec | None = Field(None, description="presets: prompt length distribution")
    output: LengthSpec | None = Field(None, description="presets: output length distribution")
    length_file: str | None = Field(None, description="presets: draw (prompt, output) pairs "
                                    "from this length or trace file instead")
    max_concurrency: Count | None = Field(None, description="closed loop: users in flight")
    think_time_s: Seconds = Field(0.0, description="closed loop: pause between a reply "
                                "and that user's next request")
    seed: Seed = Field(0, description="seeds arrivals, lengths and jitter")
    jitter_s: PositiveSeconds | None = Field(None, description="spread each arrival uniformly "
                                   "within [t, t + jitter_s): undoes coarse timestamps")
    resample: Literal["requests", "windows"] | None = Field(
        None, description="traces: each seed a bootstrap replicate of the trace: its requests "
        "drawn with replacement (lengths vary, arrivals kept), or its windows (blocks of "
        "resample_block_s seconds, arrival pattern and lengths together)")
    resample_block_s: PositiveSeconds = Field(60.0, description="resample = windows: the block length")
    window_start_s: Seconds = Field(0.0, description="keep arrivals from this time on")
    window_duration_s: PositiveSeconds | None = Field(None, description="keep this many seconds "
                                            "of arrivals from window_start_s")
    rate_scale: Positive = Field(1.0, description="multiply the arrival rate (2: time runs "
                              "twice as fast)")
    length_scale: Positive = Field(1.0, description="divide prompt and output lengths by "
                                "this (rounded, at least 1 token)")
    max_prompt_len: Tokens | None = Field(None, description="clip prompt lengths to this")
    max_output_len: Tokens | None = Field(None, description="clip output lengths to this")
    # Shared prefixes (core/workload/conversations.py): presets only.
    system_prompt_len: int | None = Field(None, ge=0, le=MAX_TOKENS, description="presets: "
                                          "a system prompt of this many tokens, shared by "
                                          "every prompt (prefix hashes say so)")
    turns: float | None = Field(None, ge=1, le=1000, description="presets: multi-turn chat, "
                                "this many turns per conversation on average; rate is then "
                                "conversations/s and each prompt the conversation so far")
    turn_gap_s: Seconds | None = Field(None, description="multi-turn: mean think time between "
                                       "a conversation's turns (default 20 s)")

    @model_validator(mode="after")
    def _check(self) -> "WorkloadConfig":
        if self.trace_format not in FORMAT_NAMES:
            raise ValueError(f"trace_format must be one of {', '.join(FORMAT_NAMES)}, "
                             f"got {shown(self.trace_format)}")
        if self.length_file and (self.prompt or self.output):
            raise ValueError("give length_file or prompt/output length specs, not both")
        if math.isinf(self.rate_scale):
            raise ValueError("rate_scale must be finite")
        if self.think_time_s and self.max_concurrency is None:
            # Open loop: requests arrive on their own clock, so a pause between a user's
            # reply and next request has no meaning; silently ignoring it would mislead.
            raise ValueError(f"think_time_s ({self.think_time_s:g} s, --think-time) applies to "
                             "a closed loop only; set max_concurrency (--max-concurrency) too")
        return self


def build_workload(cfg: WorkloadConfig) -> Workload:
    """The workload `cfg` describes, made in the order of the module docstring."""
    # A fifth child leaves the first four (and so every earlier workload) as they were.
    arr_rng, prompt_rng, out_rng, jitter_rng, resample_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(5))
    path = resolve(cfg.source)
    if path is None:
        w = _synthetic(cfg, arr_rng, prompt_rng, out_rng)
        timed = False
    else:
        fmt = _trace_format(cfg, path)
        timed = fmt.arrival is not None
        w = load_trace(path, fmt.name)
        if not timed:
            w = _generated_arrivals(_first(cfg, w), cfg, arr_rng)
    if cfg.jitter_s:
        w = tf.jitter(w, cfg.jitter_s, jitter_rng)
    if cfg.window_start_s or cfg.window_duration_s:
        kept = tf.window(w, cfg.window_start_s, cfg.window_duration_s)
        if not len(kept):
            raise WorkloadError(None, None, f"workload {cfg.source}: no requests in the "
                                            f"{kept.description[-1].split(':')[0]}; expected a "
                                            f"window within its arrivals, {w.arrival[0]:g} to "
                                            f"{w.arrival[-1]:g} s")
        w = kept
    if timed:
        w = _first(cfg, w)
    if cfg.resample:
        if path is None:
            raise WorkloadError(None, None, f"resample ({cfg.resample}, --resample) applies to a trace; "
                                            f"the synthetic preset {cfg.source!r} draws new requests "
                                            f"for every seed already")
        w = resample(w, cfg.resample, cfg.resample_block_s, resample_rng)
    if timed:
        if cfg.rate is not None:
            w = tf.set_rate(w, cfg.rate)
    if cfg.rate_scale != 1:
        w = tf.scale_rate(w, cfg.rate_scale)
    if cfg.length_scale != 1:
        w = tf.scale_lengths(w, cfg.length_scale)
    if cfg.max_prompt_len or cfg.max_output_len:
        w = tf.clip_lengths(w, cfg.max_prompt_len, cfg.max_output_len)
    if cfg.max_concurrency:
        w = w.replace(f"closed loop: {cfg.max_concurrency} in flight, "
                      f"think {cfg.think_time_s:g} s",
                      max_concurrency=cfg.max_concurrency, think_time_s=cfg.think_time_s)
    _check_result(cfg, w)
    return w


def _check_result(cfg: WorkloadConfig, w: Workload) -> None:
    """Each setting is in range, but together they can still leave it (a thousand
    requests at 1e-5 req/s end after 1e8 s): the workload as built must be, too."""
    if len(w) and not w.arrival[-1] < MAX_TIME_S:  # nan fails too
        raise WorkloadError(None, None, f"workload {cfg.source}: the last of its {len(w)} "
                                        f"arrivals is at {w.arrival[-1]:.3g} s; arrivals must "
                                        f"stay below {MAX_TIME_S:g} s (about 3 years) so that "
                                        f"step durations stay representable; raise [workload] rate "
                                        f"or rate_scale (--rate, --rate-scale) or shorten the "
                                        f"workload")
    for name, col in (("prompt", w.prompt_len), ("output", w.output_len)):
        if len(col) and col.max() > MAX_TOKENS:
            raise WorkloadError(None, None, f"workload {cfg.source}: a {name} length of "
                                            f"{col.max()} tokens exceeds {MAX_TOKENS:,}")


def _synthetic(cfg: WorkloadConfig, arr_rng: np.random.Generator,
               prompt_rng: np.random.Generator, out_rng: np.random.Generator) -> Workload:
    preset = PRESETS[cfg.source]
    n = cfg.num_requests or preset["num_requests"]
    require_memory(n * BYTES_PER_REQUEST, f"workload num_requests={n:,}")
    rate = cfg.rate or preset["rate"]
    burstiness = cfg.burstiness or 1.0
    prompt, output = cfg.prompt or preset["prompt"], cfg.output or preset["output"]
    if cfg.length_file:
        prompt = LengthSpec(dist="file", path=cfg.length_file, column="prompt")
        output = LengthSpec(dist="file", path=cfg.length_file, column="output")
    with ThreadPoolExecutor(1) as beside:  # each its own generator: the same draws, side by side
        arrivals = beside.submit(_arrivals, n, rate, burstiness, arr_rng) if n >= THREADED_DRAWS else None
        prompt_len, output_len = sample_lengths(prompt, output, n, prompt_rng, out_rng)
        arrival, how = arrivals.result() if arrivals else _arrivals(n, rate, burstiness, arr_rng)
    turns = cfg.turns or preset.get("turns")
    system = cfg.system_prompt_len if cfg.system_prompt_len is not None else preset.get(
        "system_prompt_len", 0)
    if turns:
        gap = cfg.turn_gap_s if cfg.turn_gap_s is not None else preset.get("turn_gap_s", 20.0)
        w = multi_turn(arrival, prompt_len, output_len, turns, gap, system, arr_rng.spawn(1)[0])
        w.description.append(f"synthetic {cfg.source!r}: {n} turns of multi-turn chat, "
                             f"conversations at {how}, {turns:g} turns each on average, "
                             f"{gap:g} s between turns, {system}-token shared system prompt, "
                             f"seed {cfg.seed}")
    else:
        w = Workload(arrival=arrival, prompt_len=prompt_len, output_len=output_len)
        w.description.append(f"synthetic {cfg.source!r}: {n} requests, {how}, seed {cfg.seed}")
    if cfg.length_file:
        w.description.append(f"lengths drawn from {cfg.length_file}")
    if system and not turns:
        w = with_system_prompt(w, system)
    return w


def _trace_format(cfg: WorkloadConfig, path: Path) -> Format:
    try:
        exists = path.exists()
    except OSError as e:  # a name longer than the system allows
        raise WorkloadError(None, None, f"workload source {shown(cfg.source)}: {e.strerror}; "
                                        f"expected a trace file or a preset") from None
    if not exists:
        if cfg.source in TRACES:
            raise WorkloadError(path, None, f"no such file; the shared trace {cfg.source!r} is "
                                            f"expected in {traces_dir()} (or set BATCHLAB_TRACES)")
        raise WorkloadError(None, None, f"workload source {shown(cfg.source)}: no such file; expected "
                                        f"a trace file, a preset ({', '.join(PRESETS)}) or a "
                                        f"shared trace ({', '.join(TRACES)})")
    fmt = detect_format(path, cfg.trace_format)
    only_presets = [k for k in ("prompt", "output", "length_file", "system_prompt_len", "turns",
                                "turn_gap_s") if getattr(cfg, k) is not None]
    if only_presets:
        raise WorkloadError(None, None, f"workload {only_presets[0]} applies to synthetic presets; "
                                        f"{cfg.source} is a {fmt.name} file with its own lengths")
    if fmt.arrival is not None and cfg.burstiness is not None:
        raise WorkloadError(None, None, f"workload burstiness applies to generated arrivals; "
                                        f"{cfg.source} has its own timestamps")
    return fmt


def _first(cfg: WorkloadConfig, w: Workload) -> Workload:
    return tf.first_n(w, cfg.num_requests) if cfg.num_requests else w


def _generated_arrivals(w: Workload, cfg: WorkloadConfig, rng: np.random.Generator) -> Workload:
    arrival, how = _arrivals(len(w), cfg.rate or math.inf, cfg.burstiness or 1.0, rng)
    return w.replace(f"arrivals: {how}, seed {cfg.seed}", arrival=arrival)


def _arrivals(n: int, rate: float, burstiness: float, rng: np.random.Generator
              ) -> tuple[np.ndarray, str]:
    how = "all at t=0" if math.isinf(rate) else f"{rate:g} req/s, burstiness {burstiness:g}"
    return gamma_arrivals(n, rate, burstiness, rng), how
