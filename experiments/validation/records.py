"""A validation's judgement, typed: what `batchlab validate` prints, writes as JSON
(comparison.json, rejudged.json, --format json) and what the fidelity study keeps and
reads back (model_validate), never by string keys.

    Validation      the profile judged on every cell: profile, cells, totals, per_step, step_kinds
    JudgedCell      one policy's real runs of one request list: stability, machine speed per
                    run, a MetricRow per judged number, their Totals, and the diagnostics its
                    source allows (CellDiagnostics: live runs only)
    MetricRow       the real runs' values and Spread, the simulated value, the error raw and
                    normalised, the verdicts

Fields are written in the order declared: a stored run's judgement (`validate --real`)
writes the very layout it always has, and the fields that only a live source fills (marked
OPTIONAL) are left out where they are None. Numbers are kept as they came (an int stays
an int: JSON tells 2 from 2.0); JSON has no NaN, so a NaN is written null and reads back
None."""
from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, PlainValidator
from pydantic_core import PydanticCustomError

from batchlab.core.run_meta import MachineSpeed


def _as_given(v: Any) -> Any:
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return v
    raise PydanticCustomError("number_type", "Input should be a number or null")


Num = Annotated[Optional[float], PlainValidator(_as_given)]  # a number as given; null: NaN
OPTIONAL = {"optional": True}  # a field left out of the JSON where it is None


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore")

    def as_dict(self) -> dict[str, Any]:
        """The JSON object: every field in order, records within as objects, OPTIONAL
        fields only where set."""
        out = {}
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if value is None and (info.json_schema_extra or {}).get("optional"):
                continue
            out[name] = _plain(value)
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Record) or isinstance(value, MachineSpeed):
        return value.as_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class Spread(Record):
    """How far the real runs' values of one number spread (stat_tests.spread)."""
    min: Num
    max: Num
    median: Num
    range: Num  # (max - min) / median
    pairwise_median: Num  # median |relative difference| over pairs of runs
    n: int


class MetricRow(Record):
    """One number of the summary judged (verdicts.metric_rows)."""
    key: str  # the summary key, e.g. p99_ttft_ms
    metric: str  # TTFT
    stat: str  # mean | p50 | p90 | p99 | value
    real: list[Num]  # per real run
    sim: Num  # the headline simulation
    spread: Spread
    sim_inside: Optional[bool]  # sim within the real runs' [min, max]
    error: Num  # median over the real runs of (sim - real) / real
    error_normalised: Num  # the same against each run's normalised simulation
    target: Num  # allowed |error|; None: reported, not judged
    overloaded: bool  # a latency of an overloaded run: not judged
    verdict: str  # ok | miss | undecidable | overloaded | '' (no target)
    verdict_normalised: Optional[str]  # None: no run had steps to normalise by

    @property
    def label(self) -> str:
        return self.metric if self.stat == "value" else f"{self.metric} {self.stat}"


class Counts(Record):
    ok: int = 0
    miss: int = 0
    undecidable: int = 0
    overloaded: int = 0


class Totals(Record):
    """Over metric rows, as the fidelity study counts them (verdicts.totals)."""
    within: int
    judged: int
    within_normalised: int
    judged_normalised: int
    faster: int
    latency: int
    faster_normalised: int
    latency_normalised: int
    verdicts: Counts
    verdicts_normalised: Counts


class RunSpeed(Record):
    """A real run's machine speed as the judged profile prices its steps: memory side
    (steady decodes), compute side (FLOP terms of compute-bound steps); None: not measured."""
    factor: Num = None
    compute_factor: Num = None


class CellStability(Record):
    real: list[Optional[str]]  # per real run: stable | overloaded (None: not observable)
    sim: Optional[str]


class KsTest(Record):
    statistic: Num
    p: Num
    same: Optional[bool]  # not rejected at alpha
    n: list[int]


class TostTest(Record):
    ratio: Num  # of geometric means
    p: Num
    equivalent: Optional[bool]
    margin: float


class DistributionTests(Record):
    """One latency distribution: the simulation against the pooled real runs, and the
    same tests between every two real runs (which say whether a test decides here)."""
    stem: str
    metric: str
    ks: KsTest
    tost: TostTest
    real_vs_real_ks: list[KsTest]
    real_vs_real_tost: list[TostTest]
    ks_decides: bool
    tost_decides: bool


class DurationError(Record):
    """The profile's price of each step against its measured time (steps.duration_error)."""
    steps: int
    median_ape: Num
    p90_ape: Num
    total_error: Num  # signed, of the total
    median_ratio: Num  # measured / price


class StepMatch(Record):
    """The real and the simulated schedules side by side (steps.step_match)."""
    real_steps: int
    sim_steps: int
    identical: bool
    first_divergence: Optional[int]
    coincide_prefix: int
    matched: int  # steps of identical work (equal compositions) anywhere in the runs
    matched_fraction: Num


class Divergence(Record):
    """Why the schedules part at their first divergence (divergence.explain)."""
    step: Optional[int]
    reason: str
    real_start_s: Num = Field(None, json_schema_extra=OPTIONAL)
    sim_start_s: Num = Field(None, json_schema_extra=OPTIONAL)
    clock_drift_s: Num = Field(None, json_schema_extra=OPTIONAL)
    real_batch: Optional[str] = Field(None, json_schema_extra=OPTIONAL)
    sim_batch: Optional[str] = Field(None, json_schema_extra=OPTIONAL)
    arrivals_between: Optional[list[int]] = Field(None, json_schema_extra=OPTIONAL)
    only_real: Optional[list[int]] = Field(None, json_schema_extra=OPTIONAL)
    only_sim: Optional[list[int]] = Field(None, json_schema_extra=OPTIONAL)


class RunConditions(Record):
    """What a real run met on its machine (a live run's meta)."""
    model: Optional[str] = None
    device: Optional[str] = None
    threads: Optional[int] = None
    wall_s: Num = None
    cpu_share: Num = None  # of a CPU while busy (below 1: others took the core mid-step)
    others_cpu: Num = None  # CPUs other processes used meanwhile
    steal_cpu: Num = None
    loadavg_1min: Optional[list[Num]] = None  # before, after
    failed: int = 0  # requests that failed (a replay)


class CellDiagnostics(Record):
    """What a live source allows besides the judged numbers: the first real run's step
    matching and per-step error, each run's machine speed (drift) and conditions, and the
    distribution tests with two real runs or more."""
    workload: str
    runs: list[RunConditions]
    speeds: list[MachineSpeed]  # of the runs with a step table
    steps: Optional[StepMatch] = None  # with each step's composition (served here)
    divergence: Optional[Divergence] = None
    step_error: Optional[DurationError] = None  # every real step of the first run
    distributions: list[DistributionTests] = []
    undecidable: list[str] = []


class JudgedCell(Record):
    """One policy's real runs of one request list, judged."""
    where: str  # the runs' folder, "served here" or the endpoint
    policy: str
    runs: int
    stability: CellStability
    machine_speed: list[RunSpeed]
    metrics: list[MetricRow]
    totals: Totals
    diagnostics: Optional[CellDiagnostics] = Field(None, json_schema_extra=OPTIONAL)

    def row(self, key: str) -> MetricRow:
        return next(m for m in self.metrics if m.key == key)


class PerStep(Record):
    """Issue 14's per-step test (per_step.py)."""
    steps: int
    median_ape: Num
    median_ape_normalised: Num
    faster_share: Num
    real_vs_real: Num
    pairs: int
    met: Optional[bool]
    level_total: Num = Field(None, json_schema_extra=OPTIONAL)
    level_median: Num = Field(None, json_schema_extra=OPTIONAL)
    median_ape_at_total: Num = Field(None, json_schema_extra=OPTIONAL)
    median_ape_at_median: Num = Field(None, json_schema_extra=OPTIONAL)
    real_vs_real_apart: Num = Field(None, json_schema_extra=OPTIONAL)
    pairs_apart: Optional[int] = Field(None, json_schema_extra=OPTIONAL)


class KindRow(Record):
    """One kind of step (step_kinds.py): measured time over the profile's price."""
    kind: str
    steps: int
    ratio: Num
    ratio_normalised: Num
    ape: Num
    ape_normalised: Num


class ProfileInfo(Record):
    """Where the judged profile came from (profile_source.describe)."""
    source: str
    describe: str
    created: str
    heldout_median_ape_pct: Num
    warnings: Optional[list[str]] = Field(None, json_schema_extra=OPTIONAL)
    calibration_s: Num = Field(None, json_schema_extra=OPTIONAL)


class Validation(Record):
    """A profile judged on the cells of one source."""
    profile: ProfileInfo
    cells: list[JudgedCell]
    totals: Totals
    per_step: Optional[PerStep] = Field(None, json_schema_extra=OPTIONAL)  # runs with step tables
    step_kinds: Optional[list[KindRow]] = Field(None, json_schema_extra=OPTIONAL)  # live runs
