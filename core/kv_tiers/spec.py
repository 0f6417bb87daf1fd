"""A KV tier as configured: the [kv_tier] table of a TOML config, the --kv-tier flags.

Defaults, and where they come from (a link catalogue, core/model/links.py, may name the
link instead at merge; here the bandwidth is a number):
- cpu: 25 GB/s each way. A host-device copy crosses PCIe; Gen4 x16 signals 16 GT/s on 16
  lanes with 128b/130b coding, 31.5 GB/s a direction (PCI-SIG PCIe 4.0 base
  specification); pinned cudaMemcpy reaches about 80% of that (NVIDIA's bandwidthTest
  sample reports 24-26 GB/s on Gen4 hosts), and 25 GB/s is that share, assumed. A Gen5
  x16 host (H100/H200/B200 boards) doubles it: give --kv-tier-bandwidth 50.
- disk: 7 GB/s, a PCIe Gen4 NVMe SSD's datasheet sequential read (Samsung 990 PRO:
  7,450 MB/s), read and write alike, assumed.
- latency: 10 us per transfer (cpu; a copy's launch and synchronisation), 100 us (disk;
  an NVMe command), assumed.
The capacity is per GPU: host memory (or disk) set aside for each GPU's share of the KV.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from batchlab.core.checks import NonNegative, Positive

DEFAULT_BANDWIDTH_GBS = {"cpu": 25.0, "disk": 7.0}
DEFAULT_LATENCY_US = {"cpu": 10.0, "disk": 100.0}
PREEMPTIONS = ("swap", "recompute", "cheapest")


class TierConfig(BaseModel):
    """One tier below the GPU's KV pool, per GPU."""
    model_config = ConfigDict(extra="forbid")

    kind: Literal["cpu", "disk"] = Field("cpu", description="cpu (host memory over PCIe) | disk (local NVMe)")
    capacity_gib: Positive = Field(description="the tier's size per GPU, GiB")
    bandwidth_gbs: Positive | None = Field(
        None, description="GB/s each way per GPU; default 25 (cpu, PCIe Gen4 x16) or 7 (disk, NVMe)")
    latency_us: NonNegative | None = Field(None, description="per transfer, microseconds; "
                                     "default 10 (cpu) or 100 (disk)")
    preemption: Literal["swap", "recompute", "cheapest"] = Field(
        "cheapest", description="swap: keep a preempted sequence's KV in the tier; recompute: "
        "drop it (vLLM v1); cheapest: swap when moving its bytes out and back costs less "
        "than recomputing it")
    prefix: bool = Field(True, description="keep prefix-cache blocks evicted from the GPU in the tier")

    @property
    def bandwidth_bytes_s(self) -> float:
        return (self.bandwidth_gbs or DEFAULT_BANDWIDTH_GBS[self.kind]) * 1e9

    @property
    def latency_s(self) -> float:
        return (DEFAULT_LATENCY_US[self.kind] if self.latency_us is None else self.latency_us) * 1e-6

    @property
    def capacity_bytes(self) -> float:
        return self.capacity_gib * 2**30

    def capacity_blocks(self, kv_bytes_per_token: float, block_size: int) -> int:
        """Blocks of `block_size` tokens the tier holds; ValueError (naming the field)
        when not one fits."""
        block = kv_bytes_per_token * block_size
        blocks = int(self.capacity_bytes // block) if block > 0 else 0
        if blocks < 1:
            raise ValueError(f"kv_tier.capacity_gib = {self.capacity_gib:g} holds no KV block: one block "
                             f"of {block_size} tokens is {block / 2**20:.3g} MiB per GPU")
        return blocks

    def describe(self) -> str:
        return (f"KV tier: {self.kind}, {self.capacity_gib:g} GiB per GPU, "
                f"{self.bandwidth_bytes_s / 1e9:g} GB/s each way "
                f"{'(given)' if self.bandwidth_gbs else '(default: ' + _WHY[self.kind] + ')'}, "
                f"{self.latency_s * 1e6:g} us a transfer; preemption: {self.preemption}"
                f"{', evicted prefix blocks kept' if self.prefix else ''}")


_WHY = {"cpu": "PCIe Gen4 x16, ~80% of 31.5 GB/s", "disk": "PCIe Gen4 NVMe sequential read"}
