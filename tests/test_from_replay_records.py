"""calibrate --from-replay on records that are broken, impossible or ambiguous: what a server's
/metrics states is range-checked as the same option is; impossible timings (a first token
after the last, more gaps than tokens, booleans for numbers) are refused; the same requests
are never both fitted and judged; vLLM's --append-result and older (no start_times) files
are read as vLLM's, and what cannot be told apart is refused (issue 46 items 1-2, 47 item 7)."""
from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.from_replay import read as read_module
from batchlab.calibration.from_replay.observed import Builder, check_usable
from batchlab.calibration.from_replay.read import read_all, read_one
from batchlab.calibration.from_replay.settings import parse_metrics, resolve
from tests.serve_helpers import batchlab
from tests.test_from_replay import vllm_result

CACHE_INFO = ('vllm:cache_config_info{{block_size="{bs}",enable_prefix_caching="False",'
              'num_gpu_blocks="{blocks}"}} 1.0\n')


def one_line_exit_2(r) -> str:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


@pytest.mark.parametrize("bs, blocks, field", [("0", "4096", "block_size"), ("16", "0", "num_gpu_blocks"),
                                               ("99999999", "4096", "block_size"), ("16", "-3", "num_gpu_blocks")])
def test_metrics_settings_out_of_bounds_name_the_label(bs, blocks, field):
    with pytest.raises(ValueError, match=f"vllm:cache_config_info label {field}=") as e:
        parse_metrics(CACHE_INFO.format(bs=bs, blocks=blocks), "http://x/metrics")
    assert "http://x/metrics" in str(e.value) and "\n" not in str(e.value)


def test_given_and_scraped_settings_share_the_bounds():
    with pytest.raises(ValueError, match="--block-size 0"):
        resolve({"block_size": 0}, {}, 100, 16)
    with pytest.raises(ValueError, match="server /metrics: block_size 0"):
        resolve({}, {"block_size": 0}, 100, 16)  # before the pool is re-cut (it divided by it)
    s = resolve({}, {"block_size": 32}, 100, 16)
    assert s.block_size.value == 32 and s.num_kv_blocks.value == 50


class _Metrics(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_server():
    """A /metrics on 127.0.0.1 stating block_size="0", stopped after the test."""
    _Metrics.body = CACHE_INFO.format(bs="0", blocks="4096").encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_cli_block_size_zero_on_metrics_is_one_line(tmp_path, metrics_server):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(vllm_result()))
    err = one_line_exit_2(batchlab("calibrate", "--from-replay", str(p), "--metrics", metrics_server,
                                   timeout=120))
    assert "block_size=" in err and "/metrics" in err and "ZeroDivision" not in err


def test_the_same_file_twice_is_never_fitted_and_judged(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(vllm_result()))
    with pytest.raises(ValueError, match="given twice"):
        read_all([str(p), str(tmp_path / "." / "r.json")])
    copy = tmp_path / "copy.json"
    shutil.copy(p, copy)
    with pytest.raises(ValueError, match="30 of its 30 requests are the same requests as"):
        read_all([str(p), str(copy)])
    appended = tmp_path / "twice.json"
    appended.write_text(p.read_text() + "\n" + p.read_text())  # one run appended twice
    with pytest.raises(ValueError, match="line 2: 30 of its 30 requests are the same requests as .* line 1"):
        read_all([str(appended)])
    other = tmp_path / "other.json"
    other.write_text(json.dumps(vllm_result(seed=1)))
    assert len(read_all([str(p), str(other)])) == 2
    part = vllm_result()  # the first 20 of the same run, cut out into a file of its own
    part = {k: v[:20] if isinstance(v, list) else v for k, v in part.items()}
    (tmp_path / "part.json").write_text(json.dumps(part))
    with pytest.raises(ValueError, match="20 of its 20 requests are the same"):
        read_all([str(p), str(tmp_path / "part.json")])


def test_a_replay_folder_and_its_own_result_json_are_one_run(tmp_path):
    from tests.test_from_replay import _replay_folder
    d = tmp_path / "rep"
    _replay_folder(d, True)
    (d / "copy").mkdir()
    shutil.copy(d / "result.json", d / "copy" / "r.json")  # read_all refuses one path twice, not this
    with pytest.raises(ValueError, match="20 of its 20 requests are the same requests as"):
        read_all([str(d), str(d / "copy" / "r.json")])


def test_cli_same_file_as_fit_and_judge_is_refused(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(vllm_result()))
    err = one_line_exit_2(batchlab("calibrate", "--from-replay", str(p), str(p), "--num-kv-blocks", "2000",
                                   timeout=120))
    assert "given twice" in err


@pytest.mark.parametrize("field, index", [("output_lens", 3), ("input_lens", 0), ("ttfts", 7), ("start_times", 2)])
def test_a_boolean_is_not_a_number(tmp_path, field, index):
    d = vllm_result()
    d[field][index] = True
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    names = {"output_lens": "output_len", "input_lens": "input_len", "ttfts": "ttft", "start_times": "start_time"}
    with pytest.raises(ValueError, match=f"request {index}: {names[field]} is True"):
        read_one(p)
    d[field][index] = 1 if "lens" in field else 0.5
    p.write_text(json.dumps(d))
    read_one(p)  # the same record with a number there is read


def test_more_gaps_than_tokens_is_refused(tmp_path):
    d = vllm_result()
    d["itls"] = [[0.01] * (3 * o) for o in d["output_lens"]]  # three gaps a token
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="30 of 30 requests cannot have happened .*more inter-token gaps"):
        read_all([str(p)])
    d = vllm_result()
    d["itls"][5] = [0.01] * 3 * d["output_lens"][5]  # a single such request is as impossible
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="1 of 30 requests cannot have happened"):
        read_all([str(p)])
    d["itls"][5] = [0.01] * d["output_lens"][5]  # one gap a token (a last, empty chunk): possible
    p.write_text(json.dumps(d))
    assert len(read_all([str(p)])[0].requests) == 30


def test_first_token_after_the_latency_is_refused():
    b = Builder("rec", "test")
    for i in range(25):
        b.add(float(i), 10, 5, 0.05, 0.2)
    b.add(30.0, 10, 5, 0.5, 0.2)  # first token 0.5 s, done 0.2 s after the send
    r = b.done(None)
    assert len(r.requests) == 25 and r.impossible == 1
    with pytest.raises(ValueError, match="time to first token longer than the latency"):
        check_usable([r])


def test_append_result_file_reads_each_run(tmp_path):
    """vllm bench serve --append-result: a newline, then the next run's json.dump (vLLM's
    vllm/benchmarks/serve.py); no newline at the end."""
    p = tmp_path / "runs.json"
    p.write_text(json.dumps(vllm_result(seed=0)) + "\n" + json.dumps(vllm_result(seed=1)))
    a, b = read_one(p)
    assert (a.where, b.where) == (f"{p} line 1", f"{p} line 2")
    assert a.fmt == b.fmt == "vllm-bench" and len(a.requests) == len(b.requests) == 30
    p.write_text(json.dumps(vllm_result(seed=0)) + "\n" + "{broken")
    with pytest.raises(ValueError, match="line 2: not JSON"):
        read_one(p)


def _old_vllm(rate, conc=None) -> dict:
    """vLLM's benchmark_serving.py result before start_times (its date, model_id, ...)."""
    d = vllm_result(request_rate=rate, burstiness=1.0, max_concurrency=conc, date="20250101-000000",
                    tokenizer_id="batchlab-tiny", num_prompts=30)
    del d["start_times"]
    return d


def test_older_vllm_without_start_times_is_vllm_not_sglang(tmp_path):
    p = tmp_path / "old.json"
    p.write_text(json.dumps(_old_vllm("inf", 2)))
    (r,) = read_one(p)
    assert r.fmt.startswith("vllm-bench") and "rebuilt" in r.fmt and r.model == "batchlab-tiny"
    sends = sorted(q.send_s for q in r.requests)
    assert sends[:2] == [0.0, 0.0] and sends[2] > 0  # two slots: the third waits for one to free
    p.write_text(json.dumps(_old_vllm(4.0)))
    with pytest.raises(ValueError, match="request_rate 4.0 without start_times: vLLM's benchmark_serving.py"):
        read_one(p)


def test_what_cannot_be_told_apart_is_refused(tmp_path):
    d = vllm_result()
    for k in ("model_id", "start_times"):
        del d[k]
    d["request_rate"] = "inf"
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(d) + "\n")
    with pytest.raises(ValueError, match="cannot tell whether vllm bench serve or SGLang"):
        read_one(p)
    d["dataset_name"], d["model_id"] = "random", "x"  # both benchmarks' fields
    p.write_text(json.dumps(d) + "\n")
    with pytest.raises(ValueError, match="both vLLM's model_id and SGLang's dataset_name"):
        read_one(p)


def test_a_long_read_says_so_on_stderr(tmp_path, monkeypatch, capsys):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(vllm_result()))
    read_one(p)
    assert "reading" not in capsys.readouterr().err  # short, and stderr not a terminal
    monkeypatch.setattr(read_module, "LONG_READ_BYTES", 10)
    read_one(p)
    assert f"reading {p}" in capsys.readouterr().err


def test_a_long_fit_reports_its_simulations(capsys):
    from batchlab.experiments.calibrate.from_replay import EVERY, LONG_FIT, fit_progress
    for n, lines in ((LONG_FIT, 2), (LONG_FIT - 1, 0)):
        with fit_progress(n) as tick:
            for _ in range(2 * EVERY + 1):
                tick()
        err = capsys.readouterr().err
        assert err.count("simulations of") == lines, err


@pytest.mark.parametrize("column, value", [("prompt_len", "inf"), ("output_len", "nan"), ("request_id", "x"),
                                           ("first_token_s", "1e300")])
def test_a_replay_folders_bad_cells_are_dropped_or_refused_never_a_traceback(tmp_path, column, value):
    import csv
    from tests.test_from_replay import _replay_folder
    d = tmp_path / "rep"
    _replay_folder(d, True)
    (table,) = d.rglob("requests.csv")
    rows = list(csv.DictReader(table.open()))
    rows[3][column] = value
    with table.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    try:
        (r,) = read_one(d)
    except ValueError as e:  # a one-line error naming the run
        assert str(d) in str(e) and "\n" not in str(e)
    else:
        assert len(r.requests) + sum(r.dropped.values()) == 21


@settings(max_examples=80, deadline=None)
@given(label=st.sampled_from(["block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens",
                              "enable_prefix_caching"]),
       raw=st.one_of(st.integers(-10, 2**70).map(str), st.text(alphabet="0123456789-.eTrueFalsNn ", max_size=12)))
def test_any_scraped_value_is_in_bounds_or_one_line(label, raw):
    """Whatever a server states, the settings read from it are what the options accept
    (SchedulerConfig validates them), or a one-line error names the label."""
    from batchlab.core.config import SchedulerConfig
    from batchlab.calibration.from_replay.settings import METRIC_LABELS
    text = f'x:cache_config_info{{{label}="{raw}"}} 1.0\n'
    try:
        found = parse_metrics(text, "srv/metrics")
    except ValueError as e:
        assert str(e).startswith(f"srv/metrics: x:cache_config_info label {label}=") and "\n" not in str(e)
        return
    if found:
        SchedulerConfig(**found)  # raises if a value is out of bounds
        assert set(found) == {METRIC_LABELS[label]}
