"""A fitted model's parts of a Profile: its parameters, its terms as hardware figures, and
the device it was measured on (shared by calibrate's sweep, --from-run and --from-replay)."""
from __future__ import annotations

import math

from batchlab.core.cost.fitted import FittedCostModel
from batchlab.core.cost.profile import CostParams, DeviceInfo, Effective, UNRESOLVED_RATIO
from batchlab.core.run_meta import RunMeta


def _resolved(rate: float, measured: float | None) -> float | None:
    """A fitted rate, or None where its term fitted to ~0 (an infinite or absurd rate:
    this grid did not resolve it)."""
    if not math.isfinite(rate) or (measured and rate > UNRESOLVED_RATIO * measured):
        return None
    return rate


def cost_params(m: FittedCostModel) -> CostParams:
    return CostParams(overhead_s=m.overhead_s, per_seq_s=m.per_seq_s, per_chunk_s=m.per_chunk_s,
                      s_per_weight_byte=m.s_per_weight_byte, s_per_flop=m.s_per_flop,
                      s_per_kv_byte=m.s_per_kv_byte, s_per_attn_flop=m.s_per_attn_flop,
                      small_rows=list(m.small_rows), combine=m.combine,
                      after_prefill_s=m.after_prefill_s, after_idle_s=m.after_idle_s,
                      s_per_masked_flop=m.s_per_masked_flop, steady_s=m.steady_s)


def effective(m: FittedCostModel, roof: dict[str, float]) -> Effective:
    """roof: the roofline the machine measured (calibration/sweep/timing.py measure_roofline), or
    {} where none was (a fit from served runs alone)."""
    return Effective(mem_bandwidth=_resolved(m.mem_bandwidth, roof.get("read_bandwidth")),
                     kv_bandwidth=_resolved(m.kv_bandwidth, roof.get("copy_bandwidth")),
                     flop_rate=_resolved(m.flop_rate, roof.get("matmul_flops")),
                     attn_flop_rate=_resolved(m.attn_flop_rate, roof.get("matmul_flops")),
                     overhead_s=m.overhead_s, measured_copy_bandwidth=roof.get("copy_bandwidth"),
                     measured_read_bandwidth=roof.get("read_bandwidth"),
                     measured_matmul_flops=roof.get("matmul_flops"))


def device_info(meta: RunMeta) -> DeviceInfo:
    """The device a run (or a calibration) measured, from the backend's meta."""
    kind = meta.device.split(":")[0]
    name = meta.gpu if kind == "cuda" else (meta.cpu or "")
    return DeviceInfo(kind=kind, name=name or kind, threads=meta.threads,
                      dtype=meta.dtype, matmul=meta.matmul or "", torch=meta.torch or "")
