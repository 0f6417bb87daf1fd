"""Bootstrap replicates of a trace (core/workload/resample.py, --resample): seeds on a trace
sample the workload's variability."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.workload import WorkloadConfig, build_workload
from batchlab.core.workload.resample import resample_requests, resample_windows
from batchlab.core.workload.workload import Workload
from tests.helpers import cli


@st.composite
def traces(draw):
    n = draw(st.integers(1, 60))
    gaps = draw(st.lists(st.floats(0, 30, allow_nan=False), min_size=n, max_size=n))
    arrival = np.cumsum(gaps)
    prompt = draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 2000), min_size=n, max_size=n))
    hashes = [(i, i + 1) for i in range(n)]
    return Workload(arrival=arrival, prompt_len=prompt, output_len=output, prefix_hashes=hashes,
                    priority=np.arange(n))


@settings(max_examples=80, deadline=None)
@given(w=traces(), seed=st.integers(0, 2**32 - 1))
def test_a_request_replicate_keeps_the_arrivals_and_draws_whole_requests(w, seed):
    r = resample_requests(w, np.random.default_rng(seed))
    assert np.array_equal(r.arrival, w.arrival)
    pairs = {(p, o, h, q) for p, o, h, q in zip(w.prompt_len, w.output_len, w.prefix_hashes, w.priority)}
    # each request travels whole: its lengths, prefix hashes and priority together
    assert all(t in pairs for t in zip(r.prompt_len, r.output_len, r.prefix_hashes, r.priority))


@settings(max_examples=80, deadline=None)
@given(w=traces(), block=st.floats(0.5, 100), seed=st.integers(0, 2**32 - 1))
def test_a_window_replicate_lays_whole_blocks_end_to_end(w, block, seed):
    r = resample_windows(w, block, np.random.default_rng(seed))
    assert (np.diff(r.arrival) >= 0).all() and (len(r) == 0 or r.arrival[0] >= w.arrival[0])
    start = w.arrival[0]
    blocks = max(1, int(np.ceil((w.arrival[-1] - start) / block + 1e-12)))
    assert len(r) == 0 or r.arrival[-1] < start + blocks * block + 1e-9  # as long as the trace's blocks
    # each replicate request is a trace request, at the offset within its block it had there
    def offset(a):
        return (a - start) - np.floor((a - start) / block) * block
    trace = [(offset(a), p, o) for a, p, o in zip(w.arrival, w.prompt_len, w.output_len)]
    for a, p, o in zip(r.arrival, r.prompt_len, r.output_len):
        off = offset(a)
        assert any(p == p2 and o == o2 and min(abs(off - t), block - abs(off - t)) < 1e-6
                   for t, p2, o2 in trace)

def test_the_same_seed_gives_the_same_replicate_and_another_seed_another():
    cfg = WorkloadConfig(source="azure_conv", num_requests=400, resample="windows", resample_block_s=30)
    a, b = build_workload(cfg), build_workload(cfg)
    c = build_workload(cfg.model_copy(update={"seed": 1}))
    assert np.array_equal(a.arrival, b.arrival) and np.array_equal(a.prompt_len, b.prompt_len)
    assert not (len(a) == len(c) and np.array_equal(a.prompt_len, c.prompt_len))
    plain = build_workload(WorkloadConfig(source="azure_conv", num_requests=400))
    r = build_workload(WorkloadConfig(source="azure_conv", num_requests=400, resample="requests"))
    assert np.array_equal(r.arrival, plain.arrival) and not np.array_equal(r.prompt_len, plain.prompt_len)
    assert set(r.prompt_len) <= set(plain.prompt_len)


def test_resampling_a_synthetic_preset_is_refused():
    with pytest.raises(ValueError, match="applies to a trace"):
        build_workload(WorkloadConfig(source="chat", num_requests=10, resample="requests"))


def test_seeds_on_a_resampled_trace_run_and_say_what_they_vary():
    code, out, err = cli(["simulate", "--workload", "azure_conv", "--num-requests", "150", "--seeds", "3",
                          "--resample", "windows", "--resample-block", "20", "--policy", "chunked"])
    assert code == 0, err
    assert "bootstrap replicate of the trace (its 20 s windows drawn with replacement)" in out + err
    code, _, err = cli(["simulate", "--workload", "azure_conv", "--num-requests", "50", "--seeds", "2"])
    assert code == 2 and "--resample requests|windows" in err
