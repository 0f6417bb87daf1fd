"""[workload] settings and how they become a Workload: a named synthetic preset or a
trace file, then the transformations, in a fixed order, each recorded."""
from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core.workload.lengths import LengthSpec
from core.workload.synthetic import gamma_arrivals
from core.workload.workload import Workload


def _mix(*parts: tuple[float, dict]) -> LengthSpec:
    return LengthSpec(dist="mixture", components=[LengthSpec(weight=w, **d) for w, d in parts])


# Named synthetic workloads. "chat": the seed's case for continuous batching, replies of
# widely varying length: most short, a few very long.
PRESETS: dict[str, dict] = {
    "chat": dict(
        num_requests=1000, rate=12.0,
        prompt=LengthSpec(dist="lognormal", mean=300, sigma=0.8, max=4096),
        output=_mix((0.80, dict(dist="uniform", low=12, high=40)),
                    (0.15, dict(dist="uniform", low=100, high=300)),
                    (0.05, dict(dist="uniform", low=500, high=1000))),
    ),
    "uniform": dict(
        num_requests=1000, rate=10.0,
        prompt=LengthSpec(dist="fixed", value=512), output=LengthSpec(dist="fixed", value=128),
    ),
}


class WorkloadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field("chat", description="a synthetic preset name or a trace file path")
    num_requests: int | None = Field(None, gt=0)
    rate: float | None = Field(None, gt=0, description="requests/s; inf = all at t=0")
    burstiness: float = Field(1.0, gt=0, description="Gamma shape: 1 Poisson, <1 burstier")
    prompt: LengthSpec | None = None
    output: LengthSpec | None = None
    max_concurrency: int | None = Field(None, gt=0, description="closed loop: users in flight")
    think_time_s: float = Field(0.0, ge=0)
    seed: int = 0


def build_workload(cfg: WorkloadConfig) -> Workload:
    if cfg.source not in PRESETS:
        raise ValueError(f"workload source {cfg.source!r}: not a preset "
                         f"({', '.join(PRESETS)}) and trace files are not supported yet")
    preset = PRESETS[cfg.source]
    n = cfg.num_requests or preset["num_requests"]
    rate = cfg.rate or preset["rate"]
    prompt, output = cfg.prompt or preset["prompt"], cfg.output or preset["output"]
    arr_rng, prompt_rng, out_rng = (np.random.default_rng(s)
                                    for s in np.random.SeedSequence(cfg.seed).spawn(3))
    w = Workload(
        arrival=gamma_arrivals(n, rate, cfg.burstiness, arr_rng),
        prompt_len=prompt.sample(n, prompt_rng),
        output_len=output.sample(n, out_rng),
        max_concurrency=cfg.max_concurrency,
        think_time_s=cfg.think_time_s,
    )
    rate_txt = "all at t=0" if math.isinf(rate) else f"{rate:g} req/s, burstiness {cfg.burstiness:g}"
    w.description.append(f"synthetic {cfg.source!r}: {n} requests, {rate_txt}, seed {cfg.seed}")
    if cfg.max_concurrency:
        w.description.append(f"closed loop: {cfg.max_concurrency} in flight, think {cfg.think_time_s:g} s")
    return w
