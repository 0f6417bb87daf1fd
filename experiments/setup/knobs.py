"""The knobs of a configuration's price (core/cost/knobs.py Knob records) and the configuration
with knobs moved: what `capacity --sensitivity` varies, without knowing which cost form
it varies.

A price comes from one KnobSource: a GPU profile's fitted constants, else the roofline's
assumed ones; a setup that prices another way registers its own source ahead of them, with
`register(source)`: a source says whether it prices a config (`applies`), lists its
knobs with their ranges (`knobs`), and rebuilds the config with some of them at given
values (`with_values`; the config must carry the values, since a search ships configs to
worker processes). The traffic's rate is a knob of every config (the forecast is a guess
too), added here whatever the source."""
from __future__ import annotations

from typing import ClassVar, Protocol

from batchlab.core.cost.knobs import Knob
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup.gpu import gpu_knobs, wants_roofline

RATE = "traffic_rate"  # the knob of the traffic: cfg.workload.rate_scale, relative
RATE_RANGE = (0.8, 1.2)  # a forecast within +-20%


class KnobSource(Protocol):
    def applies(self, cfg: ExperimentConfig) -> bool: ...
    def knobs(self, cfg: ExperimentConfig) -> list[Knob]: ...
    def with_values(self, cfg: ExperimentConfig, values: dict[str, float]) -> ExperimentConfig: ...


class RooflineKnobs:
    """The roofline's assumed constants ([hardware] fields), each with a range around its
    value: what vLLM deployments on measured GPUs show (memory-bound decode reaches 60-90%
    of datasheet bandwidth, large GEMMs 40-75% of peak; per-step overhead 1-4 ms; an
    all-reduce over NVLink 10-100 us)."""
    # field -> (low factor, high factor, cap), relative to the configured value
    RANGES: ClassVar[dict[str, tuple[float, float, float | None]]] = {"mem_efficiency": (0.75, 1.125, 1.0), "compute_efficiency": (0.67, 1.25, 1.0),
              "step_overhead_s": (0.5, 2.0, None), "allreduce_latency_s": (0.25, 3.0, None)}

    def applies(self, cfg: ExperimentConfig) -> bool:
        return not cfg.profile.path

    def knobs(self, cfg: ExperimentConfig) -> list[Knob]:
        h = cfg.hardware
        out = []
        for name, (lo, hi, cap) in self.RANGES.items():
            if name == "allreduce_latency_s":
                if h.tensor_parallel == 1:
                    continue  # no all-reduce at TP 1
                v = h.spec().allreduce_latency_s if h.allreduce_latency_s is None \
                    else h.allreduce_latency_s
            else:
                v = getattr(h, name)
            given = name in h.model_fields_set
            out.append(Knob(name, v, v * lo, min(v * hi, cap) if cap else v * hi,
                            f"{'given' if given else 'assumed'}, range x{lo:g}-x{hi:g}"
                            + (f" (at most {cap:g})" if cap else "")))
        return out

    def with_values(self, cfg: ExperimentConfig, values: dict[str, float]) -> ExperimentConfig:
        unknown = set(values) - set(self.RANGES)
        if unknown:
            raise UserError(f"the roofline has no knob {min(unknown)!r} (expected one of "
                            f"{', '.join(self.RANGES)})")
        return cfg.model_copy(update={"hardware": cfg.hardware.model_copy(update=values)}, deep=True)


class GpuProfileKnobs:
    """A GPU preset priced by a GPU profile (experiments/setup/gpu.py): every constant the
    profile fitted or assumed, over the range its standard error and held-out error allow
    (core/cost/gpu_profile.py GpuProfile.knobs). Moved values travel in the config's [hardware]
    knobs table, which the GPU setup applies to the profile."""

    def applies(self, cfg: ExperimentConfig) -> bool:
        return not cfg.profile.path and not wants_roofline(cfg)

    def knobs(self, cfg: ExperimentConfig) -> list[Knob]:
        given = cfg.hardware.knobs
        return [k._replace(value=given[k.name], source=f"{k.source}; given {given[k.name]:g}")
                if k.name in given else k for k in gpu_knobs(cfg) if k.low != k.high]

    def with_values(self, cfg: ExperimentConfig, values: dict[str, float]) -> ExperimentConfig:
        known = {k.name for k in gpu_knobs(cfg)}
        unknown = set(values) - known
        if unknown:
            raise UserError(f"the GPU profile has no knob {min(unknown)!r} (expected one of "
                            f"{', '.join(sorted(known))})")
        hw = cfg.hardware.model_copy(update={"knobs": {**cfg.hardware.knobs, **values}})
        return cfg.model_copy(update={"hardware": hw}, deep=True)


SOURCES: list[KnobSource] = [GpuProfileKnobs(), RooflineKnobs()]


def register(source: KnobSource) -> None:
    """A pricing setup's knobs, tried before those registered earlier."""
    SOURCES.insert(0, source)


def source_of(cfg: ExperimentConfig) -> KnobSource | None:
    return next((s for s in SOURCES if s.applies(cfg)), None)


def price_knobs(cfg: ExperimentConfig, traffic: bool = True) -> list[Knob]:
    """Every knob of cfg's price, then the traffic's rate (traffic=False: not, as when
    the rate is the answer)."""
    src = source_of(cfg)
    out = list(src.knobs(cfg)) if src else []
    if traffic:
        r = cfg.workload.rate_scale
        out.append(Knob(RATE, r, r * RATE_RANGE[0], r * RATE_RANGE[1],
                        f"the traffic forecast, x{RATE_RANGE[0]:g}-x{RATE_RANGE[1]:g}"))
    return out


def with_knobs(cfg: ExperimentConfig, values: dict[str, float]) -> ExperimentConfig:
    """cfg with the given knobs at the given values (the traffic's rate included)."""
    values = dict(values)
    if RATE in values:
        cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(
            update={"rate_scale": values.pop(RATE)})}, deep=True)
    if not values:
        return cfg
    src = source_of(cfg)
    if src is None:
        raise UserError(f"no knob source prices this configuration; cannot move {', '.join(values)}")
    return src.with_values(cfg, values)
