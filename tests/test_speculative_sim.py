"""Speculative decoding in the simulator (core/speculative/): the acceptance model, the
emission's seeded draws, the draft's price, and runs that must equal each other: a
speculative run fast-forwarded or stepped, and runs without speculation untouched."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.emission import Emission
from batchlab.core.features import StepFeatures
from batchlab.core.speculative.acceptance import (from_counts, per_position, read_acceptance_file,
                                                  write_acceptance_file)
from batchlab.core.speculative.draft_cost import DraftedCost
from batchlab.core.speculative.emission import SpeculativeEmission, uniform
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from tests.same_runs import COSTS, assert_same
from tests.test_fast_forward import scenarios


def test_per_position_acceptance_is_a_distribution_of_leading_accepts():
    a = per_position([0.8, 0.5, 0.25], 3)
    # keep 1: first draft rejected; keep 4: all three accepted
    assert a.probs == pytest.approx((0.2, 0.8 * 0.5, 0.8 * 0.5 * 0.75, 0.8 * 0.5 * 0.25))
    assert sum(a.probs) == pytest.approx(1.0)
    assert a.mean_length == pytest.approx(1 + 0.8 + 0.4 + 0.1)
    assert per_position([0.0], 4).probs == (1.0, 0.0, 0.0, 0.0, 0.0)
    assert per_position([1.0], 2).mean_length == 3.0


def test_an_acceptance_file_round_trips_and_serves_a_shorter_draft(tmp_path):
    path = tmp_path / "acceptance.csv"
    write_acceptance_file(path, 3, {1: 10, 2: 20, 4: 70})
    a = read_acceptance_file(path, 3)
    assert a.probs == pytest.approx((0.1, 0.2, 0.0, 0.7))
    bom = tmp_path / "bom.csv"  # as a spreadsheet saves it: a byte-order mark, CRLF, a blank line
    bom.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n") + b"\r\n")
    assert read_acceptance_file(bom, 3).probs == a.probs
    short = read_acceptance_file(path, 1)  # keep at most 2: the measured 4s keep 2
    assert short.probs == pytest.approx((0.1, 0.9))
    with pytest.raises(ValueError, match="num_speculative_tokens=3.*k=4"):
        read_acceptance_file(path, 4)


@pytest.mark.parametrize("text, match", [
    ("a,b,c\n3,1,2\n", "row 1: expected the header"),
    ("num_speculative_tokens,emitted,count\n3,5,2\n", "row 2: expected"),
    ("num_speculative_tokens,emitted,count\n3,x,2\n", "row 2: expected three whole numbers"),
    ("num_speculative_tokens,emitted,count\n3,1,2\n2,1,1\n", "row 3: num_speculative_tokens 2"),
    ("num_speculative_tokens,emitted,count\n", "no verification counted"),
])
def test_a_bad_acceptance_file_is_one_line_naming_the_row(tmp_path, text, match):
    path = tmp_path / "a.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as e:
        read_acceptance_file(path, 3)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_draws_are_stateless_and_match_the_distribution():
    u = [uniform(7, r, p) for r in range(200) for p in range(50)]
    assert u == [uniform(7, r, p) for r in range(200) for p in range(50)]  # a function of its inputs
    assert 0.0 <= min(u) and max(u) < 1.0
    assert abs(np.mean(u) - 0.5) < 0.01  # 10,000 draws: sd of the mean 0.003
    a = per_position([0.7], 3)
    e = SpeculativeEmission(3, a, seed=1)

    class Seq:  # what emitted() reads of a sequence
        def __init__(self, rid, gen):
            self.request, self.num_generated = type("R", (), {"id": rid})(), gen

    kept = [e.emitted(Seq(r, g), 4) for r in range(100) for g in range(100)]
    counts = np.bincount(kept, minlength=5)[1:] / len(kept)
    assert np.allclose(counts, a.probs, atol=0.015)  # 10,000 draws: sd <= 0.005 per bin
    assert e.stats()["mean_acceptance_length"] == pytest.approx(np.mean(kept))
    assert max(e.emitted(Seq(r, 0), 2) for r in range(100)) == 2  # never more than verified


def test_the_draft_adds_k_passes_priced_for_its_shape():
    target = LinearCostModel(0.01, {"decode_tokens": 1e-3})
    draft = LinearCostModel(0.0, {"num_seqs": 1e-4, "kv_tokens_read": 1e-7})
    cost = DraftedCost(target, draft, 3)
    f = StepFeatures(num_seqs=4, decode_tokens=16, kv_tokens_read=1000, attention_pairs=1000)
    first = 4e-4 + 1000e-7  # the step's own tokens
    later = sum(4e-4 + (1004 + 4 * i) * 1e-7 for i in range(2))  # two one-token passes
    assert cost.step_time(f) == pytest.approx(0.01 + 0.016 + first + later)
    assert cost.draft_seconds(StepFeatures()) == 0.0
    # A draft sharing the target's KV (its own first layers) runs k one-token passes of the
    # decoding sequences, and nothing on a step of prefills alone.
    shared = DraftedCost(target, draft, 3, shares_kv=True)
    assert shared.draft_seconds(f) == pytest.approx(sum(4e-4 + (1000 + 4 * i) * 1e-7 for i in range(3)))
    prefill = StepFeatures(num_seqs=2, num_prefill_seqs=2, prefill_tokens=300, kv_tokens_read=300)
    assert shared.draft_seconds(prefill) == 0.0 < cost.draft_seconds(prefill)


def _work(seed: int, n: int = 30, together: bool = False) -> Workload:
    """n requests; together: all at 0, so the schedule does not depend on the price."""
    rng = np.random.default_rng(seed)
    arrivals = np.zeros(n) if together else np.cumsum(rng.exponential(0.05, n))
    return Workload(arrivals, rng.integers(1, 300, n), rng.integers(1, 120, n))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(1, 5), st.floats(0.0, 1.0), st.integers(0, 2**32))
def test_a_speculative_run_equals_its_step_by_step_run(scenario, k, rate, seed):
    work, cfg, blocks, cost, replicas = scenario
    kw = dict(replicas=replicas, router="least_loaded")
    price = DraftedCost(COSTS[cost], COSTS["linear"], k)
    runs = [simulate(work, cfg, price, blocks, fast_forward=ff,
                     emission=SpeculativeEmission(k, per_position([rate], k), seed), **kw)
            for ff in (True, False)]
    assert_same(*runs)
    assert runs[0].meta.speculative == runs[1].meta.speculative
    done = runs[0].requests["status"] == "finished"
    # Every finished reply has exactly its tokens: kept drafts never overshoot.
    assert (runs[0].requests["output_len"][done] >= 1).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_runs_without_speculation_are_unchanged(scenario):
    work, cfg, blocks, cost, replicas = scenario
    kw = dict(replicas=replicas, router="least_loaded")
    plain = simulate(work, cfg, COSTS[cost], blocks, **kw)
    one = simulate(work, cfg, COSTS[cost], blocks, emission=Emission(), **kw)
    assert_same(plain, one)
    assert plain.meta.as_dict() == one.meta.as_dict() and plain.meta.speculative is None
    assert "mean_acceptance_length" not in plain.summary()


def test_same_seed_same_run_other_seed_other_draws():
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=8)
    cost = DraftedCost(COSTS["roofline"], COSTS["linear"], 3)

    def run(seed):
        return simulate(_work(1), cfg, cost, 4000, emission=SpeculativeEmission(3, per_position([0.6], 3), seed))

    a, b, c = run(5), run(5), run(6)
    assert_same(a, b)
    assert a.meta.speculative.as_dict() == b.meta.speculative.as_dict()
    assert a.meta.speculative.accepted_tokens != c.meta.speculative.accepted_tokens
    s = a.summary()
    assert s["mean_acceptance_length"] == a.meta.speculative.mean_acceptance_length
    assert 1.0 < s["mean_acceptance_length"] < 4.0


def test_tokens_kept_together_are_zero_gaps_and_rejections_keep_the_schedule():
    cfg = SchedulerConfig(policy="continuous", max_num_seqs=8)
    cost = COSTS["linear"]
    plain = simulate(_work(2, together=True), cfg, cost, 4000)
    # Every draft rejected: one token a step, as without drafts (only the price differs).
    none = simulate(_work(2, together=True), cfg, cost, 4000, emission=SpeculativeEmission(2, per_position([0.0], 2), 0))
    assert len(none.steps["start_s"]) == len(plain.steps["start_s"])
    assert np.array_equal(none.steps["num_seqs"], plain.steps["num_seqs"])
    assert np.array_equal(none.steps["decode_tokens"], 3 * plain.steps["decode_tokens"])
    assert (none.itl > 0).all()
    # Every draft accepted: 3 tokens a verification; all but the first of each are zero gaps.
    em = SpeculativeEmission(2, per_position([1.0], 2), 0)
    allk = simulate(_work(2, together=True), cfg, cost, 4000, emission=em)
    # Each verification brings one gap after the step before and zeros for the rest (a
    # reply's end cuts what it kept): the tokens after the first, less one a verification.
    after_first = int((allk.requests["output_len"] - 1).sum())
    assert int((allk.itl == 0).sum()) == after_first - em.verifications
    assert int((allk.itl > 0).sum()) == em.verifications
    assert em.kept > after_first  # some replies ended within what a verification kept
    assert allk.summary()["total_output_tokens"] == plain.summary()["total_output_tokens"]



def test_a_request_whose_drafts_cannot_fit_is_rejected_not_stuck():
    """prompt + output - 1 tokens fill the pool exactly: without drafts it runs, with k
    drafts its last verification could never get its blocks, so it is refused on arrival."""
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=4, block_size=4)
    w = Workload(np.zeros(1), np.asarray([9]), np.asarray([8]))  # 16 tokens of KV: 4 blocks
    plain = simulate(w, cfg, COSTS["linear"], 4)
    assert list(plain.requests["status"]) == ["finished"]
    spec = simulate(w, cfg, COSTS["linear"], 4, emission=SpeculativeEmission(2, per_position([0.5], 2), 0))
    assert list(spec.requests["status"]) == ["rejected"]
    assert "and 2 drafts" in spec.requests["reject_reason"][0]
