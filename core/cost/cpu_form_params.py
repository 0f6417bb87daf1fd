"""A CPU profile's GPU-form constants as written in the profile (version 6,
core/cost/profile.py `gpu_form`): each fitted constant with its standard error, the pinned ones,
and the measured figures that stand for the datasheet (core/cost/cpu_form.py)."""
from __future__ import annotations

from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field, model_validator

from batchlab.core.checks import Finite, NonNegative, Positive
from batchlab.core.cost.cpu_form import cpu_form, cpu_gpu_params, CpuExtras, CpuFormModel, FITTED_GPU
from batchlab.core.cost.gpu_form import FIXED_COSTS
from batchlab.core.model.spec import ModelSpec


class Constant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: Finite
    stderr: NonNegative | None = Field(None, description="None: pinned or not fitted (0 where its feature is absent)")


def _c(description: str):
    return Field(description=description)


class GpuFormParams(BaseModel):
    """core.cpu_form.CpuFormModel's constants (efficiencies: shares of the measured figures)."""
    model_config = ConfigDict(extra="forbid")
    read_bandwidth: Positive = _c("bytes/s the machine measured reading a large tensor (B in the form)")
    matmul_flops: Positive = _c("FLOP/s the machine measured on a square matmul (P and P_attn)")
    mem_efficiency: Constant
    compute_efficiency: Constant
    ridge_k: Constant
    attn_kv_efficiency: Constant
    attn_pair_efficiency: Constant
    step_s: Constant
    seq_s: Constant
    chunk_s: Constant
    masked_pair_share: Constant
    after_prefill_s: Constant
    after_idle_s: Constant
    steady_s: Constant
    small_rows: list[Finite] = Field(default_factory=list, description="extra seconds at 1, 2, ... rows")
    pinned: list[str] = Field(default_factory=list, description="constants the sweep's fit held, not fitted "
                              "(the serving refit may rescale them with their side)")
    rms_log: NonNegative | None = Field(None, description="rms of log(priced / measured), training steps")

    @model_validator(mode="after")
    def _usable(self) -> GpuFormParams:
        for n in ("mem_efficiency", "compute_efficiency", "attn_kv_efficiency", "attn_pair_efficiency"):
            if getattr(self, n).value <= 0:
                raise ValueError(f"{n}: {getattr(self, n).value!r}: an efficiency must be > 0")
        if self.ridge_k.value < 1:
            raise ValueError(f"ridge_k: {self.ridge_k.value!r}: must be >= 1 (1 is a sum)")
        return self

    def model(self, spec: ModelSpec, bandwidth: float = 1.0, flops: float = 1.0,
              overhead: float = 1.0) -> CpuFormModel:
        """The priced form; the factors make a what-if machine (2.0: twice the memory
        bandwidth / FLOP rate / fixed costs of the one measured). ValueError (one line)
        for constants the form cannot use."""
        v = {n: getattr(self, n).value for n in FITTED_GPU}
        e = CpuExtras(self.chunk_s.value, self.masked_pair_share.value, self.after_prefill_s.value,
                      self.after_idle_s.value, self.steady_s.value, tuple(self.small_rows))
        params = cpu_gpu_params(v)
        if (bandwidth, flops, overhead) != (1.0, 1.0, 1.0):
            # bytes and FLOPs by their factors; fixed costs by overhead, not by bandwidth
            params = replace(params.scaled(1.0 / bandwidth, 1.0 / flops),
                             **{n: getattr(params, n) * overhead for n in FIXED_COSTS})
            e = e.scaled(overhead)
        return cpu_form(spec, params, self.read_bandwidth, self.matmul_flops, e)

    def refined(self, m: CpuFormModel) -> GpuFormParams:
        """The constants of `m` (this form refined on served steps), with this fit's
        standard errors and pins kept (they are the sweep's)."""
        stderr = {n: c.stderr for n, c in self if isinstance(c, Constant) and c.stderr is not None}
        return GpuFormParams.of(m, stderr, dict.fromkeys(self.pinned, 0.0), self.rms_log)

    @classmethod
    def of(cls, m: CpuFormModel, stderr: dict[str, float], pinned: dict[str, float],
           rms_log: float | None) -> GpuFormParams:
        """The document of a fitted model (stderr by constant name; absent: None)."""
        p, e = m.params, m.extras
        values = {n: getattr(p, n) for n in FITTED_GPU}
        values.update(chunk_s=e.chunk_s, masked_pair_share=e.masked_pair_share,
                      after_prefill_s=e.after_prefill_s, after_idle_s=e.after_idle_s, steady_s=e.steady_s)
        return cls(read_bandwidth=m.gpu.mem_bandwidth, matmul_flops=m.gpu.peak_flops,
                   **{n: Constant(value=v, stderr=stderr.get(n)) for n, v in values.items()},
                   small_rows=list(e.small_rows), pinned=sorted(pinned), rms_log=rms_log)
