"""Input is read one way, whatever wrote it: a UTF-8 byte-order mark and CR-LF or
CR-only line endings read exactly as the plain LF file does (traces in CSV and JSON
lines, configs, step tables, profiles), with the same line numbers in errors; held-out
figures never come from training steps."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.cost.profile import load_profile
from batchlab.core.run_folder import read_steps
from batchlab.core.text_input import loads, normalise
from batchlab.core.workload.formats import load_trace
from batchlab.core.workload.errors import WorkloadError
from batchlab.experiments.config import read_toml
from tests.helpers import run_cli

DATA = Path(__file__).parent / "data"
BAD = DATA / "bad"
STYLES = {"bom+crlf": ("\ufeff", "\r\n"), "cr-only": ("", "\r"), "bom+cr": ("\ufeff", "\r")}


def restyle(src: Path, dst: Path, style: str) -> Path:
    bom, eol = STYLES[style]
    dst.write_bytes((bom + src.read_text().replace("\n", eol)).encode("utf-8"))
    return dst


def columns(w) -> tuple:
    return tuple(np.asarray(getattr(w, c)).tolist() for c in ("arrival", "prompt_len", "output_len"))


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", ["batchlab_example.csv", "batchlab_example.jsonl", "mooncake_100.jsonl"])
def test_traces_read_the_same_whatever_the_line_endings(name, style, tmp_path):
    plain = load_trace(DATA / name)
    other = load_trace(restyle(DATA / name, tmp_path / name, style))
    assert columns(other) == columns(plain) and len(plain) > 1


@pytest.mark.parametrize("style", STYLES)
def test_errors_name_the_same_line_whatever_the_line_endings(style, tmp_path):
    src = tmp_path / "plain.csv"
    src.write_text("# a comment\narrival_s,prompt_len,output_len\n0,10,5\n1,x,5\n")
    with pytest.raises(WorkloadError, match=r"plain.csv:4: prompt_len"):
        load_trace(src)
    with pytest.raises(WorkloadError, match=r"odd.csv:4: prompt_len"):
        load_trace(restyle(src, tmp_path / "odd.csv", style))


def test_a_crlf_cut_between_two_chunks_is_one_line_ending(tmp_path, monkeypatch):
    from batchlab.core.workload import textfile
    src = tmp_path / "t.csv"
    src.write_bytes(b"arrival_s,prompt_len,output_len\r\n" + b"".join(
        b"%d,%d,5\r\n" % (i, 10 + i) for i in range(200)))
    monkeypatch.setattr(textfile, "CHUNK_BYTES", 7)  # every chunk boundary, CR-LF cut or not
    w = load_trace(src)
    assert np.asarray(w.prompt_len).tolist() == [10 + i for i in range(200)]


@pytest.mark.parametrize("style", STYLES)
def test_configs_read_the_same_whatever_the_line_endings(style, tmp_path):
    src = tmp_path / "c.toml"
    src.write_text('[workload]\nnum_requests = 20\nrate = 3.5\n[scheduler]\npolicy = "chunked"\n')
    assert read_toml(restyle(src, tmp_path / "odd.toml", style)) == read_toml(src)


def test_a_bom_config_runs(tmp_path, capsys):
    p = tmp_path / "bom.toml"
    p.write_bytes(b"\xef\xbb\xbf[workload]\rnum_requests = 7\r")
    code, out, err = run_cli(["simulate", "--config", str(p), "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["continuous"]["completed"] == 7


@pytest.mark.parametrize("style", STYLES)
def test_step_tables_and_profiles_read_the_same(style, tmp_path):
    steps = BAD / "runs" / "once" / "p0" / "steps.csv"
    odd = read_steps(restyle(steps, tmp_path / "steps.csv", style), "here")
    plain = read_steps(steps, "here")
    assert odd.keys() == plain.keys() and all(np.array_equal(odd[k], plain[k]) for k in plain)
    prof = DATA.parent / "data" / "bad" / "profile" / "overhead_infinity.json"
    text = prof.read_text().replace("Infinity", "0.001")
    (tmp_path / "p.json").write_text(text)
    restyle(tmp_path / "p.json", tmp_path / "q.json", style)
    assert load_profile(tmp_path / "q.json") == load_profile(tmp_path / "p.json")


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.integers(), min_size=1, max_size=5), st.data())
def test_a_key_given_twice_is_refused_never_first_or_last_wins(obj, data):
    key = data.draw(st.sampled_from(sorted(obj)))
    body = json.dumps(obj)
    twice = body[:-1] + ", " + json.dumps(key) + ": 1}"
    assert loads(body) == obj
    with pytest.raises(ValueError, match="appears twice"):
        loads(twice)


@given(st.text(alphabet="ab\r\n", max_size=30))
def test_normalise_leaves_only_lf(text):
    out = normalise("\ufeff" + text)
    assert "\r" not in out and not out.startswith("\ufeff")
    assert out.count("\n") == text.count("\n") + text.count("\r") - text.count("\r\n")


def test_no_held_out_runs_report_no_held_out_error(tmp_path, capsys):
    from tests.test_calibrate_from_run import served_dir
    d = served_dir(tmp_path / "runs")
    out = tmp_path / "p.json"
    code, text, err = run_cli(["calibrate", "--from-run", str(d), "--holdout-every", "0",
                               "--out", str(out), "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(text)["judged_on"] == []
    fit = load_profile(out).fit
    assert fit.heldout.n == 0 and fit.heldout.median_ape is None  # not the training error
    assert fit.train.n > 0 and fit.train.median_ape is not None
    assert all(r.n == 0 for r in fit.regions.values())


def test_a_run_given_twice_is_refused(tmp_path, capsys):
    from tests.test_calibrate_from_run import served_dir
    d = served_dir(tmp_path / "runs")
    shutil.copytree(d, tmp_path / "again")
    code, _, err = run_cli(["calibrate", "--from-run", str(d), str(tmp_path / "again"),
                            "--out", str(tmp_path / "p.json")], capsys)
    assert code == 2 and "the same run as" in err and not (tmp_path / "p.json").exists()


def test_the_newer_readers_read_one_way_too(tmp_path):
    """GPU profiles, model configs, request-timing records and operator tables: a BOM and CR
    line endings read as the plain file; a key or a column given twice is refused, named."""
    from batchlab.calibration.from_replay.read import read_one
    from batchlab.calibration.operators.tables import OperatorTableError, read_rows
    from batchlab.core.cost.gpu_profile import load_gpu_profile, shipped_gpu_dir
    from batchlab.core.model.config_json import read_config_file
    from batchlab.core.model.presets import PRESET_CONFIGS

    text = (shipped_gpu_dir() / "a100-80gb.json").read_text()
    (tmp_path / "g.json").write_text("\ufeff" + text.replace("\n", "\r\n"), newline="")
    assert load_gpu_profile(tmp_path / "g.json") == load_gpu_profile("a100-80gb")
    (tmp_path / "dup.json").write_text(text.replace('"format":', '"gpu": "x", "format":', 1))
    with pytest.raises(ValueError, match="key 'gpu' appears twice"):
        load_gpu_profile(tmp_path / "dup.json")

    cfg = (PRESET_CONFIGS / "batchlab-tiny-moe.json").read_text()
    (tmp_path / "c.json").write_text("\ufeff" + cfg.replace("\n", "\r"), newline="")
    assert read_config_file(tmp_path / "c.json")[0] == json.loads(cfg)
    (tmp_path / "c2.json").write_text(cfg.replace("{", '{"hidden_size": 1, ', 1))
    with pytest.raises(ValueError, match="hidden_size"):
        read_config_file(tmp_path / "c2.json")

    rec = {"model_id": "m", "input_lens": [10], "output_lens": [5], "ttfts": [0.1], "itls": [[0.01] * 4],
           "start_times": [0.0], "errors": [""]}
    (tmp_path / "r.json").write_text(json.dumps(rec).replace('{"model_id": "m"', '{"model_id": "m", "model_id": "n"'))
    with pytest.raises(ValueError, match=r"r\.json: key 'model_id' appears twice"):
        read_one(tmp_path / "r.json")

    (tmp_path / "t.csv").write_text("num_tokens,a,num_tokens\n1,2,3\n")
    with pytest.raises(OperatorTableError, match=r"t\.csv.*column 'num_tokens' appears twice"):
        read_rows(tmp_path / "t.csv", ("num_tokens",), "table")
    (tmp_path / "u.csv").write_text("\ufeffnum_tokens,a\r\n1,2\r\n", newline="")
    assert read_rows(tmp_path / "u.csv", ("num_tokens",), "table") == [(2, {"num_tokens": "1", "a": "2"})]
