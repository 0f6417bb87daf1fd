"""A windowed model's runs fast-forwarded (core/decode_window.py, core/fast_forward.py
window_decode_run) give exactly what stepping them gives: tables, gaps, summaries, bit
for bit (such models were stepped until they were fast-forwarded, so their outputs stay)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.dispatch import roofline
from batchlab.core.cost.form import attention_window
from batchlab.core.cost.loop_time import Overhead
from batchlab.core.decode_group import DecodeGroup
from batchlab.core.features import features_of
from batchlab.core.kv_reservation import KV_ALLOCATIONS
from batchlab.core.model.presets import lookup_hardware, lookup_model
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.schedulers import policy_class
from batchlab.core.workload import Workload
from batchlab.experiments.config import build_config
from batchlab.experiments.setup import sim_setup
from batchlab.sim import simulate
from batchlab.sim.counting import counting_decisions
from tests.draws import admission_orders, params, policies, victim_orders

MODEL = "gpt-oss-20b"  # sliding windows of 128 tokens on half its layers, and experts
ROOFLINE = roofline(lookup_model(MODEL), lookup_hardware("a100-80gb"), 1, 0.8, 0.6, 0.002)
WINDOWED = {
    "served": sim_setup(build_config({"model": {"name": MODEL}, "workload": {"source": "chat", "num_requests": 1},
                                      "hardware": {"name": "a100-80gb"}})).cost,  # the default price
    "roofline": ROOFLINE,
    # stretches priced step by step (the loop's time between steps)
    "roofline_at_speed": CostAtSpeed(ROOFLINE, 1.2, loop=Overhead(1e-4, 1e-6, 0.0, 0)),
}


MOE = sim_setup(build_config({"model": {"name": "qwen3-30b-a3b"}, "workload": {"source": "chat", "num_requests": 1},
                               "hardware": {"name": "a100-80gb"}})).cost  # the default price, no window


def test_the_costs_are_windowed():
    assert all(attention_window(c) == 128 for c in WINDOWED.values())


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 30))
    rate = draw(st.sampled_from([5.0, 50.0, 500.0, float("inf")]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    arrivals = np.zeros(n) if np.isinf(rate) else np.concatenate(([0.0], np.cumsum(rng.exponential(1 / rate, n - 1))))
    closed = draw(st.sampled_from([None, None, 4]))
    # prompts and replies on both sides of the window: members fill it within runs
    work = Workload(arrivals, rng.integers(1, draw(st.sampled_from([40, 200, 600])), n),
                    rng.integers(1, draw(st.sampled_from([30, 300, 900])), n),
                    priority=rng.integers(0, 3, n), max_concurrency=closed)
    name = draw(st.sampled_from(policies()))
    cfg = SchedulerConfig(
        policy=name, max_num_seqs=draw(st.integers(1, 12)),
        max_num_batched_tokens=draw(st.sampled_from([None, 8, 64, 512])),
        block_size=draw(st.sampled_from([1, 4, 16])),
        admission=draw(st.sampled_from(admission_orders())),
        preemption=draw(st.sampled_from(victim_orders())),
        kv_allocation=draw(st.sampled_from(KV_ALLOCATIONS)),
        params=draw(params(policy_class(name).Params)),
    )
    blocks = max(2, draw(st.integers(60, 6000)) // cfg.block_size)
    return (work, cfg, blocks, draw(st.sampled_from(sorted(WINDOWED))), draw(st.booleans()),
            draw(st.sampled_from([1, 1, 2, 3])), draw(st.sampled_from(["least_loaded", "round_robin"])))


def assert_identical(a, b) -> None:
    """Every column, gap and summary figure the same bits (NaN where NaN)."""
    for table in ("requests", "steps"):
        ta, tb = getattr(a, table), getattr(b, table)
        if ta is None or tb is None:
            assert ta is tb, table
            continue
        assert list(ta) == list(tb), table
        for col in ta:
            assert ta[col].dtype == tb[col].dtype and np.array_equal(ta[col], tb[col], equal_nan=ta[col].dtype.kind == "f"), \
                f"{table}.{col}"
    assert np.array_equal(a.itl_gaps, b.itl_gaps) and np.array_equal(a.itl_counts, b.itl_counts)
    sa, sb = a.summary(), b.summary()
    assert sa.keys() == sb.keys()
    for k in sa:
        x, y = sa[k], sb[k]
        assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), (k, x, y)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_a_windowed_run_fast_forwarded_equals_it_stepped(scenario):
    work, cfg, blocks, cost, step_table, replicas, router = scenario
    kw = dict(record_steps=step_table, replicas=replicas, router=router)
    stepped = simulate(work, cfg, WINDOWED[cost], blocks, fast_forward=False, **kw)
    fast = simulate(work, cfg, WINDOWED[cost], blocks, fast_forward=True, **kw)
    assert_identical(stepped, fast)
    if step_table:  # the windowed features are the window's, not the full reads
        steps = fast.steps
        assert np.all(steps["window_kv_tokens_read"] <= steps["kv_tokens_read"])
        assert np.all(steps["window_attention_pairs"] <= steps["attention_pairs"])


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(WINDOWED)), st.integers(1, 64), st.integers(0, 5000), st.integers(0, 64 * 128),
       st.integers(0, 64), st.integers(1, 90))
def test_a_stretch_of_windowed_decodes_is_priced_as_its_steps(cost, n, kv, w, u, m):
    u = min(u, n)
    c = WINDOWED[cost]
    steps = [c.step_time(features_of(n, 0, 0, n, kv + j * n, kv + j * n, 0, 0, 0, w + j * u, w + j * u, 0, 0))
             for j in range(m)]
    assert c.window_decode_times(n, kv, w, u, m) == steps
    # Without windows: a MoE model's runs (a windowed model's decode_times stay
    # FormDefaults', tests/test_gpu_step.py).
    for form in (MOE,):
        assert form.decode_times(n, kv, m) == [form.step_time(features_of(n, 0, 0, n, kv + j * n, kv + j * n,
                                                                          0, 0, 0, 0, 0, 0, 0)) for j in range(m)]


def test_a_windowed_model_takes_decisions_not_steps():
    """Decisions per request stay a handful when replies grow, as a dense model's do."""
    rng = np.random.default_rng(0)
    prompts, outputs = rng.integers(10, 300, 48), rng.integers(100, 400, 48)
    decisions = []
    for scale in (1, 4):
        with counting_decisions() as d:
            simulate(Workload(np.zeros(48), prompts, outputs * scale), SchedulerConfig(policy="continuous", max_num_seqs=16),
                     WINDOWED["served"], 100_000)
        decisions.append(d[0])
    assert decisions[1] < 1.2 * decisions[0]
    assert decisions[0] < 5 * 48


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 24), st.lists(st.tuples(st.integers(1, 16), st.integers(1, 4), st.integers(1, 30)),
                                    min_size=1, max_size=10),
       st.integers(0, 30), st.integers(0, 40), st.integers(1, 80))
@example(10, [(5, 1, 4), (2, 1, 20)], 0, 0, 10)  # one finishes in the step that takes it to the window
def test_a_groups_windowed_reads_are_each_members(window, members, tick, later, k):
    """DecodeGroup's run of k steps: its windowed reads are, step by step, the sum over
    the members still running of min(cached + step, window), and its prices step_time's."""
    group = DecodeGroup(4, lambda s: (s.admit_order,), window)
    group.tick = tick
    cached, left = [], []
    for i, (prompt, done, togo) in enumerate(members):
        seq = Sequence(Request(i, 0.0, prompt, done + togo))
        seq.status, seq.decoding, seq.admit_order = Status.RUNNING, True, i
        seq.num_computed, seq.num_generated = prompt + done - 1, done
        group.join(seq)
        cached.append(seq.num_computed)
        left.append(togo)
        if i == 0:  # the others join later on the group's clock, the first still running
            later %= togo
            group.tick += later
            cached[0], left[0] = cached[0] + later, left[0] - later
    k = min(k, group.steps_left()[1])
    run = group.price(ROOFLINE, k)
    want = [sum(min(c + j, window) for c, r in zip(cached, left) if r >= j) for j in range(1, k + 1)]
    assert run.window_read == want
    assert group.window_read() == want[0]
    assert run.durations == [ROOFLINE.step_time(features_of(n, 0, 0, n, kv, kv, 0, 0, 0, w, w, 0, 0))
                             for n, kv, w in zip(run.num_seqs, run.kv_read, run.window_read)]


MLA = sim_setup(build_config({"model": {"name": "deepseek-v2-lite"}, "workload": {"source": "chat", "num_requests": 1},
                              "hardware": {"name": "a100-80gb"}})).cost


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["windowed", "moe", "mla"]), st.integers(1, 300), st.integers(0, 4), st.integers(0, 3000),
       st.integers(0, 200_000), st.integers(0, 3), st.integers(0, 2))
def test_the_served_price_of_a_deployed_model_is_its_forms(kind, seqs, chunks, prefill, kv, after_prefill, extra):
    """The compiled step of a deployed form (core/cost/deployed_step.py) prices any step
    as the form itself does, bit for bit: decode-only, mixed, windowed, MLA."""
    cost = {"windowed": WINDOWED["served"], "moe": MOE, "mla": MLA}[kind]
    chunks = min(chunks, seqs) if prefill else 0
    decode = seqs - chunks
    pairs = kv + prefill * (prefill + 1) // 2 + extra
    f = features_of(seqs, chunks, prefill, decode, kv + prefill, pairs, after_prefill % 2, after_prefill // 2,
                    extra, min(kv, 128 * seqs) + prefill, min(pairs, 128 * seqs), prefill * (prefill + 1) // 2 + extra,
                    prefill * (prefill + 1) // 2 if chunks else 0)
    assert cost.step_time(f) == cost._form(f).step_time(f)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(WINDOWED)), st.integers(1, 48), st.integers(0, 4000), st.data())
def test_a_windowed_run_without_rows_is_priced_as_with_them(cost, n, cached, data):
    """rows=False (no step table): the same durations, ends and stretches; only the per-step
    lists stay empty (window_decode_run builds them for a step table alone)."""
    from batchlab.core.fast_forward import window_decode_run
    window, k = 128, data.draw(st.integers(1, 120))
    open_n = data.draw(st.integers(0, n))
    bases = data.draw(st.lists(st.integers(0, window - 1), min_size=open_n, max_size=open_n))
    changes, left = [], (n, cached, open_n, sum(bases))
    for step in sorted(set(data.draw(st.lists(st.integers(2, max(2, k)), max_size=4)))):
        if step > k or left[0] <= 1:
            break
        dn = data.draw(st.integers(1, left[0] - 1))
        do = min(dn, left[2])
        db = min(left[3], do * (window - 1))
        dc = min(left[1], dn * 50)
        changes.append((step, dn, dc, do, db))
        left = (left[0] - dn, left[1] - dc, left[2] - do, left[3] - db)
    after = data.draw(st.sampled_from([(0, 0), (1, 0), (0, 1)]))
    args = (WINDOWED[cost], n, cached, open_n, sum(bases), 3, window, changes, k, *after, 0.5)
    full, lean = window_decode_run(*args, rows=True), window_decode_run(*args, rows=False)
    assert lean.durations == full.durations and (lean.sizes, lean.ends) == (full.sizes, full.ends)
    assert len(full.num_seqs) == len(full.kv_read) == len(full.window_read) == k
    assert (lean.num_seqs, lean.kv_read, lean.window_read) == ([], [], None)
