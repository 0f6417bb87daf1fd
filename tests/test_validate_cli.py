"""`batchlab validate` on the tiny model: both runs complete, their tables line up, a real
run compared with itself has zero error, --out writes its files, the report fits in 120
columns, bad inputs give one-line errors (exit 2). The accuracy targets belong to the
study (docs/validation.md), not here."""
from __future__ import annotations

import csv
import json
import math

import pytest

pytest.importorskip("torch")

from tests.helpers import SMALL_VALIDATE, cli  # noqa: E402

def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cells(comparison: dict) -> dict[str, dict]:
    """comparison.json's judged cells by policy, in the order validate ran them."""
    return {c["policy"]: c for c in comparison["cells"]}


def test_both_runs_complete_and_their_tables_line_up(validated):
    out, _ = validated
    comp = cells(json.loads((out / "comparison.json").read_text()))
    assert list(comp) == ["continuous", "chunked"]
    for policy in comp:
        real = read_csv(out / policy / "real" / "requests.csv")
        for sim_dir in ("sim", "sim_normalised"):
            sim = read_csv(out / policy / sim_dir / "requests.csv")
            assert list(sim[0]) == list(real[0])  # same schema
            same = ("request_id", "arrival_s", "prompt_len", "output_len", "status")
            assert [[r[k] for k in same] for r in sim] == [[r[k] for k in same] for r in real]
            steps_real = (out / policy / "real" / "steps.csv").read_text().splitlines()[0]
            assert (out / policy / sim_dir / "steps.csv").read_text().splitlines()[0] == steps_real
        for dropped in ("sim_overhead", "sim_scaled", "sim_selffit"):  # variants no longer simulated
            assert not (out / policy / dropped).exists()
        assert {r["status"] for r in real} == {"finished"} and len(real) == 6
        c = comp[policy]
        assert c["where"] == str(out / policy) and c["runs"] == 1
        keys = {m["key"] for m in c["metrics"]}
        assert {"mean_ttft_ms", "median_tpot_ms", "p90_itl_ms", "p99_e2el_ms",
                "mean_queueing_delay_ms", "request_throughput", "output_throughput"} <= keys
        assert all(math.isfinite(m["real"][0]) and math.isfinite(m["sim"])
                   for m in c["metrics"] if "ttft" in m["key"] or "e2el" in m["key"])
        # the simulated pool is the real run's, so memory pressure is identical
        sim_meta = json.loads((out / policy / "sim" / "meta.json").read_text())
        real_meta = json.loads((out / policy / "real" / "meta.json").read_text())
        assert sim_meta["num_kv_blocks"] == real_meta["num_kv_blocks"] and sim_meta["cost_model"] == "profile"
        d = c["diagnostics"]
        assert d["steps"]["real_steps"] > 0 and d["steps"]["sim_steps"] > 0
        assert d["runs"][0]["wall_s"] > 0 and "reason" in d["divergence"]
        assert d["step_error"]["steps"] == d["steps"]["real_steps"]


def test_out_dir_and_printed_table(validated):
    out, text = validated
    for f in ("config.json", "comparison.json", "continuous/cdf.png", "chunked/cdf.png",
              "continuous/real/steps.csv", "continuous/sim/steps.csv", "chunked/sim/requests.csv"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    lines = text.splitlines()
    assert lines[0].startswith("profile judged: ") and max(len(line) for line in lines) <= 120
    for label in ("TTFT mean", "TPOT p50", "E2E latency p99", "output tokens/s", "real (median)", "normalised"):
        assert label in text, label
    assert "steps: real" in text and "per-step duration, profile vs measured" in text
    assert "over 2 policies in " in text and "Per step: the profile's median |error|" in text
    assert "step kinds" in text and "steady decode" in text


def test_a_real_run_against_itself_has_zero_error(profile_file):
    from batchlab.backend.runtime import Runtime
    from batchlab.core.config import SchedulerConfig
    from batchlab.core.workload import WorkloadConfig, build_workload
    from batchlab.experiments.validation.pair import run_real
    from batchlab.experiments.validation.steps import step_match
    from batchlab.experiments.validation.verdicts import metric_rows

    rt = Runtime("batchlab-tiny", threads=1, kv_memory="16MiB")
    w = build_workload(WorkloadConfig(source="chat", num_requests=4, rate=40, max_prompt_len=32,
                                      max_output_len=6))
    real = run_real(rt, w, SchedulerConfig(policy="chunked", max_num_seqs=4, max_num_batched_tokens=16))
    s = real.result.summary()
    rows = metric_rows([s], s, [s], False)
    assert all(m.error == 0 and m.error_normalised == 0 for m in rows if math.isfinite(m.real[0]))
    assert all(m.verdict == "ok" for m in rows if m.target is not None)
    match = step_match(real.keys, real.keys)
    assert match.identical and match.matched_fraction == 1
    assert len(real.keys) == match.real_steps == len(real.result.steps["start_s"])


def test_json_format(profile_file):
    code, out, err = cli(["validate", *SMALL_VALIDATE[:1], "3", *SMALL_VALIDATE[2:], "--profile", str(profile_file),
                          "--format", "json"])
    assert code == 0
    # the fixture's profile is a quick-grid one: a smoke test, flagged when used
    assert f"batchlab: warning: {profile_file}: profile measured on the quick grid" in err
    got = json.loads(out)
    comp = cells(got)["continuous"]
    assert comp["where"] == "served here" and len(comp["metrics"]) == 23
    assert got["profile"]["source"] == str(profile_file) and got["profile"]["warnings"]


@pytest.mark.parametrize("args, message", [
    (["--profile", "/nonexistent/p.json"], "profile not found"),
    (["--profile", "default", "--replicas", "2"], "one replica"),
    (["--profile", "default", "--policy", "nope"], "--policy nope: no such policy"),
    (["--profile", "default", "--hardware", "h200"], "--hardware does not apply to batchlab validate"),
    (["--profile", "default", "--slo-tpot-ms", "50"], "--slo-tpot-ms does not apply"),
])
def test_bad_inputs_are_one_line_errors(args, message):
    code, _, err = cli(["validate", *SMALL_VALIDATE, *args])
    assert code == 2 and message in err and err.strip().count("\n") == 0


def test_out_at_a_file_and_a_max_model_len_beyond_the_context_fail_first(tmp_path):
    """Both before anything is run or calibrated (no --profile: a calibration first)."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    code, _, err = cli(["validate", *SMALL_VALIDATE, "--profile", "default", "--out", str(afile)])
    assert code == 2 and "is a file" in err and err.strip().count("\n") == 0
    assert afile.read_text() == "mine"
    code, _, err = cli(["validate", *SMALL_VALIDATE, "--max-model-len", "9000", "--out", str(tmp_path / "o")])
    assert code == 2 and "exceeds the model's context length of 8192" in err
    assert not (tmp_path / "o").exists()


def test_not_a_profile_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    code, _, err = cli(["validate", *SMALL_VALIDATE, "--profile", str(bad)])
    assert code == 2 and "not a batchlab profile" in err and err.strip().count("\n") == 0


def test_a_profile_of_another_model_is_refused(profile_file, tmp_path):
    from batchlab.core.cost.profile import load_profile
    from batchlab.core.model.presets import MODELS

    p = load_profile(profile_file).model_copy(update={"model": MODELS["batchlab-small"]})
    other = tmp_path / "small.json"
    p.save(other)
    code, _, err = cli(["validate", *SMALL_VALIDATE, "--profile", str(other)])
    assert code == 2 and "different model" in err and err.strip().count("\n") == 0


@pytest.mark.slow  # a real calibration or a full study: tens of seconds
def test_without_a_profile_it_calibrates_first(tmp_path, monkeypatch):
    from dataclasses import replace

    from batchlab.calibration.sweep.grid import tiny_grid
    from batchlab.experiments.validation import profile_source

    # The quick grid without its serving phase: what is tested is that validate calibrates
    # first and judges with that profile (the serving phase has tests of its own).
    monkeypatch.setattr(profile_source, "CALIBRATION_GRID", replace(tiny_grid(), serve_s=0.0))
    code, _, err = cli(["validate", *SMALL_VALIDATE[:1], "3", *SMALL_VALIDATE[2:], "--out", str(tmp_path)])
    assert code == 0, err
    assert (tmp_path / "profile.json").is_file() and "calibrating" in err
    comp = json.loads((tmp_path / "comparison.json").read_text())
    assert comp["profile"]["source"] == "calibrated for this run" and comp["cells"][0]["policy"] == "continuous"


def test_the_model_comes_from_the_profile_unless_given(profile_file):
    """--profile default (the shipped batchlab-small CPU profile) and no --model: the
    profile's model is served; an explicit --model that differs is refused."""
    code, out, err = cli(["validate", *SMALL_VALIDATE[:1], "2", *SMALL_VALIDATE[2:], "--max-output-len", "3",
                          "--profile", "default", "--format", "json"])
    assert code == 0, err
    assert cells(json.loads(out))["continuous"]["diagnostics"]["runs"][0]["model"] == "batchlab-small"
    code, _, err = cli(["validate", *SMALL_VALIDATE, "--profile", "default", "--model", "batchlab-tiny"])
    assert code == 2 and "different model" in err
