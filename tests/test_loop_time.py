"""The serving loop's time between steps (core/cost/loop_time.py): fitted from busy gaps,
recorded in a profile, and added by the simulator to every step the profile prices."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.at_speed import CostAtSpeed
from batchlab.core.cost.loop_time import fit_gaps, Overhead, table_gaps
from batchlab.core.cost.profile import LoopTime, load_profile
from batchlab.core.features import StepFeatures
from batchlab.core.workload import Workload
from batchlab.sim import simulate
from tests.profiles import BASE, make_profile


def _work(n: int = 30, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    return Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(5, 200, n), rng.integers(2, 40, n))


def test_fit_recovers_per_step_and_per_sequence_gaps():
    seqs = np.array([1, 2, 3, 4, 8, 16] * 5, dtype=float)
    gaps = 1e-4 + 5e-6 * seqs
    got = fit_gaps(gaps, seqs)
    assert got.per_step_s == pytest.approx(1e-4) and got.per_seq_s == pytest.approx(5e-6)
    assert got.gaps == seqs.size
    flat = fit_gaps(np.full(6, 2e-4), np.arange(1, 7, dtype=float))  # no slope: the mean
    assert flat.per_step_s == pytest.approx(2e-4) and flat.per_seq_s == pytest.approx(0, abs=1e-12)


def test_the_simulator_waits_the_loop_after_every_step_and_table_gaps_finds_it_again():
    """Stepped and fast-forwarded alike: a simulated step lasts its price plus the loop;
    a real run's table would show the same as busy gaps."""
    loop = Overhead(3e-4, 1e-5, 0.0, 0)
    cfg = SchedulerConfig(policy="chunked", max_num_seqs=8, max_num_batched_tokens=128)
    work = _work()
    work = Workload(np.zeros(len(work)), work.prompt_len, work.output_len)  # same steps either way
    for ff in (True, False):
        plain = simulate(work, cfg, BASE, 2000, fast_forward=ff)
        looped = simulate(work, cfg, CostAtSpeed(BASE, loop=loop), 2000, fast_forward=ff)
        s, p = looped.steps, plain.steps
        assert len(s["duration_s"]) == len(p["duration_s"])
        assert np.allclose(s["duration_s"], p["duration_s"] + 3e-4 + 1e-5 * p["num_seqs"], rtol=0, atol=1e-12)
        assert looped.summary()["mean_tpot_ms"] > plain.summary()["mean_tpot_ms"]
    looped = simulate(_work(), cfg, CostAtSpeed(BASE, loop=loop), 2000)  # arrivals apart: idle gaps too
    # A table whose steps are separated by the loop gives it back (the sim's own table has
    # it inside the durations: move it out, as a real run's would be).
    st = dict(looped.steps)
    st["duration_s"] = st["duration_s"] - 3e-4 - 1e-5 * st["num_seqs"]
    g, n = table_gaps(st)
    busy = g < 1e-3
    back = fit_gaps(g[busy], n[busy])
    assert back.per_step_s == pytest.approx(3e-4, rel=0.05) and back.per_seq_s == pytest.approx(1e-5, rel=0.1)


def test_a_profile_with_a_loop_simulates_slower_and_prices_steps_as_before():
    bare = make_profile()
    looped = bare.model_copy(update={"loop": LoopTime(per_step_s=5e-4, per_seq_s=0.0, gaps=10)})
    f = bare.cost_model()
    from batchlab.core.features import StepFeatures
    step = StepFeatures(2, 0, 0, 2, 200, 200)
    assert looped.cost_model().step_time(step) == f.step_time(step)  # the step price alone
    assert looped.simulation_cost().step_time(step) == pytest.approx(f.step_time(step) + 5e-4)
    assert bare.simulation_cost() is not None and bare.loop_overhead() is None
    assert looped.simulation_cost(overhead=2.0).step_time(step) == pytest.approx(
        bare.cost_model(overhead=2.0).step_time(step) + 1e-3)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 64), st.integers(0, 100_000), st.integers(1, 40),
       st.floats(1e-6, 1e-2), st.floats(0.0, 1e-3))
def test_a_run_priced_whole_is_its_steps_priced_one_by_one(n, kv0, m, per_step, per_seq):
    """decode_run_times adds the loop in step_time's order: otherwise a run priced whole
    and the same run cut at an arrival (or stepped) differ in the last bit."""
    cost = CostAtSpeed(load_profile("default").cost_model(), 1.1, 0.9, loop=Overhead(per_step, per_seq, 0.0, 0))
    whole = cost.decode_run_times(StepFeatures(n, 0, 0, n, kv0, kv0), m)
    steps = [cost.step_time(StepFeatures(n, 0, 0, n, kv, kv)) for kv in range(kv0, kv0 + m * n, n)]
    assert whole.tolist() == steps
    assert cost.decode_times(n, kv0, m) == steps
