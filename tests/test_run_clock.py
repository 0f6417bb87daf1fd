"""A fast-forward run's clock (core/run_clock.py, and core/run_clock.c where it was built)
against the plain Python the simulator stepped with: the same times, gaps and bisects, to
the bit. Both classes are tested here whichever one this process imports."""
from __future__ import annotations

import importlib.util
import struct
from array import array
from bisect import bisect_left
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import batchlab.core.run_clock as imported


def _pure_module():
    """core/run_clock.py itself, loaded beside whatever `imported` is."""
    source = Path(imported.__file__).with_name("run_clock.py")
    spec = importlib.util.spec_from_file_location("run_clock_reference", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PURE = _pure_module()
CLASSES = {"pure": PURE.RunClock}
if not imported.__file__.endswith(".py"):
    CLASSES["c"] = imported.RunClock
BUILT = pytest.mark.parametrize("kind", sorted(CLASSES))

durations = st.lists(st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)
                     | st.floats(min_value=1e-9, max_value=1e-1), max_size=80)
starts = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


def bits(values) -> list[bytes]:
    return [struct.pack("<d", v) for v in values]


def stepped(t0: float, ds: list[float]) -> list[float]:
    """The clock as stepping moves it (sim/engine.py before the run clock)."""
    times = [t0]
    for d in ds:
        t0 += d
        times.append(t0)
    return times


@BUILT
@settings(max_examples=300, deadline=None)
@given(t0=starts, ds=durations, split=st.integers(0, 80))
def test_times_are_the_running_sums_in_order(kind, t0, ds, split):
    clock = CLASSES[kind](t0)
    if ds:
        clock.add(ds[0])
    clock.extend(ds[1:split])
    clock.extend(ds[max(1, split):])
    want = stepped(t0, ds)
    assert len(clock) == len(ds)
    assert bits(clock.times(0, len(ds) + 1)) == bits(want)
    assert bits(clock.time(j) for j in range(len(ds) + 1)) == bits(want)
    assert bits(clock.durations()) == bits(ds)
    gaps = array("d")
    gaps.frombytes(clock.gaps(min(1, len(ds)), len(ds)))
    assert bits(gaps) == bits(want[j + 1] - want[j] for j in range(1, len(ds)))


coefs = st.floats(min_value=0.0, max_value=1e-3) | st.floats(min_value=-1e-6, max_value=1e-6)


@BUILT
@settings(max_examples=300, deadline=None)
@given(t0=starts, fixed=st.floats(min_value=0.0, max_value=1.0), kv_coef=coefs, pair_coef=coefs,
       kv0=st.integers(0, 1 << 40), n=st.integers(0, 1 << 12), m=st.integers(0, 300))
def test_a_line_is_the_loops_arithmetic(kind, t0, fixed, kv_coef, pair_coef, kv0, n, m):
    """line() against core/cost/gpu_step.py's decode loop, then the stepping sum (m past
    NUMPY_FROM: the pure class's numpy path too)."""
    clock = CLASSES[kind](t0)
    clock.line(fixed, kv_coef, pair_coef, kv0, n, m)
    ds = []
    for j in range(m):
        kv = kv0 + j * n
        ds.append(fixed + (kv_coef * kv + pair_coef * kv))
    assert bits(clock.durations()) == bits(ds)
    assert bits(clock.times(0, m + 1)) == bits(stepped(t0, ds))


@BUILT
@settings(max_examples=300, deadline=None)
@given(t0=starts, ds=durations, x=st.floats(min_value=-1.0, max_value=2e6), hi=st.integers(0, 80))
def test_bisect_is_bisect_left(kind, t0, ds, x, hi):
    clock = CLASSES[kind](t0)
    clock.extend(ds)
    hi = min(hi, len(ds))
    times = stepped(t0, ds)
    assert clock.bisect(x, hi) == bisect_left(times, x, 0, hi)
    if ds:  # a time itself, and its neighbours
        j = hi // 2
        assert clock.bisect(times[j], hi) == bisect_left(times, times[j], 0, hi)


@BUILT
def test_out_of_range_reads_are_refused(kind):
    clock = CLASSES[kind](1.0)
    clock.extend([0.5, 0.25])
    for bad in (lambda: clock.time(3), lambda: clock.time(-1), lambda: clock.bisect(1.0, 3),
                lambda: clock.gaps(0, 3), lambda: clock.times(0, 4)):
        with pytest.raises(IndexError):
            bad()
    assert clock.times(0, 3) == [1.0, 1.5, 1.75] and clock.time(2) == 1.75


@pytest.mark.skipif("c" not in CLASSES, reason="core/run_clock.c was not built here")
@settings(max_examples=200, deadline=None)
@given(t0=starts, ds=durations, fixed=st.floats(min_value=0.0, max_value=1.0), kv_coef=coefs,
       kv0=st.integers(0, 1 << 30), n=st.integers(1, 256), m=st.integers(0, 120))
def test_the_c_clock_is_the_reference_to_the_bit(t0, ds, fixed, kv_coef, kv0, n, m):
    clocks = [cls(t0) for cls in (PURE.RunClock, imported.RunClock)]
    for clock in clocks:
        clock.extend(ds)
        clock.line(fixed, kv_coef, kv_coef / 3, kv0, n, m)
    pure, c = clocks
    steps = len(pure)
    assert len(c) == steps
    assert bits(c.times(0, steps + 1)) == bits(pure.times(0, steps + 1))
    assert c.gaps(0, steps) == pure.gaps(0, steps)
