"""Bad input: each file in tests/data/broken gives one line naming the file, the line
and what was expected (a WorkloadError, which is a ValueError), never a traceback.
Timestamps that go backwards are sorted, with a warning."""
from __future__ import annotations

import logging
from datetime import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.workload import WorkloadConfig, WorkloadError, build_workload, load_trace, parse
from tests.bad_cases import BROKEN, CORPUS


def test_every_broken_file_is_covered():
    listed = {name for name, _, _ in CORPUS} | {"backwards.csv"}
    assert listed == {p.name for p in BROKEN.iterdir()}


@pytest.mark.parametrize("name, line, says", CORPUS, ids=[c[0] for c in CORPUS])
def test_broken_file_gives_one_line_naming_file_and_line(name, line, says):
    path = BROKEN / name
    with pytest.raises(WorkloadError) as info:
        load_trace(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}:{line}: ")
    assert says in msg
    assert (info.value.path, info.value.line) == (path, line)
    assert isinstance(info.value, ValueError)  # what the CLI turns into exit code 2


def test_backwards_timestamps_are_sorted_with_a_warning(caplog):
    path = BROKEN / "backwards.csv"
    with caplog.at_level(logging.WARNING, logger="batchlab.workload"):
        w = load_trace(path)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}:4: timestamp goes backwards (1 place(s) in the file); sorted the requests "
        f"by arrival"]
    assert len(w) == 4 and np.all(np.diff(w.arrival) >= 0)  # nothing dropped
    assert w.prompt_len.tolist() == [374, 200, 396, 100]  # the row of line 4 moved up
    assert w.arrival[0] == 0.0


def test_backwards_ties_keep_file_order(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_len,output_len\n5,1,1\n1,2,1\n1,3,1\n0,4,1\n")
    assert load_trace(f).prompt_len.tolist() == [4, 2, 3, 1]


@pytest.mark.parametrize("problem", ["no such file", "is a directory"])
def test_unreadable_paths(tmp_path, problem):
    path = tmp_path / "nothing.csv" if problem == "no such file" else tmp_path
    with pytest.raises(WorkloadError, match=f"^{path}: {problem}; expected a trace file$"):
        load_trace(path)


@pytest.mark.parametrize("fields, says", [
    (dict(source="chta"), "workload source 'chta': no such file; expected a trace file, a "
                          "preset (chat, multiturn, uniform, sharegpt, arxiv)"),
    (dict(source=str(BROKEN / "zero_output.csv")), "zero_output.csv:3: output_len is '0'"),
    (dict(source=str(BROKEN.parent / "azure_conv_300.csv"), burstiness=2),
     "burstiness applies to generated arrivals"),
    (dict(source=str(BROKEN.parent / "azure_conv_300.csv"), prompt={"dist": "fixed", "value": 4}),
     "prompt applies to synthetic presets"),
    (dict(source=str(BROKEN.parent / "azure_conv_300.csv"), window_start_s=1e6),
     "no requests in the window [1e+06, inf) s; expected a window within its arrivals, 0 to"),
    (dict(source=str(BROKEN.parent / "azure_conv_300.csv"), rate=5, num_requests=1),
     "cannot set the mean rate to 5 req/s: the workload has 1 request(s)"),
])
def test_build_errors_are_one_line_value_errors(fields, says):
    with pytest.raises(ValueError) as info:
        build_workload(WorkloadConfig(**fields))
    assert says in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("fields, says", [
    (dict(trace_format="parquet"), "trace_format must be one of auto, azure"),
    (dict(length_file="x.csv", prompt={"dist": "fixed", "value": 4}), "not both"),
    (dict(window_duration_s=0), "expected a finite time in seconds > 0"),
    (dict(length_scale=-1), "expected a finite number > 0"),
    (dict(max_prompt_len=0), "expected a whole number of tokens from 1"),
    (dict(colour="red"), "Extra inputs are not permitted"),
    (dict(seed=-1), "seed\n  Value error, expected a whole number from 0 to 2**63-1"),
    (dict(think_time_s=2), "think_time_s (2 s, --think-time) applies to a closed loop only"),
])
def test_config_rejects_bad_fields(fields, says):
    with pytest.raises(ValueError, match=".") as info:
        WorkloadConfig(**fields)
    assert says in str(info.value)


NUMBERS = st.builds(lambda sign, whole, frac, exp: f"{sign}{whole}{frac}{exp}",
                    st.sampled_from(["", "+", "-"]), st.integers(0, 10**12).map(str),
                    st.sampled_from(["", ".", ".5", ".25"]),
                    st.sampled_from(["", "e5", "e-5", "E+12", "e-05"]))


@settings(max_examples=200, deadline=None)
@given(NUMBERS, st.integers(0, 3))
def test_a_bare_number_is_never_read_as_a_date_time(number, row):
    """Whatever its sign, digits, fraction or exponent, a number in a date-time column is
    refused with the bare-number hint, on its own line, among real date-times."""
    values = ["2023-11-16 18:15:46.6805900"] * 4
    values[row] = number
    with pytest.raises(WorkloadError, match=f"t.csv:{row + 2}: TIMESTAMP is .*a bare number"):
        parse.datetimes(values, [2, 3, 4, 5], "t.csv", "TIMESTAMP")


@given(st.datetimes(min_value=datetime(1700, 1, 1), max_value=datetime(2200, 1, 1)))
def test_an_iso_date_time_is_read_to_the_microsecond(when):
    got = parse.datetimes([when.isoformat(sep=" ")], [2], "t.csv", "TIMESTAMP")
    assert got[0] == np.datetime64(when.isoformat(), "ns")
