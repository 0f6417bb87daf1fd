"""`batchlab validate` with a [deployment]: a prefill engine and a decode engine served in
one process (backend/disaggregated/pools.py), each pool on its own timeline, judged
against the simulated deployment (experiments/validation/pools.py). Untimed (a second a
step, copies free) the real pools' schedule is the simulator's at that price, request for
request and hand-off for hand-off: the two worlds mean the same by TTFT, TPOT and the
hand-off. End to end, validate reports each judged number and the hand-off's measured
time against its price; nothing here depends on the machine's speed."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.kv_handoff import KVTransfer
from batchlab.core.model.links import LinkSpec
from batchlab.core.pd_deployment import PDDeployment, Pool
from batchlab.core.workload import build_workload
from batchlab.core.workload.config import WorkloadConfig
from batchlab.sim.disaggregated import simulate_disaggregated
from tests.helpers import SMALL_VALIDATE, cli, one_line_error

SECOND_A_STEP = LinearCostModel(1.0, {})
FREE_LINK = KVTransfer(LinkSpec(name="free", kind="test", bandwidth=1e30), 1)  # transfers take ~no time
PD = ["--prefill-replicas", "1", "--decode-replicas", "1"]


@pytest.mark.parametrize("policy, rate, decode_blocks", [("continuous", 0.5, 12), ("chunked", 3.0, 30),
                                                         ("chunked", 3.0, 18)])
def test_untimed_pools_step_as_the_simulated_deployment(runtime, policy, rate, decode_blocks):
    from batchlab.backend.disaggregated.pools import run_pools

    w = build_workload(WorkloadConfig(num_requests=10, rate=rate, max_prompt_len=48, max_output_len=8, seed=3))
    sc = SchedulerConfig(policy=policy, block_size=4 if policy == "chunked" else 8, max_num_seqs=6,
                         max_num_batched_tokens=32 if policy == "chunked" else None)
    real = run_pools(runtime, w, sc, 60, decode_blocks)
    dep = PDDeployment(Pool(1, sc, SECOND_A_STEP, 60), Pool(1, sc, SECOND_A_STEP, decode_blocks), FREE_LINK)
    sim = simulate_disaggregated(w, dep, fast_forward=False)
    a, b = real.result.requests, sim.result.requests
    assert sorted(a["request_id"]) == list(range(10)) and set(a["status"]) == {"finished"}
    ia, ib = np.argsort(a["request_id"]), np.argsort(b["request_id"])
    for c in ("replica", "first_scheduled_s", "first_token_s", "finish_s", "preemptions"):
        assert np.array_equal(a[c][ia], b[c][ib]), c
    ha, hb = real.log.table(), sim.handoffs.table()
    for c in ("request_id", "ready_s", "sent_s", "arrived_s", "admitted_s"):
        assert np.array_equal(ha[c], hb[c]), c
    steps = real.result.steps
    assert np.array_equal(steps["start_s"], sim.result.steps["start_s"])
    # the first token is the prefill side's: each one ends a step of replica 0
    pre = steps["replica"] == 0
    prefill_ends = set((steps["start_s"][pre] + steps["duration_s"][pre]).tolist())
    assert set(a["first_token_s"].tolist()) <= prefill_ends
    assert (ha["arrived_s"] >= ha["ready_s"]).all() and (ha["admitted_s"] >= ha["arrived_s"]).all()


def test_timed_pools_keep_their_timelines_consistent(runtime):
    from batchlab.backend.disaggregated.pools import run_pools

    w = build_workload(WorkloadConfig(num_requests=6, rate=40, max_prompt_len=48, max_output_len=8, seed=1))
    sc = SchedulerConfig(policy="continuous", block_size=8)
    run = run_pools(runtime, w, sc, 60, 60, timed=True)
    steps, h = run.result.steps, run.log.table()
    for r in (0, 1):  # each pool's steps follow one another on its own clock
        mine = steps["replica"] == r
        start, took = steps["start_s"][mine], steps["duration_s"][mine]
        assert (start[1:] - (start[:-1] + took[:-1]) > -1e-9).all()  # end = start + duration, rounded
        assert (steps["duration_s"][mine] > 0).all()
    assert len(h["request_id"]) == run.handoffs == sum(int(n) > 1 for n in w.output_len)
    assert (h["arrived_s"] > h["sent_s"]).all() and (h["sent_s"] >= h["ready_s"]).all()
    assert run.result.meta.timeline == "measured" and run.result.meta.world == "real"


@pytest.mark.backend
def test_validate_a_prefill_decode_deployment_end_to_end(profile_file, tmp_path):
    code, text, err = cli(["validate", *SMALL_VALIDATE, *PD, "--profile", str(profile_file), "--repeats", "2",
                           "--out", str(tmp_path)])
    assert code == 0, err
    assert "1 prefill + 1 decode engine" in text and "in-process copy" in text
    said = " ".join(text.split())  # the line is wrapped to the terminal
    assert " us a hand-off + its bytes at " in said and "one block's staging (cold) measured now" in said
    assert "KV hand-off mean (not judged): real" in text and "decode queue mean (not judged)" in text
    assert max(len(line) for line in text.splitlines()) <= 120
    cell = json.loads((tmp_path / "comparison.json").read_text())["cells"][0]
    assert cell["runs"] == 2 and len(cell["machine_speed"]) == 2
    rows = {m["key"]: m for m in cell["metrics"]}
    for key in ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_kv_transfer_ms"):
        m = rows[key]
        assert len(m["real"]) == 2 and all(v > 0 for v in m["real"]) and m["sim"] > 0, key
        assert math.isfinite(m["error"]) and m["spread"]["n"] == 2
    assert rows["mean_kv_transfer_ms"]["target"] is None  # reported, not judged
    assert {d["metric"] for d in cell["diagnostics"]["distributions"]} == {"TTFT", "TPOT", "ITL", "E2E latency"}
    for folder in ("real", "real_2", "sim", "sim_normalised"):
        steps = (tmp_path / "continuous" / folder / "steps.csv").read_text().splitlines()
        replica = steps[0].split(",").index("replica")
        assert {line.split(",")[replica] for line in steps[1:]} == {"0", "1"}  # both pools stepped
    meta = json.loads((tmp_path / "continuous" / "sim" / "meta.json").read_text())
    assert meta["kv_link"] == "in-process copy" and meta["prefill_replicas"] == meta["decode_replicas"] == 1
    assert "us a hand-off" in meta["kv_link_source"]  # the fixed cost priced, said in the meta


def test_the_copy_link_prices_a_fixed_cost_a_hand_off(runtime):
    """Given, deployment.link_latency_us; else one block's staging measured now, less its
    bytes (a time, whatever the machine: only its sign and units are checked)."""
    from types import SimpleNamespace

    from batchlab.backend.disaggregated.handoff import staging_seconds
    from batchlab.experiments.validation.pools import copy_link

    profile = SimpleNamespace(effective=SimpleNamespace(measured_copy_bandwidth=8e9))
    given = copy_link(profile, runtime, 8, latency_us=250.0)
    assert (given.bandwidth, given.latency_s) == (4e9, 250e-6) and "deployment.link_latency_us" in given.source
    assert given.transfer_seconds(4e6) == pytest.approx(250e-6 + 1e-3)
    measured = copy_link(profile, runtime, 8)
    assert 0.0 <= measured.latency_s < 1.0 and "one block's staging (cold) measured now" in measured.source
    assert staging_seconds(runtime.spec, runtime.dtype, runtime.device, 8, reps=3) > 0


@pytest.mark.backend
def test_a_given_link_latency_is_the_hand_offs_fixed_cost(profile_file, tmp_path):
    code, _, err = cli(["validate", *SMALL_VALIDATE, *PD, "--link-latency-us", "300", "--profile", str(profile_file),
                        "--repeats", "1", "--policy", "continuous", "--out", str(tmp_path)])
    assert code == 0, err
    meta = json.loads((tmp_path / "continuous" / "sim" / "meta.json").read_text())
    assert "300 us a hand-off: deployment.link_latency_us" in meta["kv_link_source"]


@pytest.mark.parametrize("flags, field", [
    (["--prefill-replicas", "2"], "deployment.prefill_replicas = 2"),
    (["--decode-tp", "2"], "deployment.decode_tp = 2"),
    ([*PD, "--link", "ib-ndr"], "deployment.link"),
    ([*PD, "--link-gbs", "10"], "deployment.link_gbs"),
    ([*PD, "--kv-overlap", "layers"], "deployment.overlap"),
    ([*PD, "--kv-tier-capacity", "1", "--no-kv-tier-prefix"], "[kv_tier] with [deployment]"),
])
def test_what_the_pools_cannot_serve_is_one_line(flags, field):
    code, _, err = cli(["validate", *SMALL_VALIDATE, "--profile", "default", *flags])
    one_line_error(code, err, field)
