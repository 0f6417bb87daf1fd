"""Profiles and cost models the tests build: a small calibration profile, a fitted cost
model of known terms and the step tables it prices."""
from __future__ import annotations

import numpy as np

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.fitted import FittedCostModel, Shape
from batchlab.core.cost.profile import CostParams, DeviceInfo, Effective, FitQuality, Profile, RegionError
from batchlab.core.model.presets import MODELS
from batchlab.core.workload import Workload
from batchlab.sim import simulate


def make_profile(**changes) -> Profile:
    err = RegionError(n=3, median_ape=1.5, max_ape=4.0)
    p = Profile(model=MODELS["batchlab-tiny"], model_source="batchlab-tiny",
                device=DeviceInfo(kind="cpu", name="test cpu", threads=1, torch="x"),
                block_size=16, num_kv_blocks=321,
                cost=CostParams(overhead_s=0.005, per_seq_s=1e-4, per_chunk_s=2e-4,
                                s_per_weight_byte=1 / 20e9, s_per_flop=1 / 80e9, s_per_kv_byte=1 / 5e9,
                                s_per_attn_flop=1 / 50e9, small_rows=[0.001, 0.002], combine="sum"),
                fit=FitQuality(heldout=err, train=err, regions={"decode": err}),
                effective=Effective(mem_bandwidth=20e9, kv_bandwidth=5e9, flop_rate=80e9,
                                    attn_flop_rate=50e9, overhead_s=0.005))
    return p.model_copy(update=changes)


SHAPE = Shape.of(MODELS["batchlab-tiny"])
BASE = FittedCostModel(SHAPE, overhead_s=0.002, per_seq_s=2e-5, per_chunk_s=1e-4,
                       s_per_weight_byte=1 / 40e9, s_per_flop=1 / 150e9, s_per_kv_byte=1 / 7e9,
                       s_per_attn_flop=1 / 60e9, combine="sum")


def served_table(truth, seed: int = 0, n: int = 80) -> dict[str, np.ndarray]:
    """A step table whose durations are `truth`'s prices: bursts with idle gaps, chunked
    prefill of new prompt lengths beside decodes."""
    rng = np.random.default_rng(seed)
    gaps = rng.choice([0.001, 0.01, 0.4], size=n)
    w = Workload(np.cumsum(gaps), rng.integers(3, 600, n), rng.integers(1, 30, n))
    return simulate(w, SchedulerConfig(policy="chunked", max_num_batched_tokens=96), truth, 2000).steps
