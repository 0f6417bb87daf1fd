"""The GPU profile (docs/cost-form.md section 4): the GPU cost form's constants for one GPU,
fitted on measured operators, with where they came from and how well they price shapes
left out of the fit. One per GPU, not per model: it prices any dense model shape at any
TP degree (core/cost/gpu_form.py). Versioned JSON, "format": "batchlab-gpu-profile".

    p = load_gpu_profile("a100-80gb")      # a shipped profile, or a file
    cost = p.cost(model, tensor_parallel=4, hw=lookup_hardware("a100-80gb"))"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from batchlab.core import atomic
from batchlab.core.checks import field_error
from batchlab.core.document import parse_document, read_document
from batchlab.core.cost.dispatch import gpu_cost, operator_shapes
from batchlab.core.cost.gpu_form import AllReduce, FIXED_COSTS, GpuCostModel, GpuCostParams
from batchlab.core.cost.knobs import Knob
from batchlab.core.model.layout import Layout
from batchlab.core.cost.shipped import shipped_dir, shipped_profiles
from batchlab.core.model.hardware import HardwareSpec
from batchlab.core.model.spec import ModelSpec

GPU_PROFILE_FORMAT = "batchlab-gpu-profile"
GPU_PROFILE_VERSION = 2
# Version 1 lacked these (the prefill chunks' own pairs and tokens): read with the values
# that price as version 1 did.
# value, (low, high) for sensitivity: in-chunk pairs measured at 2-4x on the A100.
V1_DEFAULTS = {"attn_self_pair_cost": (1.0, (0.5, 4.0)), "attn_prefill_token_s": (0.0, (None, None))}


# The physical bounds of a constant given by hand ([hardware] knobs) or moved by
# sensitivity: an efficiency is a share of a datasheet figure (above 1 the GPU would beat
# its own datasheet: mem_efficiency 5 priced a decode step at a fifth); a fixed cost is a
# launch or a step's bookkeeping, never a second; a GEMM tile holds at least one row.
MAX_FIXED_S = 1.0
MAX_FACTOR = 1e3  # ridge sharpness, all-reduce scale, self-pair cost: a thousandfold is no GPU


def knob_bound(name: str, value: float) -> tuple[float, float, str]:
    """(lowest, highest, in words) a constant may be set to; a profile whose own value lies
    beyond (a profile scaled to another GPU by datasheet ratios) keeps its own as the bound."""
    if name.endswith("_efficiency"):
        hi = max(1.0, value)
        return 0.0, hi, f"a share of the datasheet figure > 0 and <= {hi:g}"
    if name in FIXED_COSTS:
        hi = max(MAX_FIXED_S, value)
        return 0.0, hi, f"a fixed cost in seconds from 0 to {hi:g}"
    if name == "gemm_tile_tokens":
        return 1.0, 2.0**16, "a whole tile of rows from 1 to 65536"
    hi = max(MAX_FACTOR, value)
    return 0.0, hi, f"a finite number > 0 and <= {hi:g}"


class GpuProfileError(ValueError):
    """A GPU profile that cannot be used: the message is one line naming the file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Param(_Strict):
    value: float = Field(ge=0, allow_inf_nan=False)  # > 0 but for fixed costs (GpuProfile checks)
    stderr: float | None = Field(None, ge=0, allow_inf_nan=False)  # fitted constants only
    source: str  # "fitted", "assumed: ...", "fitted on a100-80gb, scaled: ..."
    # the range sensitivity varies it over (knobs); None: from stderr and held-out error
    low: float | None = Field(None, gt=0, allow_inf_nan=False)
    high: float | None = Field(None, gt=0, allow_inf_nan=False)


class ErrorStats(_Strict):
    """Per-step relative errors (priced / measured - 1) of a set of shapes."""
    n: int = Field(ge=0)
    median: float = Field(ge=0)  # of |error|
    p90: float = Field(ge=0)  # of |error|
    share_high: float = Field(ge=0, le=1)  # shapes priced above their measurement


class HeldOut(_Strict):
    scheme: str  # how data was left out
    overall: ErrorStats
    by_region: dict[str, ErrorStats]  # decode / ridge / prefill
    by_tp: dict[str, ErrorStats]
    attention: dict[str, ErrorStats] = {}  # decode / prefill kernels, where measured
    allreduce: ErrorStats | None = None  # the table against its raw rows


class Collectives(_Strict):
    interconnect: str  # what the measured all-reduces crossed ("dgx": NVSwitch, "none")
    allreduce: dict[int, list[tuple[float, float]]] = {}  # GPUs -> [(bytes, seconds)], sorted
    latency_s: float = Field(gt=0, allow_inf_nan=False)  # where the table has no GPU count
    bandwidth: float = Field(gt=0, allow_inf_nan=False)  # bytes/s per GPU, one way
    fallback: str  # where latency_s and bandwidth come from

    @field_validator("allreduce")
    @classmethod
    def _sorted(cls, v: dict[int, list[tuple[float, float]]]) -> dict[int, list[tuple[float, float]]]:
        for gpus, rows in v.items():
            if gpus < 2 or not rows:
                raise ValueError(f"all-reduce table for {gpus} GPUs: needs 2+ GPUs and 1+ rows")
            if any(b <= 0 or t <= 0 or not math.isfinite(b + t) for b, t in rows):
                raise ValueError(f"all-reduce table for {gpus} GPUs: sizes and times must be positive")
            if [b for b, _ in rows] != sorted({b for b, _ in rows}):
                raise ValueError(f"all-reduce table for {gpus} GPUs: sizes must increase")
        return v


class FittedOn(_Strict):
    models: list[str]
    tensor_parallel: list[int]
    shapes: int  # (model, TP, tokens) rows fitted
    attention: str  # what the attention terms rest on


# How far a price scaled by datasheet ratios lands from the time measured: measured /
# priced on one measured GPU's layers from another's constants, the least and the most of
# any (source, target) pair's median by region (decode, ridge, prefill), among the A100,
# H100 and A40 (calibration/operators/scaling.py; measured by
# benchmarks/scaled_profile_interval.py: docs/results/2026-12-06-scaled-profile-interval.md).
SCALED_PRICE_INTERVAL = (0.8963, 1.1100)
SCALED_PRICE = "scaled_price"  # the knob: a factor on a borrowed profile's operator terms
SCALED_PRICE_GPUS = "the A100, H100 and A40"  # the GPUs with operator tables it was measured between
SCALED_PRICE_SOURCE = (f"measured / priced of datasheet scaling between {SCALED_PRICE_GPUS} "
                       f"(docs/results/2026-12-06-scaled-profile-interval.md)")


class ScaledFrom(_Strict):
    gpu: str  # the measured GPU
    bandwidth_ratio: float = Field(gt=0)
    peak_ratio: float = Field(gt=0)
    # The interval the scaling's own error allows (SCALED_PRICE_INTERVAL; None: not carried,
    # a profile scaled before it was measured), and the factor priced at (sensitivity moves
    # it): the operators' terms (GEMMs, elementwise, attention) times it; the engine's
    # step_s and seq_s and the collectives have knobs of their own.
    price_low: float | None = Field(None, gt=0, allow_inf_nan=False)
    price_high: float | None = Field(None, gt=0, allow_inf_nan=False)
    price: float = Field(1.0, gt=0, allow_inf_nan=False)

    def interval_text(self) -> str:
        """The interval in words (the assumptions line), '' where none is carried."""
        if self.price_low is None or self.price_high is None:
            return ""
        at = f"; priced at x{self.price:.3g}" if self.price != 1.0 else ""
        return (f"such scaling between {SCALED_PRICE_GPUS} measured x{self.price_low:.2f}-"
                f"x{self.price_high:.2f} of its price{at}")


class GpuProfile(_Strict):
    format: Literal["batchlab-gpu-profile"] = GPU_PROFILE_FORMAT
    version: Literal[2] = GPU_PROFILE_VERSION
    gpu: str  # the hardware preset it prices
    source: str  # data set, repository @ commit, licence
    created: str
    params: dict[str, Param]
    collectives: Collectives
    fitted_on: FittedOn
    heldout: HeldOut
    assumptions: list[str] = []
    scaled_from: ScaledFrom | None = None
    fit_s: float = Field(0.0, ge=0)  # seconds the fit took (folds included)

    @field_validator("params")
    @classmethod
    def _complete(cls, v: dict[str, Param]) -> dict[str, Param]:
        want = set(GpuCostParams.names())
        if set(v) != want:
            missing, extra = sorted(want - set(v)), sorted(set(v) - want)
            raise ValueError(f"params must be exactly the form's constants: missing {missing}, unknown {extra}")
        for n, p in v.items():
            if p.value <= 0 and n not in FIXED_COSTS:  # a rate or ratio of 0 prices nothing
                raise ValueError(f"{n}.value must be > 0, got {p.value!r}")
        return v

    def cost_params(self) -> GpuCostParams:
        return GpuCostParams(**{n: self.params[n].value for n in GpuCostParams.names()})

    def allreduce(self) -> AllReduce:
        c = self.collectives
        table = {g: (tuple(b for b, _ in rows), tuple(t for _, t in rows)) for g, rows in c.allreduce.items()}
        return AllReduce(table, c.latency_s, c.bandwidth)

    def cost(self, model: ModelSpec, tensor_parallel: int | Layout, hw: HardwareSpec) -> GpuCostModel:
        """The form for `model` at this TP degree, or layout, on `hw` (the preset this profile
        prices: its datasheet bandwidth and peak). A layout that does not fit: ValueError."""
        peak16 = hw.flops_for("bf16")
        peak = hw.flops_for("fp8" if model.dtype_bytes == 1 else "bf16")
        params = self.cost_params()
        k = self.scaled_from.price if self.scaled_from else 1.0
        if k != 1.0:  # the operators' terms k times as long; the engine's loop as it is
            params = replace(params.scaled(k, k), step_s=params.step_s, seq_s=params.seq_s)
        return gpu_cost(operator_shapes(model, tensor_parallel), params,
                        hw.mem_bandwidth, peak, peak16, self.allreduce())

    def describe(self) -> str:
        """One line: which profile, from what, and its held-out error."""
        h = self.heldout.overall
        sf = self.scaled_from
        scaled = f", scaled from {sf.gpu} by datasheet ratios" if sf else ""
        if sf and sf.interval_text():
            scaled += f": {sf.interval_text()}"
        error = (f"held-out per-step error median {h.median:.1%}, p90 {h.p90:.1%}" if h.n
                 else "no held-out error (not judged)")
        return f"GPU profile {self.gpu} (fitted on {self.source.split(';')[0]}{scaled}): {error}"

    def knobs(self) -> list[Knob]:
        """Every constant as a Knob: a fitted one over +-2 standard errors widened to at
        least the held-out median error (the standard errors take residuals as independent:
        too narrow alone); an assumed one over its stated range."""
        widen = max(self.heldout.overall.median, 0.01)
        out = []
        for name in GpuCostParams.names():  # in the form's order
            p = self.params[name]
            if p.low is not None and p.high is not None:
                low, high = p.low, p.high
            elif p.value == 0:  # a fixed cost fitted (or read) as nothing: up to 2 standard errors
                low, high = 0.0, 2 * (p.stderr or 0)
            else:
                rel = max(2 * (p.stderr or 0) / p.value, widen)
                low, high = p.value * (1 - rel), p.value * (1 + rel)
            lo_bound, hi_bound, _ = knob_bound(name, p.value)
            low, high = max(low, lo_bound), min(high, hi_bound)  # a range never past what can be
            out.append(Knob(name, p.value, low, high, f"{p.source} ({self.gpu} GPU profile)"))
        sf = self.scaled_from
        if sf and sf.price_low is not None and sf.price_high is not None:
            out.append(Knob(SCALED_PRICE, sf.price, sf.price_low, sf.price_high,
                            f"{SCALED_PRICE_SOURCE}; {self.gpu} borrows {sf.gpu}'s constants"))
        return out

    def with_values(self, values: dict[str, float]) -> GpuProfile:
        """This profile with some constants replaced (a knob dictionary: sensitivity, or
        [hardware] knobs), each within its physical bound (knob_bound)."""
        values = dict(values)
        scaled = self._with_price(values.pop(SCALED_PRICE)) if SCALED_PRICE in values else self.scaled_from
        unknown = set(values) - set(self.params)
        if unknown:
            raise ValueError(f"unknown GPU profile constants {sorted(unknown)}; expected {sorted(self.params)}"
                             + (f" or {SCALED_PRICE} (a profile scaled from another GPU)" if scaled else ""))
        params = dict(self.params)
        for n, v in values.items():  # validated as the profile's own values are (model_copy is not)
            fixed = n in FIXED_COSTS
            lo, hi, what = knob_bound(n, params[n].value)
            try:
                params[n] = Param.model_validate({**params[n].model_dump(), "value": v})
                ok = (fixed or params[n].value > 0) and lo <= params[n].value <= hi
            except ValidationError:
                ok = False
            if not ok:
                raise ValueError(f"GPU profile constant {n} = {v!r}: expected {what}")
        return self.model_copy(update={"params": params, "scaled_from": scaled})

    def _with_price(self, v: float) -> ScaledFrom:
        """scaled_from priced at factor v (SCALED_PRICE): only a profile scaled from another GPU."""
        if self.scaled_from is None:
            raise ValueError(f"{SCALED_PRICE}: {self.gpu}'s profile is its own, not scaled from another GPU")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= MAX_FACTOR:
            raise ValueError(f"GPU profile {SCALED_PRICE} = {v!r}: expected a factor > 0 and <= {MAX_FACTOR:g}")
        return self.scaled_from.model_copy(update={"price": float(v)})

    def save(self, path: str | Path) -> None:
        """Written whole or not at all (a temporary file renamed over the target)."""
        atomic.write_text(path, self.model_dump_json(indent=1) + "\n")


def shipped_gpu_dir() -> Path | None:
    return shipped_dir("gpu")


def shipped_gpu_profiles() -> list[str]:
    return shipped_profiles("gpu")


def parse_gpu_profile(text: str, where: str = "GPU profile") -> GpuProfile:
    data = parse_document(text, where, "GPU profile", GPU_PROFILE_FORMAT, GpuProfileError)
    if data.get("version") == 1:
        data = _from_v1(data)
    if data.get("version") != GPU_PROFILE_VERSION:
        raise GpuProfileError(f"{where}: GPU profile version {data.get('version')!r}; this batchlab reads "
                              f"versions 1 and {GPU_PROFILE_VERSION} (re-run batchlab calibrate --from-operators)")
    try:
        return GpuProfile.model_validate(data)
    except ValidationError as e:
        raise GpuProfileError(f"{where}: {field_error(e, 'GPU profile field')}") from None


def _from_v1(data: dict) -> dict:
    """A version-1 document as version 2: the constants it lacks at the values that price
    as it did (a chunk's own pair as one against cached keys, no per-prefill-token cost)."""
    params = data.get("params")
    if isinstance(params, dict):
        params = {**params, **{n: {"value": v, "source": "not in a version-1 profile: priced as it did",
                                   "low": lo, "high": hi}
                               for n, (v, (lo, hi)) in V1_DEFAULTS.items() if n not in params}}
    return {**data, "version": GPU_PROFILE_VERSION, "params": params}


def load_gpu_profile(name_or_path: str | Path) -> GpuProfile:
    """A file, or the preset name of a shipped GPU profile; GpuProfileError (one line) otherwise."""
    s = str(name_or_path)
    p = Path(s)
    if "/" not in s and not s.endswith(".json") and s in shipped_gpu_profiles():
        p = shipped_gpu_dir() / f"{s}.json"
    def choices() -> str:
        return "a file, or a shipped one: " + (", ".join(shipped_gpu_profiles()) or "none")
    return parse_gpu_profile(read_document(p, "GPU profile", GpuProfileError, choices), str(p))


def scaled_to(profile: GpuProfile, measured: HardwareSpec, target: HardwareSpec) -> GpuProfile:
    """A measured GPU's profile pricing another preset: the fitted efficiencies become the
    same fractions of the target's datasheet bandwidth and peak (the form multiplies them by
    the target's figures), fixed costs stay; the all-reduce table stays where both cross the
    same interconnect, else the fallback runs at the target's datasheet interconnect."""
    bw, peak = target.mem_bandwidth / measured.mem_bandwidth, target.peak_flops / measured.peak_flops
    c = profile.collectives
    scaled = (f"scaled from {measured.name}: the same fractions of {target.name}'s datasheet bandwidth "
              f"(x{bw:.2f}) and 16-bit peak (x{peak:.2f}); fixed costs as measured on {measured.name}")
    note = [scaled]
    if target.interconnect != measured.interconnect:
        c = c.model_copy(update={"allreduce": {}, "bandwidth": target.interconnect_bandwidth or c.bandwidth,
                                 "fallback": f"{measured.name}'s latency, {target.name}'s datasheet "
                                 f"interconnect ({target.interconnect or 'none'})"})
        note.append(f"all-reduce: {c.fallback}")
    return profile.model_copy(update={
        "gpu": target.name, "collectives": c, "assumptions": [*note, *profile.assumptions],
        "scaled_from": ScaledFrom(gpu=measured.name, bandwidth_ratio=round(bw, 4), peak_ratio=round(peak, 4),
                                  price_low=SCALED_PRICE_INTERVAL[0], price_high=SCALED_PRICE_INTERVAL[1])})
