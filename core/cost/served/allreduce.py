"""The served engine's all-reduce by message size (engine.py's paths, terms.py's
constants), on top of the GPU profile's measured NCCL table."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.cost.gpu_form import AllReduce


@dataclass(frozen=True, slots=True)
class EngineAllReduce(AllReduce):
    """The engine's all-reduce by message size (engine.py): its own below `custom_below`
    bytes at `custom_scale` of NCCL's measured time for the message; symmetric memory below
    `symm_below`, that latency plus the bytes each GPU moves (one message's worth by NVLink
    SHARP, 2 (n - 1) / n of it two-shot) at `symm_efficiency` of the link's one-way
    bandwidth; the measured NCCL table above."""
    custom_scale: float = 1.0
    custom_below: float = 0.0
    symm_below: float = 0.0
    multimem: bool = False
    symm_efficiency: float = 1.0

    def time(self, nbytes: float, gpus: int) -> float:
        if gpus <= 1 or nbytes <= 0:
            return 0.0
        if nbytes < self.custom_below:
            return AllReduce.time(self, nbytes, gpus) * self.custom_scale
        if nbytes < self.symm_below:
            moved = nbytes if self.multimem else 2 * (gpus - 1) / gpus * nbytes
            floor = AllReduce.time(self, 1.0, gpus) * self.custom_scale
            return floor + moved / (self.bandwidth * self.symm_efficiency)
        return AllReduce.time(self, nbytes, gpus)
