"""A calibration profile: what was measured where, the fitted cost model, how well it
fits. A versioned JSON document; the simulator reads it (load_profile) and never needs
calibration/ or backend/ to do so.

    p = load_profile("batchlab-small-cpu.json")   # or "default" / a shipped name
    cost, blocks, block_size, spec = p.cost_model(), p.num_kv_blocks, p.block_size, p.model
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from batchlab.core.checks import Count, Finite, NonNegative, Tokens, field_error
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.cpu_form import CpuFormModel
from batchlab.core.cost.cpu_form_params import GpuFormParams
from batchlab.core.document import parse_document, read_document
from batchlab.core.cost.fitted import FittedCostModel, Shape
from batchlab.core.front_end import FrontEnd
from batchlab.core.cost.loop_time import Overhead
from batchlab.core.cost.shipped import shipped_dir, shipped_profiles
from batchlab.core.model.presets import MODELS
from batchlab.core.model.spec import ModelSpec
from batchlab.core import atomic

PROFILE_FORMAT = "batchlab-profile"
# Version 2 added `grid` (how the profile was measured); version 3 the cost terms
# after_prefill_s and after_idle_s (and `runs`: served runs fitted on). Versions 1 and 2
# still load, their missing terms 0. Version 4 added s_per_masked_flop (the rate of the
# pairs attention computes beyond causal) and steady_s (a steady decode's change);
# versions before it price them at 0. Version 5 added `front_end` (a server's front end,
# fitted from client timings); versions before it have none. Version 6 added `gpu_form`
# (the GPU form's constants fitted on the sweep, core/cost/cpu_form.py) and `form` (which of
# the two prices the profile); versions before it carry the fitted form only and are priced
# by it, as before.
PROFILE_VERSION = 6
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
FORMS = ("fitted", "gpu")
# A fitted rate this many times the machine's measured one: its term fitted to ~0, the
# grid did not resolve it (recorded as None, reported as such).
UNRESOLVED_RATIO = 100.0
# Fewer measured points than this in a profile that records no grid (version 1): most
# likely a `--grid quick` smoke test (18 points; the default grid has 93).
FEW_POINTS = 30
# Profiles shipped with the package (core/cost/profiles/NAME.json, core/cost/shipped.py);
# "default" names one.
DEFAULT_PROFILE = "batchlab-small-cpu"


class ProfileError(ValueError):
    """A profile that cannot be used; the message is one line naming the file."""


class DeviceInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(description="cpu | cuda")
    name: str = Field(description="CPU model or GPU name")
    threads: int | None = Field(None, description="torch intra-op threads (CPU)")
    dtype: str = "float32"
    matmul: str = ""
    torch: str = ""


class CostParams(BaseModel):
    """core.fitted_cost.FittedCostModel's fitted parameters (seconds per unit)."""
    model_config = ConfigDict(extra="forbid")
    overhead_s: NonNegative
    per_seq_s: NonNegative
    per_chunk_s: NonNegative
    s_per_weight_byte: NonNegative
    s_per_flop: NonNegative
    s_per_kv_byte: NonNegative
    s_per_attn_flop: NonNegative
    small_rows: list[Finite] = Field(default_factory=list, description="extra seconds at 1, 2, ... rows")
    combine: Literal["max", "sum"] = "max"
    after_prefill_s: float = Field(0.0, ge=0, description="extra seconds of a step after a prefill step")
    after_idle_s: float = Field(0.0, ge=0, description="extra seconds of the first step after an idle gap")
    s_per_masked_flop: float = Field(0.0, ge=0, description="seconds per FLOP of the pairs attention "
                                     "computes beyond the causal ones (core/features.py masked_pairs)")
    steady_s: Finite = Field(0.0, description="a steady decode step's seconds against the sweep's "
                             "price (core/cost/fitted.py; negative: faster)")


class RegionError(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int
    median_ape: float | None = Field(description="median absolute percentage error, %")
    max_ape: float | None


class FitQuality(BaseModel):
    """Absolute percentage errors of the fitted model against measured medians."""
    model_config = ConfigDict(extra="forbid")
    heldout: RegionError
    train: RegionError
    regions: dict[str, RegionError] = Field(description="held-out error by region: decode, prefill, mixed")
    spread_median_pct: float | None = Field(None, description="median spread of a point's repeats, % (MAD/median)")


class Effective(BaseModel):
    """The fitted terms as hardware figures, next to what the machine measured. None:
    the term fitted to zero (not measurable on this grid: an infinite rate)."""
    model_config = ConfigDict(extra="forbid")
    mem_bandwidth: float | None = Field(description="bytes/s, weights")
    kv_bandwidth: float | None = Field(description="bytes/s, KV reads")
    flop_rate: float | None = Field(description="FLOP/s, matmuls")
    attn_flop_rate: float | None = Field(description="FLOP/s, attention")
    overhead_s: float = Field(description="fixed seconds per step")
    measured_copy_bandwidth: float | None = Field(None, description="bytes/s, a large tensor copy (read + write)")
    measured_read_bandwidth: float | None = Field(None, description="bytes/s, a large tensor read (sum)")
    measured_matmul_flops: float | None = Field(None, description="FLOP/s, a square matmul")


class GridInfo(BaseModel):
    """Which calibration grid was timed, and how often (calibration.grid.Grid)."""
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="default | quick (a smoke test, not for use) | custom")
    points: int = Field(ge=0)
    rounds: int = Field(ge=0, description="timed rounds a point, at least")
    target_s: float = Field(ge=0, description="seconds of timings a cheap point gets")


class Measurement(BaseModel):
    model_config = ConfigDict(extra="forbid")
    point: str
    region: str
    features: dict[str, int]
    median_s: float
    mad_s: float
    reps: int
    heldout: bool = False


class LoopTime(BaseModel):
    """The serving loop's time between steps while it has work (core/cost/loop_time.py):
    per_step_s + per_seq_s * the next step's sequences. The simulator adds it to every
    step a profile prices; step tables and the per-step errors leave it out."""
    model_config = ConfigDict(extra="forbid")
    per_step_s: NonNegative
    per_seq_s: NonNegative = 0.0
    gaps: int = Field(0, ge=0, description="busy gaps it was fitted on")

    @classmethod
    def fitted(cls, o) -> "LoopTime | None":
        """From a core.loop_time.Overhead fit; None where it saw no busy gap."""
        return cls(per_step_s=o.per_step_s, per_seq_s=o.per_seq_s, gaps=o.gaps) if o.gaps else None

    @property
    def per_step_ms(self) -> float:
        return self.per_step_s * 1e3

    @property
    def per_seq_ms(self) -> float:
        return self.per_seq_s * 1e3


class FrontEndParams(BaseModel):
    """A server's front end before its engine (core/front_end.py), fitted from client
    timings: a delay a request plus a queue of its own handling time a request."""
    model_config = ConfigDict(extra="forbid")
    delay_s: NonNegative
    serial_s: NonNegative = 0.0
    source: str = Field("", description="how it was measured")

    def model(self) -> FrontEnd:
        return FrontEnd(self.delay_s, self.serial_s)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["batchlab-profile"] = PROFILE_FORMAT
    version: Literal[1, 2, 3, 4, 5, 6] = PROFILE_VERSION
    created: str = ""
    model: ModelSpec
    model_source: str = Field("", description="preset name or checkpoint directory")
    device: DeviceInfo
    block_size: Tokens
    num_kv_blocks: Count = Field(description="blocks in the backend's default KV pool")
    cost: CostParams
    fit: FitQuality
    effective: Effective
    grid: GridInfo | None = Field(None, description="the grid measured (None: a version-1 profile)")
    drift_normalisation: str = Field("none", description="none | reference | rolling (calibration.aggregate)")
    sweep_s: float | None = Field(None, description="wall seconds of the sweep (this run's part)")
    total_s: float | None = Field(None, description="wall seconds of calibrate: load, sweep, fit")
    measurements: list[Measurement] | None = None
    measurements_path: str | None = Field(None, description="JSONL of raw timings")
    serving: dict | None = Field(None, description="the serving phase: scale and compute_scale "
                                 "(serving level over the sweep's on memory and fixed costs, and on "
                                 "FLOPs), steps, and per step kind error before/after refining")
    loop: LoopTime | None = Field(None, description="the serving loop's time between steps, "
                                  "measured in the serving phase (absent: steps back to back)")
    runs: list[str] | None = Field(None, description="served runs fitted on (calibrate --from-run, "
                                   "or the calibration's own serving phase)")
    front_end: FrontEndParams | None = Field(
        None, description="the server's front end, where the profile was fitted from client "
        "timings (calibrate --from-replay / --endpoint): simulated before the engine")
    gpu_form: GpuFormParams | None = Field(
        None, description="the GPU form's constants fitted on the same steps (core/cost/cpu_form.py); "
        "absent before version 6")
    form: Literal["fitted", "gpu"] = Field(
        "fitted", description="which form prices the profile: fitted (`cost`, core/cost/fitted.py) "
        "or gpu (`gpu_form`)")
    notes: str = ""

    @model_validator(mode="after")
    def _form_present(self) -> "Profile":
        if self.form == "gpu" and self.gpu_form is None:
            raise ValueError("form 'gpu' needs gpu_form (the GPU form's constants)")
        if self.gpu_form is not None:
            self.gpu_form.model(self.model)  # constants the form cannot use: refused on reading
        return self

    def cost_model(self, bandwidth: float = 1.0, flops: float = 1.0,
                   overhead: float = 1.0) -> FittedCostModel | CpuFormModel:
        """The cost model of the profile's form; the factors make a what-if machine (2.0:
        twice the memory bandwidth / FLOP rate / fixed costs of the one measured)."""
        if self.form == "gpu":
            assert self.gpu_form is not None  # the validator's
            return self.gpu_form.model(self.model, bandwidth, flops, overhead)
        return self.fitted_cost_model(bandwidth, flops, overhead)

    def fitted_cost_model(self, bandwidth: float = 1.0, flops: float = 1.0,
                          overhead: float = 1.0) -> FittedCostModel:
        """The fitted form (`cost`), whichever form prices the profile."""
        c = self.cost
        m = FittedCostModel(Shape.of(self.model), c.overhead_s, c.per_seq_s, c.per_chunk_s,
                            c.s_per_weight_byte, c.s_per_flop, c.s_per_kv_byte,
                            c.s_per_attn_flop, tuple(c.small_rows), c.combine,
                            c.after_prefill_s, c.after_idle_s, c.s_per_masked_flop,
                            c.steady_s)
        return m if (bandwidth, flops, overhead) == (1.0, 1.0, 1.0) else m.scaled(bandwidth, flops, overhead)

    def simulation_cost(self, bandwidth: float = 1.0, flops: float = 1.0,
                        overhead: float = 1.0) -> CostAtSpeed:
        """What the simulator prices a step at: cost_model() plus the serving loop's time
        between steps (scaled with the fixed costs), where the profile measured it."""
        return CostAtSpeed(self.cost_model(bandwidth, flops, overhead), loop=self.loop_overhead(overhead))

    def loop_overhead(self, overhead: float = 1.0) -> Overhead | None:
        """The loop's time between steps as a core.loop_time.Overhead (x `overhead`), or
        None where the profile has none."""
        lp = self.loop
        if lp is None or lp.per_step_s + lp.per_seq_s <= 0:
            return None
        return Overhead(lp.per_step_s * overhead, lp.per_seq_s * overhead, 0.0, lp.gaps)  # mean gap: not kept

    def device_description(self) -> str:
        d = self.device
        where = f"{d.name}, {d.threads} thread(s)" if d.kind == "cpu" and d.threads else d.name
        return f"{d.kind} ({where})"

    def describe(self) -> str:
        return f"{self.model.name} on {self.device_description()}"

    def smoke_test_warning(self) -> str | None:
        """One line when the profile was measured on the quick grid (its fits may be
        non-physical); None for a profile fit for use."""
        n = len(self.measurements or [])
        if self.grid is not None and self.grid.name == "quick":
            reason = f"measured on the quick grid ({self.grid.points} points), a smoke test"
        elif self.grid is None and 0 < n < FEW_POINTS:
            reason = f"records no grid and was measured on only {n} points (a --grid quick smoke test?)"
        else:
            return None
        return f"profile {reason}: its fitted rates are not reliable; for use, calibrate with --grid default"

    def save(self, path: str | Path) -> None:
        atomic.write_text(path, self.model_dump_json(indent=1) + "\n")


def resolve_profile_path(name_or_path: str | Path) -> Path:
    """A file path, or the name of a shipped profile ("default" = DEFAULT_PROFILE)."""
    s = str(name_or_path)
    if s == "default":
        s = DEFAULT_PROFILE
    if "/" not in s and not s.endswith(".json") and s in shipped_profiles():
        return shipped_dir() / f"{s}.json"
    return Path(name_or_path)


def _fill_max_context(data: dict) -> None:
    """Profiles written before ModelSpec had max_context: take it from the preset of the
    same name, else from the checkpoint's config.json if it is still there (else it
    stays unknown)."""
    model = data.get("model")
    if not isinstance(model, dict) or "max_context" in model:
        return  # a bad model field is reported by validation
    preset = MODELS.get(model.get("name")) or MODELS.get(data.get("model_source"))
    if preset is not None:
        model["max_context"] = preset.max_context
        return
    try:
        config = json.loads((Path(str(data.get("model_source"))) / "config.json").read_text())
        model["max_context"] = int(config["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # unknown: no context limit, as for any model whose limit is not known


def parse_profile(text: str, where: str = "profile") -> Profile:
    data = parse_document(text, where, "profile", PROFILE_FORMAT, ProfileError)
    if data.get("version") not in READABLE_VERSIONS:
        raise ProfileError(f"{where}: profile version {data.get('version')!r}; this batchlab "
                           f"reads versions {', '.join(map(str, READABLE_VERSIONS))} "
                           f"(re-run batchlab calibrate)")
    _fill_max_context(data)
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        raise ProfileError(f"{where}: {field_error(e, 'profile field')}") from None


def load_profile(path: str | Path) -> Profile:
    """Read a profile file or a shipped profile's name; ProfileError (one line) otherwise."""
    p = resolve_profile_path(path)
    def choices() -> str:
        return "a file, or one of: " + ", ".join(["default", *shipped_profiles()])
    return parse_profile(read_document(p, "profile", ProfileError, choices), str(p))
