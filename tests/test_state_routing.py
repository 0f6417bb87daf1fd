"""Routers that read the replicas' state (least_loaded, prefix_aware) read a replica's
fast-forward run without ending it (sim/pending_run.py): the results are those of ending
every replica's run at every arrival (simulate.PRICE_AHEAD = False), the same routing,
tokens and steps, times to the last bit, and an arrival costs a decision on the replica
it goes to only."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.batch import Batch
from batchlab.core.config import SchedulerConfig
from batchlab.core.fast_forward import DecodeRun
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from batchlab.sim.counting import counting_decisions
from batchlab.sim.pending_run import PendingRun
from tests.draws import policies
from tests.same_runs import COSTS, assert_identical, switched


simulate_module = sys.modules["batchlab.sim.simulate"]  # batchlab.sim.simulate names the function


def run(w: Workload, ahead: bool, **kw):
    with switched(simulate_module, "PRICE_AHEAD", ahead), counting_decisions() as decisions:
        r = simulate(w, **kw)
    return r, decisions[0]


def prompt_hashes(rng: np.random.Generator, i: int, prompt: int, hbs: int) -> tuple[int, ...]:
    """A prompt sharing a random number of leading blocks with one of three documents."""
    n = -(-prompt // hbs)
    shared, doc = int(rng.integers(0, n + 1)), int(rng.integers(3))
    return tuple(doc * 10_000 + j if j < shared else 10**6 + i * 1000 + j for j in range(n))


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 80))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    rate = draw(st.sampled_from([1.0, 10.0, 100.0]))
    t = np.cumsum(rng.exponential(1 / rate, n))
    if draw(st.booleans()):  # bursts: several requests at one instant, and at the first
        t = np.floor(t * 2) / 2
        t[0] = 0.0
    prompts = rng.integers(1, draw(st.sampled_from([40, 400])), n)
    outputs = rng.integers(1, draw(st.sampled_from([20, 200, 800])), n)
    hbs = 16
    work = Workload(t, prompts, outputs, hash_block_size=hbs,
                    prefix_hashes=[prompt_hashes(rng, i, int(p), hbs) for i, p in enumerate(prompts)])
    cfg = SchedulerConfig(policy=draw(st.sampled_from(policies(["continuous", "chunked", "static"]))),
                          max_num_seqs=draw(st.sampled_from([2, 4, 16])), block_size=4,
                          prefix_caching=draw(st.booleans()))
    blocks = draw(st.sampled_from([60, 400, 5000]))  # tight: runs end where KV memory does
    return (work, cfg, blocks, draw(st.sampled_from(["linear", "linear_context", "roofline", "calibrated_at_speed"])),
            draw(st.integers(2, 4)), draw(st.sampled_from(["least_loaded", "prefix_aware"])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_runs_priced_ahead_give_the_results_of_runs_cut_at_every_arrival(scenario):
    work, cfg, blocks, cost, replicas, router = scenario
    kw = dict(scheduler=cfg, cost=COSTS[cost], num_kv_blocks=blocks, replicas=replicas, router=router)
    ahead, _ = run(work, True, **kw)
    cut, _ = run(work, False, **kw)
    # A run ends at its last step's end exactly (the clock is moved to it, not by it), so a
    # run cut at an arrival and one that goes on agree to the bit.
    assert_identical(ahead, cut)


# Found by hypothesis (the test above): where the two ways of running ended apart, the
# tables equal. A run priced to its end and cut by an arrival left the old wait's time as the
# run's end (41.1 s, the last request finishing at 36.8); an idle replica's alarm for an
# arrival at t, set as now + (t - now), rang an ulp after it (the rejected last arrival).
STRETCHED = {
    "a cut run's old wait": (
        [0.04687382, 0.12325993, 0.2017712, 0.30026011, 0.35360151, 0.42488723, 0.70973186, 0.88770687, 0.97379506],
        [34, 15, 3, 32, 35, 35, 6, 24, 37], [663, 199, 58, 602, 623, 691, 523, 150, 531],
        [(0, 1000001, 1000002), (0,), (10000,), (10000, 1003001), (0, 1004001, 1004002), (10000, 10001, 10002),
         (1006000,), (20000, 1007001), (1008000, 1008001, 1008002)],
        dict(max_num_seqs=4), "calibrated_at_speed", 400, 4),
    "an alarm an ulp late": (
        [1.0730290263725388, 1.381482170497823, 6.75691904310595], [10, 13, 34], [339, 219, 662],
        [(1000000,), (10000,), (1002000, 1002001, 1002002)], dict(max_num_seqs=2), "linear", 60, 2),
}


@pytest.mark.parametrize("case", sorted(STRETCHED))
def test_the_simulated_span_ends_with_the_last_thing_that_happens(case):
    arrival, prompts, outputs, hashes, seats, cost, blocks, replicas = STRETCHED[case]
    work = Workload(np.array(arrival), np.array(prompts), np.array(outputs), hash_block_size=16, prefix_hashes=hashes)
    kw = dict(scheduler=SchedulerConfig(policy="chunked", block_size=4, **seats), cost=COSTS[cost],
              num_kv_blocks=blocks, replicas=replicas, router="least_loaded")
    ahead, _ = run(work, True, **kw)
    cut, _ = run(work, False, **kw)
    assert_identical(ahead, cut)
    r = ahead.requests
    assert ahead.meta.simulated_s == max(float(np.max(r["finish_s"])), float(np.max(r["arrival_s"])))


def test_an_arrival_costs_a_decision_on_its_own_replica_only():
    """Eight replicas of long replies, least loaded: cut at every arrival, every busy
    replica decides again at each; priced ahead, about as few decisions as round robin
    takes (whose arrivals each replica knows in advance)."""
    rng = np.random.default_rng(1)
    n, r = 400, 8
    work = Workload(np.cumsum(rng.exponential(1 / 40.0, n)), rng.integers(50, 300, n), rng.integers(200, 600, n))
    kw = dict(scheduler=SchedulerConfig(policy="continuous", max_num_seqs=32), cost=COSTS["roofline"],
              num_kv_blocks=100_000, replicas=r)
    ahead, ahead_decisions = run(work, True, router="least_loaded", **kw)
    cut, cut_decisions = run(work, False, router="least_loaded", **kw)
    _, dealt_decisions = run(work, True, router="round_robin", **kw)
    assert_identical(ahead, cut)
    assert len(set(ahead.requests["replica"].tolist())) == r
    assert cut_decisions > 4 * n  # each arrival cut the runs of the busy replicas
    assert ahead_decisions < 1.25 * dealt_decisions, (ahead_decisions, dealt_decisions)


def test_a_pending_run_is_cut_at_the_step_in_progress():
    """Steps end at 1, 2, 3, 4 (started at 0); a member finishes in step 2 and one in
    step 3; an arrival may join from step 1 on (a seat is free)."""
    run = DecodeRun(0.0)
    run.clock.extend([1.0, 1.0, 1.0, 1.0])
    run.num_seqs = [3, 3, 2, 1]
    p = PendingRun(Batch(), run, (0, 0), 1, 4)
    assert [p.stop_for(t) for t in (0.5, 1.0, 1.5, 2.0, 2.5, 3.5)] == [1, 1, 2, 2, 3, 4]
    # A finish at the arrival's instant is seen after it (stepping orders them so).
    assert [p.finished_before(t) for t in (1.5, 2.0, 2.5, 3.0, 3.5)] == [0, 0, 1, 1, 2]
    # KV memory ends the run after step 2: it is cut there at the latest.
    short = PendingRun(Batch(), run, (0, 0), 1, 2)
    assert short.stop_for(3.5) == 2 and short.finished_before(3.5) == 0
    # No seat free until the first finish (step 2): an arrival before it waits for it.
    full = PendingRun(Batch(), run, (0, 0), 3, 4)
    assert full.stop_for(0.5) == 2 and full.finished_before(0.5) == 0
