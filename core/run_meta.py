"""What a run's meta.json says, typed: RunMeta (what ran, on what, how it went) and the
records it holds, Stability (core/stability.py's verdict) and MachineSpeed (how fast the
machine ran during a real run, measured by experiments/machine_speed.py). The run folder
(core/run_folder.py) writes and reads them; code reads attributes, never string keys.

Every producer (the simulator, the backend driver, the server, the replay client) adds
its own keys in its own order, and callers add theirs (a profile's description, a
validation's variant), so a record keeps the keys it was given, in that order, and writes
back exactly those: what batchlab wrote before reads back and writes out byte for byte.
Fields the code reads are declared (typed, None where a run did not record them); the
others a producer adds are kept as they came (extra keys, readable as attributes too)."""
from __future__ import annotations

from numbers import Real
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator, PrivateAttr, model_validator
from pydantic_core import PydanticCustomError

from batchlab.core.checks import number

Whole = Annotated[int, number(int)]  # a count: a boolean or a string is not one


def _as_given(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, Real):
        raise PydanticCustomError("number_type", "Input should be a number")
    return v


# A measured figure, kept as it came: JSON tells 2 from 2.0, so an int stays an int.
Number = Annotated[float | int, PlainValidator(_as_given)]


class Record(BaseModel):
    """A JSON object with typed fields that remembers which keys it was given, and in
    what order (assigning a field that was not there appends it)."""
    model_config = ConfigDict(extra="allow", validate_assignment=True)
    _keys: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler):
        record = handler(data)
        if isinstance(data, dict):  # not on assignment, where data is the record itself
            record._keys = list(data)
        return record

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if not name.startswith("_") and name not in self._keys:
            self._keys.append(name)

    def __copy__(self):
        """A shallow copy with its own key list: a key added to one is not added to both."""
        copied = super().__copy__()
        copied._keys = list(self._keys)
        return copied

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):
        """A copy, `update` assigned as fields are (validated, new keys appended)."""
        copied = super().model_copy(deep=deep)
        copied._keys = list(self._keys)
        for name, value in (update or {}).items():
            setattr(copied, name, value)
        return copied

    def recorded(self, name: str) -> bool:
        """Whether the record has the key (None where it was recorded as null)."""
        return name in self._keys

    def as_dict(self) -> dict[str, Any]:
        """The keys given, in their order, records within as dicts: what JSON gets."""
        out = {}
        for key in self._keys:
            value = getattr(self, key)
            out[key] = value.as_dict() if isinstance(value, Record) else value
        return out


class Stability(Record):
    """A run's stable/overloaded verdict (core/stability.py), computed once, kept in its meta."""
    verdict: str | None = None  # stable | overloaded
    queue_by_quarter: list[Number | None] | None = None


class MachineSpeed(Record):
    """How fast the machine ran during a real run, against a profile's price of the run's
    own steps (experiments/machine_speed.py says how). factor > 1: slower than when the
    profile was measured. factor None: not measured, and `why`."""
    method: str | None = None
    profile: str | None = None  # the profile that priced the steps
    factor: Number | None = None  # memory side: uncontended steady decodes, total / total price
    steps: int = 0  # steps the factor was measured on
    why: str | None = None  # why factor is None
    probe: dict | None = None  # without a profile: a reference probe timed before and after
    steps_used: str | None = None  # "steady decode", or every decode-only step (too few)
    candidates: int | None = None  # steps of that kind; steps = those left after dropping contended ones
    contended: int | None = None  # candidates dropped as contended (over CONTENDED x their price)
    total_steps: int | None = None  # every step of the run
    all_factor: Number | None = None  # total / total price over every candidate, contended included
    spread: Number | None = None  # IQR of the steps' ratios over their median
    drift: Number | None = None  # p90 - p10 of the windows' levels over the factor
    drift_windows: int | None = None  # windows of the run's clock with a level of their own
    drift_range: list[Number] | None = None  # [p10, p90] of the windows' levels
    drift_levels: list[tuple[Number, Number]] | None = None  # [start_s, level] per window
    compute_method: str | None = None
    compute_factor: Number | None = None  # compute side: FLOP terms of compute-bound steps
    compute_steps: int | None = None
    compute_spread: Number | None = None
    compute_why: str | None = None  # why compute_factor is None

    @property
    def windows(self) -> tuple[tuple[float, float], ...]:
        """(start_s, memory level) of each window, for core/cost/at_speed.py."""
        return tuple((float(t), float(k)) for t, k in self.drift_levels or ())


class Speculation(Record):
    """What speculative decoding did in a run (core/speculative/emission.py for a
    simulation, backend/speculative/ for a real one)."""
    method: str | None = None
    num_speculative_tokens: int | None = None
    verifications: int = 0  # decode steps of a sequence that ran drafts
    accepted_tokens: int = 0  # drafts those steps kept
    mean_acceptance_length: Number | None = None  # tokens kept a verification (1 + accepted / verifications)
    acceptance_counts: list[int] | None = None  # a real run's: verifications of k drafts keeping 1..k+1
    draft_cost_share: Number | None = None  # a real run's: the draft's weight bytes a pass over the target's
    draft_model: str | None = None  # a real run's separate draft (None: the target's own layers, its KV shared)


class RunMeta(Record):
    """A run's meta.json. world says which world ran it; the rest depends on the world
    and the producer (see the module docstring)."""
    world: str | None = None  # sim | real
    source: str | None = None  # serve, replay (a real run's producer), or a profile's origin
    policy: str | None = None
    replicas: int | None = None
    router: str | None = None
    num_kv_blocks: Whole | None = None  # the KV pool it ran with (per replica)
    block_size: Whole | None = None
    workload: str = ""  # Workload.describe()
    scheduler: dict | None = None  # every SchedulerConfig setting of a real run (validate --real)
    cost_model: str | None = None  # a simulation's price: roofline, profile, a variant's name
    interrupted: bool = False  # Ctrl-C: the tables hold what ran until then
    simulated_s: Number | None = None
    # A real run: the model and the machine it ran on (backend Runtime.meta()).
    model: str | None = None
    model_source: str | None = None  # preset, checkpoint, or a loaded model
    model_params: Number | None = None
    weight_bytes_per_step: Number | None = None
    kv_bytes_per_token: Number | None = None
    dtype: str | None = None
    device: str | None = None
    threads: int | None = None
    cpu: str | None = None
    gpu: str | None = None
    matmul: str | None = None
    fast_path: str | None = None  # backend FastPath.label(), when not the reference path
    torch: str | None = None
    # ... how it went (backend/driver.py, backend/server/engine_loop.py)
    wall_s: Number | None = None
    idle_s: Number | None = None
    heap_trims: int | None = None  # batchlab serve: malloc_trim calls (backend/server/memory.py)
    heap_trim_s: Number | None = None  # ... and the engine time they took
    steps: int | None = None
    engine_forward_s: Number | None = None
    engine_prepare_s: Number | None = None
    scheduler_overhead_s: Number | None = None  # outside the engine while there was work
    scheduler_overhead_ms_per_step: Number | None = None
    requests_received: int | None = None  # batchlab serve
    error: str | None = None  # batchlab serve: why it stopped, if not asked to
    failed: int = 0  # batchlab replay: requests that failed
    invalid: int = 0  # batchlab replay: replies whose server's claims disagree with the stream
    max_concurrency: int | None = None  # batchlab replay: closed-loop users, if any
    unobserved: list[str] = []  # request times a client cannot see (replay)
    # ... what else ran on the machine (experiments/validation/pair.py)
    cpu_share: Number | None = None
    loadavg_1min: list[Number] | None = None
    others_cpu: Number | None = None
    steal_cpu: Number | None = None
    # ... and what judging it found (experiments/run_labels.py)
    machine_speed: MachineSpeed | None = None
    stability: Stability | None = None
    speculative: Speculation | None = None  # only where a run speculated
