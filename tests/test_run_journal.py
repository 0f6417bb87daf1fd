"""The request journal `batchlab serve` appends as requests end (core/run_journal.py):
whatever prefix of it a kill or a crash leaves reads back as exactly the rows written
whole before the cut, a torn last line dropped and said; and serve refuses an --out an
earlier run used, naming what is there and the way forward (experiments/serve_journal.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from batchlab.core.metrics import MetricsRecorder
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.run_journal import JOURNAL, RowJournal, read_journal
from batchlab.experiments.errors import UserError
from batchlab.experiments.serve_journal import ServeJournal, refuse_used_out

REASONS = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def seq(i: int, status: Status, reason: str = "", output_len: int = 3) -> Sequence:
    s = Sequence(Request(id=i, arrival=0.25 * i, prompt_len=4 + i, output_len=output_len))
    s.status, s.reject_reason = status, reason
    if status is Status.FINISHED:
        s.first_scheduled, s.first_token, s.finish = 0.25 * i + 0.01, 0.25 * i + 0.02, 0.25 * i + 0.5
    return s


@st.composite
def batches(draw):
    n = draw(st.integers(1, 6))
    out, i = [], 0
    for _ in range(n):
        k = draw(st.integers(1, 4))
        out.append([seq(i + j, draw(st.sampled_from([Status.FINISHED, Status.ABORTED, Status.FAILED])),
                        draw(REASONS)) for j in range(k)])
        i += k
    return out


@settings(max_examples=60, deadline=None)
@given(batches(), st.floats(0, 1))
def test_any_cut_reads_back_the_whole_rows_before_it(tmp_path_factory, groups, where):
    path = tmp_path_factory.mktemp("j") / JOURNAL
    j = RowJournal(path)
    head = path.stat().st_size  # the header line
    ends = []  # the file's size after each row
    for group in groups:
        for s in group:
            j.append([s])
            ends.append(path.stat().st_size)
    j.close()
    data = path.read_bytes()
    cut = head + round(where * (len(data) - head))
    path.write_bytes(data[:cut])
    got = read_journal(path)
    whole = sum(e <= cut for e in ends)
    assert [int(r["request_id"]) for r in got.rows] == list(range(whole))
    assert got.torn == (cut not in [head, *ends])
    every = [s for g in groups for s in g][:whole]
    assert [r["status"] for r in got.rows] == [s.status._value_ for s in every]
    assert [r["reject_reason"] for r in got.rows] == [s.reject_reason for s in every]


def test_rows_are_the_recorders_rows(tmp_path):
    seqs = [seq(0, Status.FINISHED, "a\rb"), seq(1, Status.ABORTED, 'the client left, "x"\n'),
            seq(2, Status.FINISHED)]
    j = RowJournal(tmp_path / JOURNAL)
    j.append(seqs[:2])
    j.append(seqs[2:])
    rec = MetricsRecorder()
    rec.record_requests(seqs, 0)
    table = rec.request_table()
    rows = read_journal(tmp_path / JOURNAL).rows
    for c, col in table.items():
        for row, want in zip(rows, col.tolist()):
            got = row[c]
            if isinstance(want, float):
                assert (got == "" and want != want) or float(got) == want, (c, got, want)
            else:
                assert got == str(want), (c, got, want)


def test_a_journal_in_the_middle_that_is_broken_is_an_error_naming_the_line(tmp_path):
    j = RowJournal(tmp_path / JOURNAL)
    j.append([seq(0, Status.FINISHED), seq(1, Status.FINISHED)])
    j.close()
    lines = (tmp_path / JOURNAL).read_text().splitlines(keepends=True)
    (tmp_path / JOURNAL).write_text(lines[0] + "1,2\n" + lines[2])
    with pytest.raises(ValueError, match=f"{JOURNAL}: line 2 has 2 fields; expected 13"):
        read_journal(tmp_path / JOURNAL)


def test_serve_refuses_a_used_out_and_says_the_way_forward(tmp_path):
    refuse_used_out(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    refuse_used_out(tmp_path / "empty")
    killed = tmp_path / "killed"
    journal = ServeJournal(killed / "continuous")
    journal.append([seq(0, Status.FINISHED), seq(1, Status.ABORTED), seq(2, Status.FINISHED)])
    with open(journal.path, "a") as f:
        f.write("3,0,0.75,7")  # a torn last line
    with pytest.raises(UserError) as e:
        refuse_used_out(killed)
    msg = str(e.value)
    assert "left 3 request rows (2 finished)" in msg and "torn last line was dropped" in msg
    assert "new --out" in msg and "\n" not in msg
    journal.close()  # a clean stop removes it
    assert not journal.path.exists()
    (killed / "meta.json").write_text("{}")
    with pytest.raises(UserError, match="holds an earlier run's results .*meta.json.*new --out"):
        refuse_used_out(killed)


def test_a_full_disk_stops_the_journal_not_the_server(tmp_path, monkeypatch):
    journal = ServeJournal(tmp_path / "continuous")
    journal.append([seq(0, Status.FINISHED)])

    def full(*_):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("batchlab.core.run_journal.os.write", full)
    journal.append([seq(1, Status.FINISHED)])  # said once, not raised
    journal.append([seq(2, Status.FINISHED)])
    monkeypatch.undo()
    assert [r["request_id"] for r in read_journal(journal.path).rows] == ["0"]
    journal.close()
    assert not journal.path.exists()
