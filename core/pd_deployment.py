"""A disaggregated deployment, typed: a prefill pool and a decode pool (each replicas of
one scheduler, one step price and one KV capacity, behind a router of its own) and the
KV transfer between them (core/kv_handoff.py). sim/disaggregated runs it."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.form import CostModel
from batchlab.core.kv_handoff import KVTransfer
from batchlab.core.kv_tiers import TierConfig


@dataclass(frozen=True)
class Pool:
    """Replicas of one engine: its scheduler, its step price, its KV blocks, its router,
    the GPUs each replica holds (for per-GPU figures), and a KV tier below each replica's
    blocks (core/kv_tiers/; sized by the KV bytes a token takes on one of its GPUs)."""
    replicas: int
    scheduler: SchedulerConfig
    cost: CostModel
    num_kv_blocks: int
    router: str = "round_robin"
    gpus_per_replica: int = 1
    kv_tier: TierConfig | None = None
    kv_bytes_per_token: float = 0.0

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {self.num_kv_blocks}")

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


@dataclass(frozen=True)
class PDDeployment:
    prefill: Pool
    decode: Pool
    transfer: KVTransfer

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus
