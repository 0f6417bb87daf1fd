"""A round-robin run's replicas simulated in groups apart and merged (sim/replica_groups,
`batchlab simulate --workers N`) give the run of them all, bit for bit: tables, gaps,
totals, meta and summary. Routers and settings that couple the replicas are refused."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.class_summary import breakdowns
from batchlab.core.config import SchedulerConfig
from batchlab.core.front_end import FrontEnd
from batchlab.core.summary import SLO
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from batchlab.sim.replica_groups import (Share, check_splittable, group_workload, merge,
                                         replica_groups, simulate_group)
from batchlab.sim.replica_groups.split import dealt, global_ids
from tests.helpers import run_cli
from tests.same_runs import COSTS
from tests.test_fast_forward import scenarios


def split_run(work, cfg, blocks, cost, replicas, groups, record_steps):
    parts = [simulate_group(group_workload(work, replicas, g), replicas, g, cfg, cost, blocks,
                            record_steps=record_steps)
             for g in replica_groups(replicas, groups)]
    return merge(parts[::-1], work)  # merged in any order


def assert_identical(a, b):
    assert list(a.requests) == list(b.requests)
    for c in a.requests:
        x, y = a.requests[c], b.requests[c]
        assert x.dtype == y.dtype, c
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), c
    assert (a.steps is None) == (b.steps is None)
    if a.steps is not None:
        assert list(a.steps) == list(b.steps)
        for c in a.steps:
            assert a.steps[c].dtype == b.steps[c].dtype and np.array_equal(a.steps[c], b.steps[c]), c
    assert np.array_equal(a.itl_gaps, b.itl_gaps) and np.array_equal(a.itl_counts, b.itl_counts)
    assert a.totals == b.totals
    assert a.meta == b.meta
    assert json.dumps(a.summary(), sort_keys=True) == json.dumps(b.summary(), sort_keys=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(2, 7), st.integers(2, 7), st.booleans(), st.booleans())
def test_groups_merged_are_the_run_of_all_replicas(scenario, replicas, groups, record_steps, fast):
    work, cfg, blocks, cost, _ = scenario
    work = work.replace(max_concurrency=None)  # a closed loop couples the replicas (refused)
    kw = dict(replicas=replicas, router="round_robin", record_steps=record_steps, fast_forward=fast)
    whole = simulate(work, cfg, COSTS[cost], blocks, **kw)
    parts = [simulate_group(group_workload(work, replicas, g), replicas, g, cfg, COSTS[cost], blocks,
                            record_steps=record_steps, fast_forward=fast)
             for g in replica_groups(replicas, groups)]
    assert_identical(merge(parts[::-1], work), whole)


SLOS = st.sampled_from([None, SLO(ttft_ms=50), SLO(tpot_ms=20, e2el_ms=2000), SLO(ttft_ms=1e9)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(2, 7), st.integers(2, 7), SLOS)
def test_groups_figures_give_the_whole_runs_breakdown(scenario, replicas, groups, slo):
    """Each replica's breakdown figures, computed in its group's process, give the
    breakdowns the merged table gives (rates over the whole run's duration)."""
    work, cfg, blocks, cost, _ = scenario
    work = work.replace(max_concurrency=None)
    whole = simulate(work, cfg, COSTS[cost], blocks, replicas=replicas, router="round_robin")
    parts = [simulate_group(group_workload(work, replicas, g), replicas, g, cfg, COSTS[cost], blocks,
                            figures=True, slo=slo)
             for g in replica_groups(replicas, groups)]
    figures = {r: f for p in parts for r, f in p.by_replica.items()}
    merged = merge(parts, work)
    expected = json.dumps(breakdowns(whole.requests, slo))
    assert json.dumps(breakdowns(merged.requests, slo, figures)) == expected


def test_a_loaded_day_in_groups_is_the_same_run():
    """Many requests, long replies, preemptions (a small KV pool): the sums, the gap
    histogram (no step table) and the tables agree exactly."""
    rng = np.random.default_rng(3)
    n = 3000
    work = Workload(np.cumsum(rng.exponential(1 / 60.0, n)), rng.integers(20, 1500, n),
                    rng.integers(5, 600, n))
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=24)
    for record_steps in (False, True):
        whole = simulate(work, cfg, COSTS["roofline"], 400, replicas=6, record_steps=record_steps)
        assert whole.summary()["preemptions"] > 0  # the pool is tight enough to preempt
        assert_identical(split_run(work, cfg, 400, COSTS["roofline"], 6, 4, record_steps), whole)


@given(st.integers(1, 40), st.integers(1, 9), st.integers(1, 9))
def test_groups_cover_the_replicas_and_requests_once(n, replicas, groups):
    gs = replica_groups(replicas, groups)
    assert [r for g in gs for r in g] == list(range(replicas))
    assert max(map(len, gs)) - min(map(len, gs)) <= 1
    ids = np.sort(np.concatenate([dealt(n, replicas, g) for g in gs]))
    assert np.array_equal(ids, np.arange(n))
    for g in gs:
        mine = dealt(n, replicas, g)
        assert np.all(np.isin(mine % replicas, list(g)))
        # a run of len(g) replicas deals its k-th request to the group's k mod len(g)-th
        local = np.arange(len(mine))
        assert np.array_equal(global_ids(local, replicas, g), mine)
        assert np.array_equal(mine % replicas, g.start + local % len(g))


@given(st.integers(0, 60), st.integers(1, 9), st.integers(1, 9))
def test_a_share_sent_away_carries_its_group_requests_alone(n, replicas, groups):
    work = Workload(np.arange(n, dtype=float), np.arange(1, n + 1), np.full(n, 3),
                    priority=np.arange(n) % 3)
    for g in replica_groups(replicas, groups):
        share = Share(work, replicas, g)
        want = group_workload(work, replicas, g)
        sent = pickle.loads(pickle.dumps(share))
        assert len(share) == len(sent) == len(want) == len(sent.requests())
        for got in (share.requests(), sent.requests()):
            for c in ("arrival", "prompt_len", "output_len", "priority"):
                assert np.array_equal(getattr(got, c), getattr(want, c))


@pytest.mark.parametrize("router, workload, front_end, why", [
    ("least_loaded", {}, None, "router 'least_loaded' reads every replica's state"),
    ("prefix_aware", {}, None, "router 'prefix_aware'"),
    ("round_robin", {"max_concurrency": 4}, None, "closed loop"),
    ("round_robin", {}, FrontEnd(0.001, 0.0005), "front end"),
])
def test_coupled_replicas_are_refused_in_one_line(router, workload, front_end, why):
    work = Workload(np.zeros(4), np.ones(4, np.int64), np.ones(4, np.int64), **workload)
    with pytest.raises(ValueError, match=why) as e:
        check_splittable(router, work, front_end)
    assert "\n" not in str(e.value)


def test_cli_workers_give_the_one_process_output(capsys, tmp_path):
    """Through a real process pool: the same JSON and the same request rows."""
    base = ["simulate", "--num-requests", "400", "--rate", "40", "--replicas", "5", "--policy",
            "chunked,continuous", "--format", "json", "--slo-ttft-ms", "200"]
    outs, tables = [], []
    for workers in ("1", "2"):
        code, out, _ = run_cli([*base, "--workers", workers, "--out", str(tmp_path / workers)], capsys)
        assert code == 0
        outs.append(out)
        tables.append((tmp_path / workers / "chunked" / "requests.csv").read_bytes())
    assert outs[0] == outs[1]
    assert tables[0] == tables[1]


def test_cli_refuses_a_router_that_reads_replica_state(capsys):
    code, _, err = run_cli(["simulate", "--num-requests", "20", "--replicas", "3", "--router",
                            "least_loaded", "--workers", "2"], capsys)
    assert code != 0
    line = err.strip().splitlines()[-1]
    assert "least_loaded" in line and "--workers 1" in line
