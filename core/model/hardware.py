"""Accelerators: HardwareSpec, the catalogue of datasheet figures it is read from
(core/model/presets/hardware.toml, each entry with its source), and the same figures given in a
config's [hardware] table for a GPU the catalogue lacks (DatasheetFigures, HardwareFigures).

Figures are the vendors' (dense, no sparsity; bf16/fp16 and, where the GPU has them, fp8
and fp4 tensor-core peaks). What a real engine achieves is lower: the roofline scales
them by efficiencies."""
from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from batchlab.core.checks import NonNegative, Positive, Seconds

CATALOGUE = Path(__file__).parent / "presets" / "hardware.toml"
MIB = 2**20
# All-reduce latency: what one collective costs however small, 45 us, the low end of the
# 45-90 us of Vidur's profiled NCCL all-reduces on A100 (a launch, a handshake, a sync);
# the same figure is assumed on every preset, PCIe included, for want of a measurement
# (--collective-latency-us sets it). EP all-to-alls and PP sends are charged the same.
ALLREDUCE_LATENCY_S = 45e-6


class HardwareSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    memory_bytes: Positive
    mem_bandwidth: Positive = Field(description="bytes/s")
    peak_flops: Positive = Field(description="dense bf16/fp16 tensor-core FLOP/s")
    peak_flops_fp8: NonNegative = Field(0.0, description="dense fp8 tensor-core FLOP/s; 0 = no fp8")
    peak_flops_fp4: NonNegative = Field(0.0, description="dense fp4 tensor-core FLOP/s; 0 = no fp4")
    interconnect_bandwidth: NonNegative = Field(0.0, description="bytes/s per GPU for all-reduce; 0 = none")
    interconnect: str = Field("", description="what the all-reduces cross (NVLink, PCIe)")
    allreduce_latency_s: Seconds = Field(0.0, description="fixed cost of one all-reduce")
    source: str = Field("", description="where the figures come from")

    @property
    def nvlink(self) -> bool:
        """Whether its GPUs talk over NVLink (an engine's own all-reduce needs it past two)."""
        return "nvlink" in self.interconnect.lower()

    def flops_for(self, dtype: str) -> float:
        """Dense tensor-core FLOP/s for weights in `dtype` (a DTYPES key)."""
        if dtype == "fp8":
            if not self.peak_flops_fp8:
                raise ValueError(f"hardware {self.name!r} has no fp8 tensor cores; use bf16 or fp16 "
                                 f"weights (fp8 is priced on {', '.join(fp8_hardware())})")
            return self.peak_flops_fp8
        return self.peak_flops


MAX_MEMORY_GIB = 200_000.0
MAX_BANDWIDTH_GBS = 10_000_000.0
MAX_TFLOPS = 10_000_000.0


class DatasheetFigures(BaseModel):
    """A GPU's datasheet figures, declared here once: the catalogue's (HardwareFigures) and
    a config's [hardware] table's (experiments/config.py HardwareConfig, which inherits them
    in this order: its dumped config.json keeps it). Memory in GiB (or MiB), bandwidths in
    GB/s, peaks in dense TFLOP/s."""

    # Upper bounds: a thousand times today's largest figure (B200: 192 GB, 8 TB/s, 2.25
    # dense bf16 PFLOP/s, 900 GB/s NVLink 5). Beyond them a step is priced at nothing.
    memory_gib: Positive | None = Field(None, le=MAX_MEMORY_GIB)
    memory_mib: Positive | None = Field(None, le=MAX_MEMORY_GIB * 1024)
    mem_bandwidth_gbs: Positive | None = Field(None, le=MAX_BANDWIDTH_GBS)
    bf16_tflops: Positive | None = Field(None, le=MAX_TFLOPS)
    fp8_tflops: NonNegative | None = Field(None, le=MAX_TFLOPS)
    fp4_tflops: NonNegative | None = Field(None, le=MAX_TFLOPS)
    interconnect: str | None = None
    interconnect_gbs: NonNegative | None = Field(None, le=MAX_BANDWIDTH_GBS)


# Their names, for whoever lists them (a profile replaces them all: simulate's PROFILE_REPLACES).
DATASHEET_FIELDS: tuple[str, ...] = tuple(DatasheetFigures.model_fields)


class HardwareFigures(DatasheetFigures):
    """A GPU's datasheet figures as the catalogue and a config's [hardware] table give
    them, with where they come from."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str | None = None

    def given(self) -> bool:
        return any(v is not None for v in self.model_dump().values())

    def spec(self, name: str, base: HardwareSpec | None = None, where: str = "") -> HardwareSpec:
        """The GPU these figures describe: `base` (a preset) with them replacing its own,
        or, with no base, from these alone (memory, bandwidth and bf16 peak required)."""
        if self.memory_mib is not None and self.memory_gib is not None:
            raise ValueError(f"{where}memory_mib and memory_gib: give one of them")
        mem = self.memory_mib * MIB if self.memory_mib is not None else (
            self.memory_gib * 2**30 if self.memory_gib is not None else None)
        fields = {"memory_bytes": mem,
                  "mem_bandwidth": None if self.mem_bandwidth_gbs is None else self.mem_bandwidth_gbs * 1e9,
                  "peak_flops": None if self.bf16_tflops is None else self.bf16_tflops * 1e12,
                  "peak_flops_fp8": None if self.fp8_tflops is None else self.fp8_tflops * 1e12,
                  "peak_flops_fp4": None if self.fp4_tflops is None else self.fp4_tflops * 1e12,
                  "interconnect": self.interconnect,
                  "interconnect_bandwidth": None if self.interconnect_gbs is None else self.interconnect_gbs * 1e9,
                  "source": self.source}
        given = {k: v for k, v in fields.items() if v is not None}
        if base is not None:
            return base.model_copy(update={"name": name, **given})
        for key, label in (("memory_bytes", "memory_gib (or memory_mib)"),
                           ("mem_bandwidth", "mem_bandwidth_gbs"), ("peak_flops", "bf16_tflops")):
            if key not in given:
                raise ValueError(f"{where}{label}: missing; a GPU that is not a preset needs its "
                                 f"memory, memory bandwidth and bf16 peak")
        return HardwareSpec(name=name, allreduce_latency_s=ALLREDUCE_LATENCY_S, **given)


def read_catalogue(path: Path = CATALOGUE) -> dict[str, HardwareSpec]:
    with open(path, "rb") as f:
        entries = tomllib.load(f)
    return {name: HardwareFigures.model_validate(e).spec(name, where=f"{path.name} [{name}] ")
            for name, e in entries.items()}


HARDWARE: dict[str, HardwareSpec] = read_catalogue()


def fp8_hardware() -> list[str]:
    return [h.name for h in HARDWARE.values() if h.peak_flops_fp8]
