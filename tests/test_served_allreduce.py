"""The served engine's all-reduce against vLLM's own published timings of it: the shipped
terms price torch's multimem all-reduce on H100s at the cost a MiB the engine's
device-communicator benchmark measured (core/cost/served/terms.py SYMM_MEM_EFFICIENCY)."""
from __future__ import annotations

import pytest

from batchlab.calibration.served_bench.read import BenchmarkRow
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.validation.served_benchmarks import config_for

MIB = 1 << 20
# ms an all-reduce of bf16 at MiB sizes, symm_mem_multimem column, H100 SXM:
# vllm-project/vllm PR #42324 (SM 9.0, 8 GPUs) and PR #24111 (TP=4, "0.50 MB" = (32, 8192) bf16).
PUBLISHED = {8: {8: 0.046, 16: 0.087, 32: 0.165, 47.84: 0.244},
             4: {0.5: 0.016, 1: 0.018, 2: 0.023, 3: 0.028, 4: 0.033}}


def _allreduce(tp: int):
    row = BenchmarkRow(1, "Qwen/Qwen3-32B", "qwen3-32b", "h100-sxm", None, "", tp, 8, 1024, 128, 0.1, 0.01, "0.12.0")
    return sim_setup(config_for(row, "vllm")).cost.graph.allreduce


@pytest.mark.parametrize("tp", [4, 8])
def test_a_symmetric_memory_all_reduce_adds_what_vllm_measured_a_mib(tp):
    published = PUBLISHED[tp]
    small, large = min(published), max(published)
    measured = (published[large] - published[small]) * 1e-3 / (large - small)
    ar = _allreduce(tp)
    # where the engine takes symmetric memory (engine.py: its own all-reduce below, NCCL above);
    # the price there is a line, so its slope is compared with the published one's
    lo, hi = ar.custom_below / MIB, ar.symm_below / MIB - 1
    assert ar.multimem and hi > lo
    priced = (ar.time(hi * MIB, tp) - ar.time(lo * MIB, tp)) / (hi - lo)
    assert priced == pytest.approx(measured, rel=0.1)


def test_past_the_symmetric_memory_limit_nccl_takes_over_without_a_cliff():
    ar = _allreduce(8)
    below, at = ar.time(ar.symm_below - MIB, 8), ar.time(ar.symm_below, 8)
    # vLLM hands 64 MiB to NCCL where the two cost the same (PR #42324: 0.316 and 0.320 ms)
    assert at == pytest.approx(below, rel=0.25)
