"""An experiment as one pydantic model; a TOML file has the same sections:
[workload] [scheduler] [model] [hardware] [profile] [run] [speculative] [kv_tier] (and
[deployment], for prefill/decode pools: experiments/disaggregation/config.py)."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from batchlab.core import text_input
from batchlab.core.checks import Count, Efficiency, Finite, Fraction, KVMemory, NonNegative, Seconds, shown
from batchlab.core.config import SchedulerConfig
from batchlab.core.kv_tiers import TierConfig
from batchlab.core.orders import ADMISSION_ORDERS, VICTIM_ORDERS, lookup
from batchlab.core.params import validate_params
from batchlab.core.schedulers import policy_class
from batchlab.core.model.hardware import DATASHEET_FIELDS, HARDWARE, DatasheetFigures, HardwareFigures, HardwareSpec
from batchlab.core.model.layout import Layout
from batchlab.core.speculative.config import SpeculativeConfig
from batchlab.core.summary import SLO
from batchlab.core.workload import WorkloadConfig
from batchlab.experiments.disaggregation.config import DeploymentConfig
from batchlab.experiments.errors import UserError, describe_validation_error
from batchlab.experiments.fast_options import FastChoice


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field("llama-3-8b", description="simulator: a model preset; backend: a named size or a checkpoint dir")
    dtype: str = Field("float32", description="backend: float32 | bfloat16 | float16; simulator: "
                       "the weights' dtype, bf16 | fp16 | fp8 (default: the preset's, bf16)")
    kv_cache_dtype: str = Field("auto", description="simulator: the KV cache's dtype, auto (the "
                                "weights') | bf16 | fp16 | fp8, as vLLM's --kv-cache-dtype")
    device: str = Field("cpu", description="backend: cpu | cuda")
    threads: Count = Field(1, le=4096, description="backend: torch threads on CPU")
    kv_memory: KVMemory | None = Field(None, description="backend: KV pool, a size (2GiB) or a fraction "
                                  "of free memory (0.5); default 1GiB on cpu, 0.8 on cuda")
    matmul: Literal["auto", "onednn", "torch"] = Field("auto", description="backend: GEMM kernel")
    # The fast path (experiments/fast_options.py); left out of config.json at its defaults.
    attention: Literal["gather", "paged"] = Field("gather", description="backend: gather (the "
                                                  "reference) | paged (KV read in place)")
    fused: bool = Field(False, description="backend: compiled elementwise kernels")
    cuda_graphs: bool = Field(False, description="backend: replay decode steps as CUDA graphs")
    one_row_decode: bool = Field(False, description="backend (CPU, float32): one-sequence decode steps in native code")

    def fast_choice(self) -> FastChoice:
        return FastChoice(self.attention, self.fused, self.cuda_graphs, self.one_row_decode)


class _HardwareHead(BaseModel):
    """HardwareConfig's first fields, the GPU's name and the replica's layout: a base of its
    own so that the datasheet figures HardwareConfig inherits (declared once, in
    core/model/hardware.py DatasheetFigures) come after them. Pydantic orders inherited
    fields base first (HardwareConfig(DatasheetFigures, _HardwareHead): these, the figures,
    then its own), the order config.json is dumped in."""
    name: str = Field("a100-80gb", description=f"one of {', '.join(HARDWARE)}, or any name "
                      "with the GPU's figures below")
    tensor_parallel: Count = Field(1, le=4096)
    pipeline_parallel: Count = Field(1, le=4096, description="pipeline stages per replica")
    expert_parallel: Count = Field(1, le=4096, description="GPUs the routed experts are spread "
                                   "over (1, or tensor_parallel)")
    data_parallel_attention: bool = Field(False, description="attention data-parallel over "
                                          "the tensor-parallel GPUs (MLA engines)")


class HardwareConfig(DatasheetFigures, _HardwareHead):
    """The GPU (a catalogue name, or a name with its datasheet figures for one the
    catalogue lacks: the same fields as core/model/presets/hardware.toml; figures given with a
    catalogue name replace its own) and the layout of one replica over such GPUs."""
    model_config = ConfigDict(extra="forbid")
    mem_efficiency: Efficiency = Field(0.8, description="achieved fraction of datasheet bandwidth")
    compute_efficiency: Efficiency = Field(0.6, description="achieved fraction of datasheet FLOP/s")
    step_overhead_s: Seconds = Field(0.002, description="fixed per-step cost (launches, scheduling)")
    allreduce_latency_s: Seconds | None = Field(
        None, description="fixed cost of one TP all-reduce; default: the preset's (45 us)")
    gpu_memory_utilization: Fraction = Field(0.9, description="share of memory for weights + KV")
    cost: Literal["auto", "gpu-profile", "roofline"] = Field(
        "auto", description="how a GPU preset's steps are priced: gpu-profile (fitted on measured "
        "operators; the nearest measured GPU scaled by datasheet ratios where the preset has none), "
        "roofline (the assumed efficiencies above), auto (gpu-profile, unless a roofline constant "
        "above is given)")
    gpu_profile: str | None = Field(None, description="a GPU profile file (batchlab calibrate "
                                    "--from-operators) instead of the preset's shipped one")
    served_engine: str = Field("vllm", description="what a served engine adds to or removes from a GPU "
                               "profile's kernels: vllm (the shipped terms, fitted on served vLLM "
                               "benchmarks), none (the kernels' sum, eager), or a served profile file "
                               "(batchlab calibrate --from-served)")
    knobs: dict[str, Finite] = Field(default_factory=dict, description="the GPU profile's constants "
                                    "replaced by value, by knob name (capacity --sensitivity)")

    @model_validator(mode="after")
    def _a_link_where_gpus_talk(self) -> HardwareConfig:
        """interconnect_gbs 0 means no link: with several GPUs to a replica their all-reduces
        (or sends) would cross nothing and cost nothing, so it is refused there."""
        if self.interconnect_gbs == 0 and (self.gpus > 1 or self.expert_parallel > 1):
            raise ValueError(f"interconnect_gbs = 0 (no link) with {self.gpus} GPUs a replica "
                             f"(tensor_parallel {self.tensor_parallel}, pipeline_parallel "
                             f"{self.pipeline_parallel}): their collectives would be free; give the "
                             f"link's bandwidth in GB/s (> 0), or leave it to the preset")
        return self

    def spec(self) -> HardwareSpec:
        """The GPU: the catalogue's, or the one these figures describe (UserError, one
        line naming the field, where they are incomplete or the name is unknown)."""
        figures = HardwareFigures(**{k: getattr(self, k) for k in DATASHEET_FIELDS})
        base = HARDWARE.get(self.name)
        if base is None and not figures.given():
            raise UserError(f"unknown hardware preset {shown(self.name)}; expected one of "
                            f"{', '.join(HARDWARE)}, or its figures in [hardware] (memory_gib, "
                            f"mem_bandwidth_gbs, bf16_tflops, ...)")
        try:
            return figures.spec(self.name, base, where="[hardware] ") if figures.given() else base
        except ValueError as e:
            raise UserError(str(e)) from None

    def layout(self) -> Layout:
        return Layout(tp=self.tensor_parallel, pp=self.pipeline_parallel, ep=self.expert_parallel,
                      dp_attention=self.data_parallel_attention)

    @property
    def gpus(self) -> int:
        """GPUs of one replica."""
        return self.tensor_parallel * self.pipeline_parallel


class ProfileConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(None, description="calibration profile (file or shipped name): "
                             "its cost model, KV capacity and model replace the roofline")


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policies: list[str] | None = Field(None, description="compare these; default [scheduler].policy")
    admissions: list[str] | None = Field(
        None, description="compare these admission orders (one run per policy and order); "
        "default [scheduler].admission")
    replicas: Count = 1
    router: str = "round_robin"
    time_scale: NonNegative = Field(1.0, le=1e6, description="run: multiply arrival times by K (0: all at once)")
    temperature: NonNegative = Field(0.0, le=1e6, description="run: sampling temperature (0: greedy)")
    slo: SLO | None = None

    @field_validator("policies")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        for p in v or []:
            policy_class(p)  # a plug-in is resolved (and must resolve) here
        if v is not None and not v:
            raise ValueError("needs at least one policy")
        return v

    @field_validator("admissions")
    @classmethod
    def _known_orders(cls, v: list[str] | None) -> list[str] | None:
        for a in v or []:
            lookup(ADMISSION_ORDERS, a, "admission order")
        if v is not None and not v:
            raise ValueError("needs at least one admission order")
        return v


class ExperimentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workload: WorkloadConfig = WorkloadConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    model: ModelConfig = ModelConfig()
    hardware: HardwareConfig = HardwareConfig()
    profile: ProfileConfig = ProfileConfig()
    run: RunConfig = RunConfig()
    kv_tier: TierConfig | None = None  # a tier below the GPU's KV pool (core/kv_tiers/)
    speculative: SpeculativeConfig = SpeculativeConfig()
    # Prefill/decode pools (experiments/disaggregation): left out of model_dump, so that
    # every config.json of a run without it stays as it was; record() adds it when set.
    deployment: DeploymentConfig | None = Field(None, exclude=True)
    # Scheduler fields the embedded demo set and the user did not (load_experiment): not
    # the user's choice, nor the engine's default; the assumptions line says whose they are.
    _demo_scheduler: frozenset[str] = PrivateAttr(default=frozenset())

    @field_validator("scheduler")
    @classmethod
    def _names_known(cls, v: SchedulerConfig) -> SchedulerConfig:
        policy_class(v.policy)
        lookup(ADMISSION_ORDERS, v.admission, "admission order")
        lookup(VICTIM_ORDERS, v.preemption, "preemption victim order")
        return v

    @model_validator(mode="after")
    def _options_apply(self) -> "ExperimentConfig":
        # A setting no policy of this run reads would be silently ignored: say so instead.
        if self.scheduler.max_batch_delay_s and "static" not in self.policies():
            raise ValueError(f"scheduler.max_batch_delay_s (--max-batch-delay) applies to the "
                             f"static policy only; this run's policies: {', '.join(self.policies())}")
        # Each parameter is validated against every compared policy that declares it; one
        # that none of them declares is an error, as an unknown field is.
        given = self.scheduler.params
        for name in given:
            if not any(name in policy_class(p).Params.model_fields for p in self.policies()):
                declared = {p: ", ".join(policy_class(p).Params.model_fields) or "none"
                            for p in self.policies()}
                raise ValueError(f"scheduler.params.{name} (--policy-param): no policy of this run "
                                 f"declares it ({'; '.join(f'{p}: {d}' for p, d in declared.items())})")
        for p in self.policies():
            validate_params(p, policy_class(p).Params, self._params_of(p), strict=True)
        return self

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """[speculative] only where a run speculates, [kv_tier] only where a tier is set:
        every other run's config.json, and a sweep point's hash of its config, stay what
        they were before the sections existed."""
        data = super().model_dump(**kwargs)
        if not self.speculative.on:
            data.pop("speculative", None)
        if self.kv_tier is None:
            data.pop("kv_tier", None)
        for name, value in FastChoice().__dict__.items():  # the reference path: as before
            if data.get("model", {}).get(name, value) == value:
                data.get("model", {}).pop(name, None)
        return data

    def policies(self) -> list[str]:
        return self.run.policies or [self.scheduler.policy]

    def admissions(self) -> list[str]:
        return self.run.admissions or [self.scheduler.admission]

    def runs(self) -> list[tuple[str, str, str]]:
        """(name, policy, admission order) of each run compared: every policy with every
        admission order. The name keys the tables, the JSON and the --out folders: the
        policy alone when one order is compared, else policy+order."""
        several = len(self.admissions()) > 1
        return [(f"{p}+{a}" if several else p, p, a) for p in self.policies() for a in self.admissions()]

    def _params_of(self, policy: str) -> dict[str, Any]:
        declared = policy_class(policy).Params.model_fields
        return {k: v for k, v in self.scheduler.params.items() if k in declared}

    def policy_params(self) -> dict[str, dict[str, Any]]:
        """Every compared policy's parameters with defaults filled in (for config.json)."""
        return {p: validate_params(p, policy_class(p).Params, self._params_of(p)).model_dump()
                for p in self.policies()}

    def unused(self, fields: dict[str, str]) -> dict[str, str]:
        """Of `fields` ("table.field" -> why a command ignores it), those set in this
        config (by a file or a flag; a default is not the user's)."""
        return {f: why for f, why in fields.items()
                if f.split(".")[1] in getattr(self, f.split(".")[0]).model_fields_set}

    def record(self, ignored: tuple[str, ...] = (), ran: dict[str, Any] | None = None
               ) -> dict[str, Any]:
        """What config.json records: what ran. The policies run (not [scheduler]
        policy, overridden by [run] policies), without the tables or fields (`ignored`:
        "table" or "table.field") the command does not use, so that a simulated 70B
        is never recorded as float32 on cpu; `ran` ("table.field" -> value) replaces
        a field by what the command resolved it to (the dtype a preset is served in)."""
        data = self.model_dump()
        data["run"]["policies"] = self.policies()
        del data["scheduler"]["policy"]
        for name in ignored:
            table, _, field = name.partition(".")
            if field:
                data[table].pop(field, None)
            else:
                data.pop(table, None)
        for name, value in (ran or {}).items():
            table, _, field = name.partition(".")
            data[table][field] = value
        data["run"]["admissions"] = self.admissions()
        data["policy_params"] = self.policy_params()  # each policy's, defaults filled in
        if self.deployment is not None:
            data["deployment"] = self.deployment.model_dump()
        return data

    def scheduler_for(self, policy: str, max_context: int | None = None,
                      admission: str | None = None) -> SchedulerConfig:
        """One policy's scheduler (with the parameters it declares, and `admission` if
        given). max_model_len defaults to the model's context length (max_context) and
        may not exceed it, as in vLLM."""
        limit = self.scheduler.max_model_len
        if limit is not None and max_context is not None and limit > max_context:
            raise UserError(f"scheduler.max_model_len={limit} exceeds the model's context "
                            f"length of {max_context} tokens")
        return self.scheduler.model_copy(update={
            "policy": policy, "max_model_len": limit or max_context, "params": self._params_of(policy),
            "admission": admission or self.scheduler.admission})

    def schedulers(self, max_context: int | None = None) -> dict[str, SchedulerConfig]:
        """Each run's scheduler, by run name (see runs())."""
        return {name: self.scheduler_for(p, max_context, a) for name, p, a in self.runs()}


def read_toml(path: str | Path) -> dict[str, Any]:
    try:  # a byte-order mark and CR-only line endings read as any other config
        return tomllib.loads(text_input.read_text(path))
    except FileNotFoundError:
        raise UserError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text (a binary file?); expected a TOML config") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None


def build_config(data: dict[str, Any], where: str = "") -> ExperimentConfig:
    """Validate TOML (and command-line) values strictly: a TOML `true` is not a seat count
    and "20" is not a rate (lax pydantic would coerce both); an int where a float is
    expected is fine. Command-line values arrive already typed by argparse."""
    try:
        return ExperimentConfig.model_validate(data, strict=True)
    except ValidationError as e:
        raise UserError(describe_validation_error(e, where)) from None
