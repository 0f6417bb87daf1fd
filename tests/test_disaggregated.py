"""Prefill/decode disaggregation in the simulator (sim/disaggregated): every request
passes the prefill pool then the decode pool once, its KV arrives over the link before
the decode side runs it, the latencies mean what vLLM's do, fast-forward changes
nothing, each pool obeys Little's law, and the same input gives the same run."""
from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings, strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.kv_handoff import KVTransfer
from batchlab.core.model.links import LINKS
from batchlab.core.pd_deployment import PDDeployment, Pool
from batchlab.core.workload import Workload
from batchlab.sim.disaggregated import DisaggregatedWorld, simulate_disaggregated
from batchlab.sim.disaggregated.summary import disaggregated_summary, stability
from tests.same_runs import COSTS, assert_same

COST = LinearCostModel(0.004, {"prefill_tokens": 2e-5, "decode_tokens": 5e-5, "kv_tokens_read": 1e-7})
KV_BYTES = 131_072  # Llama-3-8B in bf16: 32 layers x 2 x 8 heads x 128 x 2 bytes


def workload(n: int, seed: int, gap: float = 0.03, prompt=(20, 1500), output=(1, 120)) -> Workload:
    rng = np.random.default_rng(seed)
    arrivals = np.concatenate(([0.0], np.cumsum(rng.exponential(gap, n - 1))))
    return Workload(arrivals, rng.integers(*prompt, n), rng.integers(*output, n))


def deployment(p: int = 2, d: int = 2, link: str = "ib-ndr", policy: str = "chunked",
               blocks: int = 3000, seats: int = 16, router: str = "least_loaded",
               lanes: int = 1, cost: str = "", layers: int = 0) -> PDDeployment:
    sc = SchedulerConfig(policy=policy, max_num_seqs=seats, block_size=16, max_num_batched_tokens=2048)
    price = COSTS[cost] if cost else COST
    return PDDeployment(Pool(p, sc, price, blocks, router), Pool(d, sc, price, blocks, router),
                        KVTransfer(LINKS[link], KV_BYTES, lanes, layers))


def same_run(a, b) -> None:
    for name in ("requests", "steps"):
        ta, tb = getattr(a.result, name), getattr(b.result, name)
        assert ta.keys() == tb.keys()
        for c in ta:
            assert np.array_equal(ta[c], tb[c]), f"{name}.{c}"
    ga = np.repeat(a.result.itl_gaps, a.result.itl_counts)
    gb = np.repeat(b.result.itl_gaps, b.result.itl_counts)
    assert np.array_equal(np.sort(ga), np.sort(gb))
    for c, v in a.handoffs.table().items():
        assert np.array_equal(v, b.handoffs.table()[c]), f"handoffs.{c}"


deployments = st.builds(deployment, p=st.integers(1, 3), d=st.integers(1, 3),
                        link=st.sampled_from(sorted(LINKS)), policy=st.sampled_from(["continuous", "chunked"]),
                        blocks=st.integers(200, 3000), seats=st.integers(1, 16),
                        router=st.sampled_from(["round_robin", "least_loaded", "prefix_aware"]),
                        lanes=st.integers(1, 4), cost=st.sampled_from(["", *sorted(COSTS)]),
                        layers=st.sampled_from([0, 0, 32]))


@settings(max_examples=25, deadline=None)
@given(deployments, st.integers(5, 60), st.integers(0, 10**6))
def test_every_request_passes_prefill_then_decode_once(dep, n, seed):
    w = workload(n, seed)
    run = simulate_disaggregated(w, dep)
    req, h, p = run.result.requests, run.handoffs.table(), dep.prefill.replicas
    assert len(req["request_id"]) == n and sorted(req["request_id"]) == list(range(n))
    done = req["status"] == "finished"
    rejected = req["status"] == "rejected"
    assert (done | rejected).all()
    # Handed on exactly once: every finished reply longer than one token, nothing else.
    multi = done & (req["output_len"] > 1)
    assert sorted(h["request_id"]) == sorted(req["request_id"][multi])
    # ... from a prefill replica to a decode replica, which finished it.
    assert ((h["prefill_replica"] >= 0) & (h["prefill_replica"] < p)).all()
    assert (h["decode_replica"] >= p).all()
    row = {int(i): k for k, i in enumerate(req["request_id"])}
    for i, d in zip(h["request_id"], h["decode_replica"]):
        assert req["replica"][row[int(i)]] == d
    # One-token replies end where they began, on the prefill side.
    assert (req["replica"][done & (req["output_len"] == 1)] < p).all()
    # The KV is sent once the prefill is done (layer-wise: within its last step) and both
    # links are free, and takes its time (layer-wise: at least).
    tokens = req["prompt_len"][[row[int(i)] for i in h["request_id"]]]
    took = np.array([dep.transfer.seconds(int(t)) for t in tokens])
    if dep.transfer.layers:
        assert (h["arrived_s"] - h["sent_s"] >= took * (1 - 1e-9)).all()
        assert (h["arrived_s"] > h["ready_s"]).all()
    else:
        assert (h["sent_s"] >= h["ready_s"]).all()
        assert np.allclose(h["arrived_s"] - h["sent_s"], took, rtol=1e-9, atol=1e-12)
    assert (h["kv_bytes"] == tokens * KV_BYTES).all()
    # The first token comes from the prefill side, before the KV leaves.
    first = req["first_token_s"][[row[int(i)] for i in h["request_id"]]]
    assert np.array_equal(first, h["ready_s"])


@settings(max_examples=20, deadline=None)
@given(deployments, st.integers(5, 60), st.integers(0, 10**6))
def test_fast_forward_changes_nothing(dep, n, seed):
    """As for one pool (tests/test_fast_forward.py): the same steps and requests, times
    to rounding (a run's times are summed in another order than step by step)."""
    w = workload(n, seed, output=(1, 300))
    a, b = simulate_disaggregated(w, dep), simulate_disaggregated(w, dep, fast_forward=False)
    assert_same(a.result, b.result)
    ha, hb = a.handoffs.table(), b.handoffs.table()
    for c in ha:
        np.testing.assert_allclose(ha[c], hb[c], rtol=1e-9, atol=1e-9, err_msg=c)


@settings(max_examples=10, deadline=None)
@given(deployments, st.integers(5, 40), st.integers(0, 10**6), st.integers(1, 8), st.sampled_from([0.0, 0.05]))
def test_closed_loop_fast_forward_changes_nothing(dep, n, seed, users, think):
    """Closed loop (a reply brings its user's next request): every request still passes
    once, and fast-forward still changes nothing."""
    w = workload(n, seed, output=(1, 200))
    w = Workload(w.arrival, w.prompt_len, w.output_len, max_concurrency=users, think_time_s=think)
    a, b = simulate_disaggregated(w, dep), simulate_disaggregated(w, dep, fast_forward=False)
    assert_same(a.result, b.result)
    assert sorted(a.result.requests["request_id"]) == list(range(n))
    assert (a.result.requests["status"] != "waiting").all()


def test_fast_forward_skips_steps_on_the_decode_side():
    w, dep = workload(200, 1, output=(100, 300)), deployment(1, 1)
    env = simpy.Environment()
    world = DisaggregatedWorld(env, w, dep)
    env.run()
    assert world.decode_rec.decisions < world.decode_rec.num_steps / 2


def test_same_input_same_run():
    w, dep = workload(150, 7), deployment(2, 3)
    same_run(simulate_disaggregated(w, dep), simulate_disaggregated(w, dep))


def test_decode_runs_a_request_only_after_its_kv_arrived():
    w, dep = workload(80, 3), deployment(2, 2, link="ib-hdr")
    first_run: dict[int, float] = {}

    def watch(index, start, _dt, batch):
        if index >= dep.prefill.replicas:
            for seq in batch.seqs:
                first_run.setdefault(seq.id, start)
    run = simulate_disaggregated(w, dep, observer=watch)
    h = run.handoffs.table()
    assert len(h["request_id"]) == len(first_run)
    for i, arrived, admitted in zip(h["request_id"], h["arrived_s"], h["admitted_s"]):
        assert first_run[int(i)] >= arrived
        assert admitted == first_run[int(i)]  # the decode queue ends where its first step starts
    # The row keeps the client's view: first scheduled on the prefill side, before the KV left.
    req = run.result.requests
    row = {int(i): k for k, i in enumerate(req["request_id"])}
    at = [row[int(i)] for i in h["request_id"]]
    assert (req["first_scheduled_s"][at] <= h["ready_s"]).all()


def test_a_decode_backlog_is_an_overload_though_the_prefill_queue_is_short():
    """Three prefill replicas feed one decode replica of two seats: prompts clear at once,
    the decode queue grows through the run. Its verdict, not the requests' queueing
    delay (the prefill pool's), says so."""
    sc = SchedulerConfig(policy="chunked", max_num_seqs=2, block_size=16, max_num_batched_tokens=2048)
    big = SchedulerConfig(policy="chunked", max_num_seqs=64, block_size=16, max_num_batched_tokens=4096)
    dep = PDDeployment(Pool(3, big, COST, 5000), Pool(1, sc, COST, 5000), KVTransfer(LINKS["nvlink4"], KV_BYTES))
    run = simulate_disaggregated(workload(300, 2, gap=0.02, prompt=(20, 100), output=(50, 80)), dep)
    s = disaggregated_summary(run)
    assert (s["prefill_stability"], s["decode_stability"]) == ("stable", "overloaded")
    assert stability(run) == "overloaded"
    assert s["mean_decode_queue_ms"] > 10 * s["mean_queueing_delay_ms"]


def test_one_request_latencies_by_hand():
    """One request, a constant step price: the prefill's step gives the first token,
    the link adds its time, then the decode side's steps; TPOT includes the transfer."""
    step, prompt, out = 0.01, 1000, 5
    cost = LinearCostModel(step)
    sc = SchedulerConfig(policy="chunked", max_num_seqs=4, block_size=16, max_num_batched_tokens=2048)
    link = LINKS["roce-200"]
    dep = PDDeployment(Pool(1, sc, cost, 500), Pool(1, sc, cost, 500), KVTransfer(link, KV_BYTES))
    run = simulate_disaggregated(Workload(np.array([0.0]), np.array([prompt]), np.array([out])), dep)
    transfer = link.latency_s + prompt * KV_BYTES / link.bandwidth
    s = run.result.summary()
    assert s["mean_ttft_ms"] == pytest.approx(step * 1000)
    assert run.result.requests["finish_s"][0] == pytest.approx(step + transfer + (out - 1) * step)
    assert s["mean_tpot_ms"] == pytest.approx((transfer + (out - 1) * step) / (out - 1) * 1000)
    # The second token's gap holds the transfer; the others are one step each.
    gaps = sorted(run.result.itl)
    assert gaps == pytest.approx([step] * (out - 2) + [transfer + step])


def test_a_pool_that_cannot_hold_a_request_refuses_it_before_prefill():
    dep = deployment(1, 1, blocks=10)  # 160 tokens a decode replica
    w = Workload(np.array([0.0, 0.1]), np.array([100, 400]), np.array([20, 20]))
    run = simulate_disaggregated(w, dep)
    req = run.result.requests
    assert list(req["status"]) == ["finished", "rejected"]
    assert "KV blocks" in req["reject_reason"][1]
    assert list(run.handoffs.table()["request_id"]) == [0]


@pytest.mark.parametrize("pool", ["prefill", "decode"])
def test_littles_law_per_pool(pool):
    """The mean number of requests in a pool, sampled on a fine clock, equals its
    throughput times the mean time a request spends there (L = lambda W). Sampling every
    DT seconds counts each request's stay to within one sample: |sum - W/DT| <= 1 each."""
    w, dep = workload(300, 11, gap=0.02), deployment(2, 2)
    env = simpy.Environment()
    # Stepped: a fast-forward run retires its early finishers when it starts (their
    # times are right, but a sampler would miss them while it runs).
    world = DisaggregatedWorld(env, w, dep, fast_forward=False)
    replicas = world.prefill if pool == "prefill" else world.decode
    DT, samples = 0.0005, []

    def sampler():
        while True:
            world.arrivals.pull(env.now)  # requests due are queued (any process may pull: sim/arrivals.py)
            samples.append(sum(len(r.scheduler.running) + r.scheduler.num_waiting for r in replicas))
            yield env.timeout(DT)
    env.process(sampler())
    env.run(until=w.arrival[-1] + 60)
    req, h = world.rec.request_table(), world.handoffs.table()
    row = {int(i): k for k, i in enumerate(req["request_id"])}
    at = [row[int(i)] for i in h["request_id"]]
    if pool == "prefill":
        enter, leave = req["arrival_s"], req["first_token_s"]
    else:
        enter, leave = h["arrived_s"], req["finish_s"][at]
    stays = leave - enter
    assert np.isfinite(stays).all() and len(stays) > 100
    area = sum(samples) * DT  # integral of the number present
    assert abs(area - stays.sum()) <= len(stays) * DT
    duration = len(samples) * DT
    assert area / duration == pytest.approx(len(stays) / duration * stays.mean(), abs=len(stays) * DT / duration)


def test_summary_reports_pools_and_transfers():
    w, dep = workload(100, 5), deployment(1, 2)
    run = simulate_disaggregated(w, dep)
    s = disaggregated_summary(run)
    h = run.handoffs.table()
    assert s["kv_transfers"] == len(h["request_id"]) and s["kv_transfer_bytes"] == int(h["kv_bytes"].sum())
    assert s["gpus"] == 3
    steps = run.result.steps
    busy = steps["duration_s"][steps["replica"] == 0].sum()
    assert s["prefill_busy_fraction"] == pytest.approx(busy / s["duration"])
    for k in ("prefill_busy_fraction", "decode_busy_fraction", "decode_slot_utilization"):
        assert 0 < s[k] <= 1
    dec = steps["replica"] > 0
    full = steps["duration_s"][dec & (steps["num_seqs"] == steps["seats"])].sum()
    assert s["decode_seats_full_fraction"] == pytest.approx(full / (2 * s["duration"]))


def test_a_light_decode_pool_steps_all_the_time_with_its_seats_never_full():
    """What 'stepping' says and 'seats all full' adds: one request at a time keeps a
    decode replica stepping most of the run, yet never fills its seats; crowded, they fill."""
    light = disaggregated_summary(simulate_disaggregated(workload(40, 1, gap=0.5, output=(300, 301)),
                                                         deployment(1, 1)))
    assert light["decode_busy_fraction"] > 0.5 and light["decode_seats_full_fraction"] == 0.0
    crowded = disaggregated_summary(simulate_disaggregated(workload(200, 1, gap=0.01, output=(300, 301)),
                                                           deployment(1, 1, seats=4)))
    assert crowded["decode_seats_full_fraction"] > 0.5 >= light["decode_seats_full_fraction"]


def test_layer_wise_transfer_hides_all_but_the_last_layer_behind_the_prefill():
    """One request, a constant step: sent layer by layer, the KV may leave (L-1)/L of the
    prefill's step early and arrives after the last layer's share of the bytes, or after
    the whole transfer from that start, whichever is later."""
    step, prompt, out, layers = 0.05, 1000, 4, 32
    cost = LinearCostModel(step)
    sc = SchedulerConfig(policy="chunked", max_num_seqs=4, block_size=16, max_num_batched_tokens=2048)
    w = Workload(np.array([0.0]), np.array([prompt]), np.array([out]))
    arrived = {}
    for n in (0, layers):
        t = KVTransfer(LINKS["ib-ndr"], KV_BYTES, 1, n)
        run = simulate_disaggregated(w, PDDeployment(Pool(1, sc, cost, 500), Pool(1, sc, cost, 500), t))
        arrived[n] = run.handoffs.table()["arrived_s"][0]
    whole = KVTransfer(LINKS["ib-ndr"], KV_BYTES).seconds(prompt)
    latency = LINKS["ib-ndr"].latency_s
    assert arrived[0] == pytest.approx(step + whole)
    expected = max(step - step * (layers - 1) / layers + whole, step + latency + (whole - latency) / layers)
    assert arrived[layers] == pytest.approx(expected) and arrived[layers] < arrived[0]
