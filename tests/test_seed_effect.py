"""Repeated seeds are honest: seeds that change nothing on a trace are refused (capacity,
simulate, sweep) with what would vary something; the output says what the seed moves;
a paired difference of zero width is never decided."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchlab.core.workload import WorkloadConfig
from batchlab.experiments.cli import main
from batchlab.experiments.errors import UserError
from batchlab.experiments.repeats import decided, paired
from batchlab.experiments.seed_effect import check_seeds_vary, seed_effect

TRACE = ["--workload", "azure_conv", "--num-requests", "150"]


@pytest.fixture(autouse=True)
def traces(monkeypatch):
    monkeypatch.setenv("BATCHLAB_TRACES", "/work/shared/traces")


def test_what_a_seed_moves():
    assert seed_effect(WorkloadConfig(source="chat", num_requests=50, rate=5.0)) == "arrivals and lengths"
    assert seed_effect(WorkloadConfig(source="azure_conv", num_requests=50)) == ""
    jit = WorkloadConfig(source="azure_conv", num_requests=50, jitter_s=0.5)
    assert seed_effect(jit) == "arrival jitter (+-0.5 s)"  # reordered, not new lengths
    assert check_seeds_vary(jit, 1) == ""
    with pytest.raises(UserError, match="--windows W"):
        check_seeds_vary(WorkloadConfig(source="azure_conv", num_requests=50), 3, "--windows W")


@pytest.mark.parametrize("cmd", [["capacity", "max-rate", "--slo-ttft-ms", "1000"], ["simulate"]])
def test_seeds_on_a_bare_trace_are_refused(cmd, capsys):
    assert main([*cmd, *TRACE, "--seeds", "3"]) == 2
    err = capsys.readouterr().err
    assert "--seeds 3 on azure_conv: every seed gives the same requests" in err and "--jitter S" in err
    assert err.count("\n") == 1


def test_seeds_with_jitter_say_what_they_move(capsys):
    assert main(["simulate", *TRACE, "--seeds", "2", "--jitter", "0.5", "--policy", "continuous",
                 "--policy", "chunked"]) == 0
    assert "2 seeds (0..1; the seed moves arrival jitter (+-0.5 s)" in capsys.readouterr().out


def test_a_sweep_with_seeds_on_a_bare_trace_is_refused(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text('[workload]\nsource = "azure_conv"\nnum_requests = 50\n[grid]\npolicy = ["chunked"]\n'
                    '[sweep]\nseeds = 2\n')
    assert main(["sweep", "--config", str(grid), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "[sweep] seeds = 2 on azure_conv" in err and "[workload] jitter_s = S" in err


@given(st.floats(-100, 100), st.integers(2, 6))
def test_a_zero_width_difference_is_never_decided(d, n):
    runs = [{"x": 1.0 + d} for _ in range(n)]
    base = [{"x": 1.0} for _ in range(n)]
    assert paired(runs, base)["x"]["decided"] is False


def test_decided_excludes_zero_only_with_width():
    assert decided(0.1, 0.3) and decided(-0.3, -0.1)
    assert not decided(-0.1, 0.3) and not decided(0.2, 0.2) and not decided(math.nan, 1.0)
