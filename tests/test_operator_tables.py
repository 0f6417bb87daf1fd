"""calibrate --from-operators on tables the tests write: the fit finds the constants that
made exact timings; every kind of bad table is one line naming file, line and column, exit 2."""
from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.calibration.operators.build import build_profile
from batchlab.calibration.operators.tables import OperatorTableError
from batchlab.core.cost.gpu_profile import load_gpu_profile
from tests.helpers import cli, one_line_error
from tests.operator_tables import TRUE, header, mlp_path, write_csv, write_tables


def rows_of(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_fit_finds_the_constants_that_made_the_timings(tmp_path):
    built = build_profile(write_tables(tmp_path), "a100-80gb")
    p = built.profile
    for name in ("mem_efficiency", "compute_efficiency", "gemm_fixed_s", "layer_fixed_s",
                 "elementwise_efficiency", "elementwise_row_efficiency"):
        assert p.params[name].value == pytest.approx(getattr(TRUE, name), rel=0.02), name
    assert p.params["ridge_k"].value == pytest.approx(TRUE.ridge_k, rel=0.05)
    assert p.params["gemm_tile_tokens"].value == TRUE.gemm_tile_tokens  # the tile that made them
    assert p.heldout.overall.median < 0.01 and p.heldout.overall.n == 3 * 3 * 12
    assert set(p.heldout.by_region) == {"decode", "ridge", "prefill"} and set(p.heldout.by_tp) == {"1", "2", "4"}
    assert p.fitted_on.models == ["big", "mid", "small"] and p.fitted_on.tensor_parallel == [1, 2, 4]
    assert p.params["step_s"].source.startswith("assumed")
    assert "no attention table" in p.fitted_on.attention


def test_the_fit_picks_the_tile_that_made_the_timings(tmp_path):
    p = build_profile(write_tables(tmp_path, params=replace(TRUE, gemm_tile_tokens=64.0)), "a100-80gb", judge=False)
    assert p.profile.params["gemm_tile_tokens"].value == 64.0


def test_the_command_writes_a_profile_that_prices_its_preset(tmp_path):
    out = tmp_path / "a100.json"
    code, text, err = cli(["calibrate", "--from-operators", str(write_tables(tmp_path / "t")),
                           "--gpu", "a100-80gb", "--out", str(out)])
    assert code == 0, err
    assert "per-step |error| by region" in text and "by TP degree" in text and "fit " in text
    p = load_gpu_profile(out)
    assert p.gpu == "a100-80gb" and json.loads(out.read_text())["format"] == "batchlab-gpu-profile"
    code, text, err = cli(["simulate", "--num-requests", "20", "--policy", "chunked",
                           "--gpu-profile", str(out)])
    assert code == 0, err
    assert f"GPU profile {out}" in text and "held-out per-step error: median" in text


def spoil(tmp_path, line: int, column: str, value: str):
    """The tables with one cell of the small model's mlp.csv replaced (line: as in the file)."""
    root = write_tables(tmp_path / "t")
    path = mlp_path(root)
    rows = rows_of(path)
    rows[line - 2][column] = value
    write_csv(path, rows)
    return root


def calibrate(root, gpu="a100-80gb"):
    return cli(["calibrate", "--from-operators", str(root), "--gpu", gpu, "--out", str(root / "p.json")])


@pytest.mark.parametrize("value, expected", [("0", "expected a positive time"), ("-0.01", "expected a positive time"),
                                             ("nan", "expected a finite number"), ("inf", "expected a finite number"),
                                             ("fast", "expected a number")])
def test_a_bad_time_names_file_line_and_column(tmp_path, value, expected):
    root = spoil(tmp_path, 5, "time_stats.mlp_up_proj.median", value)
    code, _, err = calibrate(root)
    one_line_error(code, err, str(mlp_path(root)), "line 5", "column time_stats.mlp_up_proj.median", expected)
    assert not (root / "p.json").exists()


def test_a_missing_column_is_named(tmp_path):
    root = write_tables(tmp_path / "t")
    path = mlp_path(root)
    columns = [c for c in rows_of(path)[0] if c != "time_stats.attn_rope.median"]
    write_csv(path, rows_of(path), columns)
    code, _, err = calibrate(root)
    one_line_error(code, err, str(path), "line 1", "missing column time_stats.attn_rope.median")


@pytest.mark.parametrize("column, value, expected", [
    ("n_embd", "4095", "not a multiple of n_head"),
    ("n_kv_head", "7", "do not divide n_head"),
    ("num_tensor_parallel_workers", "3", "does not split"),
    ("num_tokens", "0", "expected a whole number >= 1"),
    ("num_tokens", "2.5", "expected a whole number >= 1"),
    ("use_gated_mlp", "False", "gated (SwiGLU)"),
])
def test_a_shape_the_form_cannot_use_is_named(tmp_path, column, value, expected):
    root = spoil(tmp_path, 3, column, value)
    code, _, err = calibrate(root)
    one_line_error(code, err, str(mlp_path(root)), "line 3", f"column {column}", expected)


def test_conflicting_repeats_are_refused_and_close_ones_averaged(tmp_path):
    root = write_tables(tmp_path / "t")
    path = mlp_path(root)
    rows = rows_of(path)
    close = dict(rows[4])
    close["time_stats.mlp_down_proj.median"] = repr(float(close["time_stats.mlp_down_proj.median"]) * 1.1)
    write_csv(path, [*rows, close])
    assert calibrate(root)[0] == 0  # a repeat within noise: averaged
    far = dict(rows[4])
    far["time_stats.mlp_down_proj.median"] = repr(float(far["time_stats.mlp_down_proj.median"]) * 3)
    write_csv(path, [*rows, far])
    code, _, err = calibrate(root)
    one_line_error(code, err, str(path), f"line {len(rows) + 2}", "column time_stats.mlp_down_proj.median",
                   "conflicts with", "line 6")


@pytest.mark.parametrize("gpu, expected", [("tpu-v9", "unknown GPU 'tpu-v9'"), ("h200", "has no Vidur operator tables"),
                                        ("b200", "has no Vidur operator tables")])
def test_an_unknown_or_unmeasured_gpu_is_refused(tmp_path, gpu, expected):
    code, _, err = calibrate(write_tables(tmp_path / "t"), gpu)
    one_line_error(code, err, expected)


def test_a_gpu_without_tables_in_the_folder_is_refused(tmp_path):
    code, _, err = calibrate(write_tables(tmp_path / "t"), "h100-sxm")
    one_line_error(code, err, "compute/h100", "no ORG/MODEL/mlp.csv")


def test_a_bad_network_table_names_its_line(tmp_path):
    root = write_tables(tmp_path / "t")
    net = root / "network" / "a100_dgx" / "all_reduce.csv"
    cols = ["time_stats.all_reduce.median", "num_workers", "size", "devices_per_node"]
    write_csv(net, [{"time_stats.all_reduce.median": "0.05", "num_workers": "2", "size": "2048",
                     "devices_per_node": "2"},
                    {"time_stats.all_reduce.median": "0.06", "num_workers": "2", "size": "-5",
                     "devices_per_node": "2"}], cols)
    code, _, err = calibrate(root)
    one_line_error(code, err, str(net), "line 3", "column size")


def test_gpu_needs_from_operators_and_from_operators_needs_gpu(tmp_path):
    for args, expected in ((["--gpu", "a100-80gb"], "--gpu applies to --from-operators only"),
                           (["--from-operators", str(tmp_path)], "needs --gpu"),
                           (["--from-operators", str(tmp_path / "no"), "--gpu", "a40"], "not a directory")):
        code, _, err = cli(["calibrate", *args])
        one_line_error(code, err, expected)


def steps_profile(tmp_path, kind="cuda", n=40, mem_efficiency=0.7):
    """A batchlab profile (calibrate --device cuda) whose steps the shipped A100 profile
    prices with step_s 2 ms and memory efficiency 0.7 (or as given) instead of its own."""
    from batchlab.core.features import StepFeatures
    from batchlab.core.model.hardware import HARDWARE
    from batchlab.core.model.presets import MODELS

    base = load_gpu_profile("a100-80gb")
    # model_copy, not with_values: an efficiency above 1 (steps faster than the datasheet
    # allows) is what some tests make on purpose, and with_values refuses it
    truth = base.model_copy(update={"params": {**base.params, **{
        n: base.params[n].model_copy(update={"value": v})
        for n, v in (("step_s", 2e-3), ("mem_efficiency", mem_efficiency))}}})
    model = MODELS["llama-3-8b"]
    cost = truth.cost(model, 1, HARDWARE["a100-80gb"])
    measurements = []
    for i in range(n):
        seqs, chunk, kv = 1 + (i * 7) % 64, (0, 64, 512, 2048)[i % 4], 200 + 97 * i
        f = StepFeatures(seqs, 1 if chunk else 0, chunk, seqs - (1 if chunk else 0), seqs * kv + chunk,
                         seqs * kv + chunk * (chunk + 1) // 2)
        region = "decode" if not chunk else "prefill" if seqs == 1 else "mixed"
        measurements.append({"point": f"p{i}", "region": region, "features": f._asdict(),
                             "median_s": cost.step_time(f), "mad_s": 0.0, "reps": 3, "heldout": i % 4 == 3})
    from batchlab.core.cost.profile import load_profile
    doc = json.loads(load_profile("batchlab-small-cpu").model_dump_json())
    doc.update(model=model.model_dump(), measurements=measurements, measurements_path=None)
    doc["device"].update(kind=kind, name="NVIDIA A100-SXM4-80GB", dtype="bfloat16")
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(doc))
    return path


def test_batchlabs_own_gpu_steps_refine_the_public_profile(tmp_path):
    out = tmp_path / "refined.json"
    code, text, err = cli(["calibrate", "--from-operators", str(steps_profile(tmp_path)), "--gpu", "a100-80gb",
                           "--out", str(out)])
    assert code == 0, err
    p = load_gpu_profile(out)
    assert p.params["step_s"].value == pytest.approx(2e-3, rel=0.01)
    assert p.params["mem_efficiency"].value == pytest.approx(0.7, rel=0.01)
    assert p.params["ridge_k"].value == load_gpu_profile("a100-80gb").params["ridge_k"].value  # kept
    assert p.heldout.overall.n == 10 and p.heldout.overall.median < 0.01
    assert "refined on 30 of batchlab's steps" in text


def test_a_refit_past_the_datasheet_stops_there_and_says_so(tmp_path):
    """Steps faster than the datasheet bandwidth allows (here: made so) cannot fit an
    efficiency above 1; the constant stays at 1 and the output says the steps do not
    resolve it."""
    out = tmp_path / "refined.json"
    code, text, err = cli(["calibrate", "--from-operators", str(steps_profile(tmp_path, mem_efficiency=1.6)),
                           "--gpu", "a100-80gb", "--out", str(out)])
    assert code == 0, err
    assert load_gpu_profile(out).params["mem_efficiency"].value == pytest.approx(1.0)
    assert "mem_efficiency" in text.split("warning:")[1] and "at its bound" in text


def test_a_refit_reports_in_json_as_every_calibration_does(tmp_path):
    out = tmp_path / "refined.json"
    code, text, err = cli(["calibrate", "--from-operators", str(steps_profile(tmp_path, mem_efficiency=1.6)),
                           "--gpu", "a100-80gb", "--out", str(out), "--format", "json"])
    assert code == 0, err
    report = json.loads(text)
    assert report["profile"] == str(out) and "mem_efficiency" in report["at_bound"]
    assert (report["fitted_steps"], report["judged_steps"]) == (30, 10)


def test_steps_timed_on_a_cpu_cannot_refine_a_gpu_profile(tmp_path):
    code, _, err = cli(["calibrate", "--from-operators", str(steps_profile(tmp_path, kind="cpu")),
                        "--gpu", "a100-80gb", "--out", str(tmp_path / "r.json")])
    one_line_error(code, err, "steps.json", "device.kind 'cpu'", "--device cuda")


CELLS = st.sampled_from(["", "-1", "0", "nan", "inf", "1e400", "abc", "3.5", "True", "-0.0"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=st.integers(2, 37), column=st.sampled_from(header()), value=CELLS)
def test_any_spoiled_cell_is_refused_in_one_line_or_read_as_a_number(tmp_path_factory, line, column, value):
    root = write_tables(tmp_path_factory.mktemp("t"))
    path = mlp_path(root)
    rows = rows_of(path)
    rows[line - 2][column] = value
    write_csv(path, rows)
    try:
        build_profile(root, "a100-80gb", judge=False)
    except OperatorTableError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(str(path)) and f"line {line}" in msg
        assert column in msg or "conflicts" in msg or "does not split" in msg


def test_header_only_tables_are_skipped_as_such_and_nothing_reads_0_percent(tmp_path):
    """A header-only table was skipped as 'not a gated MLP', and with one model left the
    profile's held-out error read 0.0% over 0 shapes (issue 46 item 1)."""
    root = write_tables(tmp_path / "t")
    for name in ("mid", "big"):
        write_csv(mlp_path(root, name), [])
    code, text, err = calibrate(root)
    assert code == 0, err
    assert "skipped compute/a100/org/mid/mlp.csv: no rows (a header only)" in text
    assert "not a gated" not in text and "0.0%" not in text
    assert "held out: not judged" in text and "found 1 model(s)" in text
    p = load_gpu_profile(root / "p.json")
    assert p.heldout.overall.n == 0 and "no held-out error" in p.describe()
    code, text, err = cli(["simulate", "--num-requests", "10", "--gpu-profile", str(root / "p.json")])
    assert code == 0, err
    assert "held-out per-step error: none (not judged" in text
    for name in ("small", "mid", "big"):  # no table with a row: refused, naming the folder
        write_csv(mlp_path(root, name), [])
    code, _, err = calibrate(root)
    one_line_error(code, err, "no table of a Llama-family (gated MLP) layer")
