"""Trace loaders on the committed excerpts: detection, values, the batchlab format."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batchlab.core.workload import WorkloadError, detect_format, load_trace, write_trace

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name, fmt, kind", [
    ("azure_conv_300.csv", "azure", "csv"),
    ("azure_code_300.csv", "azure", "csv"),
    ("mooncake_100.jsonl", "mooncake", "jsonl"),
    ("sharegpt_lengths_300.csv", "lengths", "csv"),
    ("batchlab_example.csv", "batchlab", "csv"),
    ("batchlab_example.jsonl", "batchlab", "jsonl"),
])
def test_format_is_detected_from_the_content(name, fmt, kind):
    f = detect_format(DATA / name)
    assert (f.name, f.kind) == (fmt, kind)
    assert detect_format(DATA / name, fmt) == f  # naming it gives the same


def test_azure_arrivals_are_seconds_since_the_first_row():
    w = load_trace(DATA / "azure_conv_300.csv")
    assert len(w) == 300
    # 2023-11-16 18:15:46.6805900 -> 18:15:50.9951690, lengths from the first two rows
    assert w.arrival[0] == 0.0
    assert w.arrival[1] == pytest.approx(4.314579, abs=1e-9)
    assert w.prompt_len[:2].tolist() == [374, 396]
    assert w.output_len[:2].tolist() == [44, 109]
    assert w.priority is None and w.prefix_hashes is None
    assert "azure trace" in w.describe() and "300 requests" in w.describe()


def test_mooncake_keeps_hash_ids_as_prefix_hashes():
    w = load_trace(DATA / "mooncake_100.jsonl")
    assert len(w) == 100
    assert w.arrival[:3].tolist() == [0.0, 0.0, 0.04]  # ms -> s
    assert w.prompt_len[0] == 40160 and w.output_len[0] == 6
    assert w.prefix_hashes[0] == tuple(range(79))  # ceil(40160 / 512) blocks
    r = w.request(0)
    assert r.prefix_hashes == tuple(range(79))
    # a 512-token block per hash: every list covers its prompt
    assert all(len(h) == -(-p // 512) for h, p in zip(w.prefix_hashes, w.prompt_len.tolist()))


def test_length_file_has_no_timestamps():
    w = load_trace(DATA / "sharegpt_lengths_300.csv")
    assert len(w) == 300 and not w.arrival.any()
    assert w.prompt_len[:2].tolist() == [74, 290] and w.output_len[:2].tolist() == [918, 905]
    assert "length file" in w.describe()


def test_batchlab_csv_and_jsonl_read_the_same():
    a, b = load_trace(DATA / "batchlab_example.csv"), load_trace(DATA / "batchlab_example.jsonl")
    for col in ("arrival", "prompt_len", "output_len", "priority"):
        assert np.array_equal(getattr(a, col), getattr(b, col))
    assert a.prefix_hashes == b.prefix_hashes == [(1, 2, 3, 4), (1, 2, 5), (), tuple(range(9, 17))]
    assert a.priority.tolist() == [0, 1, 0, -1]  # the JSON line without priority reads 0


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize("source", ["mooncake_100.jsonl", "batchlab_example.csv",
                                    "azure_code_300.csv", "sharegpt_lengths_300.csv"])
def test_every_loader_writes_the_batchlab_format_losslessly(tmp_path, source, suffix):
    w = load_trace(DATA / source)
    out = tmp_path / f"converted{suffix}"
    write_trace(w, out)
    back = load_trace(out)
    assert detect_format(out).name == "batchlab"
    assert back.arrival.tolist() == w.arrival.tolist()  # floats round-trip exactly
    assert np.array_equal(back.prompt_len, w.prompt_len)
    assert np.array_equal(back.output_len, w.output_len)
    assert (back.priority is None) == (w.priority is None)
    assert back.prefix_hashes == w.prefix_hashes


def test_csv_output_records_how_the_workload_was_made(tmp_path):
    w = load_trace(DATA / "azure_conv_300.csv")
    write_trace(w, tmp_path / "t.csv")
    head = (tmp_path / "t.csv").read_text().splitlines()[:3]
    assert head[0] == "# batchlab trace"
    assert head[1].startswith("# azure trace") and head[2] == "arrival_s,prompt_len,output_len"


def test_write_needs_a_known_suffix(tmp_path):
    w = load_trace(DATA / "batchlab_example.csv")
    with pytest.raises(WorkloadError, match=r"t\.txt: .*expected a name ending in \.csv or \.jsonl"):
        write_trace(w, tmp_path / "t.txt")
    write_trace(w, tmp_path / "t.txt", kind="jsonl")
    assert detect_format(tmp_path / "t.txt").kind == "jsonl"


def test_explicit_format_that_does_not_match_the_file():
    with pytest.raises(WorkloadError, match=r"mooncake_100\.jsonl:2: a JSON line; expected azure"):
        load_trace(DATA / "mooncake_100.jsonl", "azure")
    with pytest.raises(WorkloadError, match=r"unknown trace format 'parquet'"):
        load_trace(DATA / "mooncake_100.jsonl", "parquet")


def test_explicit_format_reports_the_missing_column(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_len,output_len\n0,1,1\n")
    with pytest.raises(WorkloadError, match=r"t\.csv:1: missing column 'TIMESTAMP'"):
        load_trace(f, "azure")


def test_extra_columns_and_comments_and_blank_lines_are_fine(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("\ufeff# a log\n\n prompt_len , arrival_s,output_len,user\n5,0.5,3,alice\n"
                 "\n# pause\n7,1.5,2,bob\n")
    w = load_trace(f)
    assert w.arrival.tolist() == [0.5, 1.5] and w.prompt_len.tolist() == [5, 7]


def test_whole_number_floats_are_token_counts(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"arrival_s": 0, "prompt_len": 12.0, "output_len": 3}\n')
    assert load_trace(f).prompt_len.tolist() == [12]


def test_large_files_are_read_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr("batchlab.core.workload.textfile.CHUNK_BYTES", 64)  # many tiny chunks
    w = load_trace(DATA / "azure_conv_300.csv")
    monkeypatch.undo()
    assert np.array_equal(w.arrival, load_trace(DATA / "azure_conv_300.csv").arrival)
    monkeypatch.setattr("batchlab.core.workload.textfile.CHUNK_BYTES", 64)
    with pytest.raises(WorkloadError, match=r"zero_output\.csv:3:"):
        load_trace(DATA / "broken" / "zero_output.csv")
