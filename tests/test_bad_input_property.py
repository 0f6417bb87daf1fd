"""Property: any number (finite, inf, nan, huge, tiny, negative, a boolean) in a config
field or a trace field gives either a one-line error (exit 2) or a run whose every
output value is finite and consistent; never a traceback, never a summary of nulls."""
from __future__ import annotations

import contextlib
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from batchlab.experiments.cli import main

NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-2**70, max_value=2**70),
    st.sampled_from([0, 1, -1, 0.5, 2.0, 1e-320, 1e-300, 1e-6, 1e8, 1e9, 1e20, 1e300,
                     2**53, 2**63 - 1, 2**63, float("inf"), float("nan")]),
    st.booleans(),
    st.floats(min_value=1e-3, max_value=100.0),  # plausible settings: many runs, not only errors
    st.integers(min_value=1, max_value=5000),
)
# Fields whose large valid values stay cheap: no per-item allocation, or a capped pool.
CONFIG_FIELDS = [
    ("workload", "rate"), ("workload", "burstiness"), ("workload", "jitter_s"),
    ("workload", "window_start_s"), ("workload", "window_duration_s"), ("workload", "rate_scale"),
    ("workload", "length_scale"), ("workload", "seed"), ("workload", "max_prompt_len"),
    ("workload", "max_output_len"), ("scheduler", "max_num_seqs"),
    ("scheduler", "max_num_batched_tokens"), ("scheduler", "block_size"),
    ("scheduler", "max_model_len"), ("hardware", "mem_efficiency"),
    ("hardware", "compute_efficiency"), ("hardware", "step_overhead_s"),
    ("hardware", "gpu_memory_utilization"), ("hardware", "tensor_parallel"),
    ("hardware", "allreduce_latency_s"), ("slo", "ttft_ms"), ("slo", "e2el_ms"),
]
N = 30
# A statistic over an empty set is NaN (null) by design: TPOT and ITL when every reply
# is one token, and every latency and rate when no request finished.
EMPTY_OK = ("tpot", "itl")


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf
                                              else repr(v))
    return str(v)


def _simulate(argv: list[str], capsys) -> tuple[int, dict | None]:
    code = main(["simulate", "--format", "json", *argv])
    out, err = capsys.readouterr()
    with contextlib.suppress(InvalidArgument):  # outside a hypothesis test: no statistics
        event(f"exit {code}")
    assert code in (0, 2), err
    if code == 2:
        errors = [ln for ln in err.splitlines() if ln.startswith("batchlab: error:")]
        assert len(errors) == 1 and "Traceback" not in err, err
        return code, None
    return code, json.loads(out)


def _check_figures(s: dict, where: str) -> None:
    """Every figure finite; null only for a statistic over an empty set of this dict's
    (the run's, or one class's) requests. Breakdowns are checked the same way."""
    for key, value in s.items():
        if isinstance(value, dict):
            _check_figures(value, f"{where}.{key}")
        elif isinstance(value, str):
            continue  # the stability verdict
        elif value is None:
            assert s.get("completed") == 0 or any(k in key for k in EMPTY_OK), (where, key, s)
        else:
            assert math.isfinite(value), (where, key, value)


def _check_summary(summary: dict, n: int) -> None:
    for policy, s in summary.items():
        assert s["completed"] + s["rejected"] + s["unfinished"] == n, (policy, s)
        _check_figures(s, policy)
        if s["completed"]:
            assert 0 <= s["mean_ttft_ms"] <= s["mean_e2el_ms"] * (1 + 1e-9), s
            assert s["duration"] > 0 and s["request_throughput"] > 0, s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(CONFIG_FIELDS), value=NUMBERS)
def test_a_number_in_a_config_field_is_an_error_or_a_finite_run(field, value, capsys):
    table, name = field
    tables = {"workload": {"source": "chat", "num_requests": N, "rate": 20.0},
              "scheduler": {"num_kv_blocks": 4000}, "hardware": {}, "slo": {}}
    tables[table][name] = value
    if name == "max_batch_delay_s":
        tables["scheduler"]["policy"] = "static"
    text = ""
    for t in ("workload", "scheduler", "hardware"):
        text += f"[{t}]\n" + "".join(f"{k} = {_toml_value(v) if not isinstance(v, str) else json.dumps(v)}\n"
                                     for k, v in tables[t].items())
    text += '[run]\npolicies = ["continuous", "chunked"]\n'
    if tables["slo"]:
        text += "[run.slo]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in tables["slo"].items())
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.toml"
        path.write_text(text)
        code, summary = _simulate(["--config", str(path)], capsys)
    if code == 0:
        n = summary["continuous"]["completed"] + summary["continuous"]["rejected"] + \
            summary["continuous"]["unfinished"]
        assert n <= N
        _check_summary(summary, n)


TRACE_FIELDS = {"mooncake": ("timestamp", "input_length", "output_length", "hash_ids"),
                "batchlab": ("arrival_s", "prompt_len", "output_len", "priority")}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(TRACE_FIELDS)), data=st.data(), value=NUMBERS,
       row=st.integers(0, 9))
def test_a_number_in_a_trace_field_is_an_error_or_a_finite_run(kind, data, value, row, capsys):
    field = data.draw(st.sampled_from(TRACE_FIELDS[kind]))
    t, p, o = TRACE_FIELDS[kind][:3]
    rows = [{t: i * (200 if kind == "mooncake" else 0.2), p: 50 + i, o: 20 + i} for i in range(10)]
    if kind == "mooncake":
        for r in rows:
            r["hash_ids"] = [1, 2]
    rows[row][field] = [value] if field == "hash_ids" else value
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"t.{'jsonl'}"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # NaN, Infinity as Python writes
        code, summary = _simulate(["--workload", str(path), "--policy", "continuous"], capsys)
    if code == 0:
        _check_summary(summary, 10)


@pytest.mark.parametrize("value", [True, "20", float("nan"), float("inf"), 10**30])
def test_the_same_numbers_are_refused_in_every_count_field(value, capsys):
    """A smoke check of the property's premise: the refusals are not luck of the draw."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.toml"
        path.write_text(f"[scheduler]\nmax_num_seqs = {json.dumps(value) if isinstance(value, str) else _toml_value(value)}\n")
        code, _ = _simulate(["--config", str(path)], capsys)
    assert code == 2
