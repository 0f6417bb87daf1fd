"""`batchlab calibrate --from-run`: a fit judged on runs it was not fitted on, and a
one-line error (exit 2) for every kind of bad input."""
from __future__ import annotations

import json

import pytest

from batchlab.core.cost.fitted import FittedCostModel
from batchlab.experiments.cli import main
from batchlab.core.run_folder import write_table
from tests.helpers import one_line_error, run_cli
from tests.profiles import BASE, make_profile, served_table

IDENT = {"world": "real", "model": "batchlab-tiny", "device": "cpu", "threads": 1,
         "dtype": "float32", "cpu": "test cpu", "block_size": 16, "num_kv_blocks": 400}
TRUTH = FittedCostModel(**{**{f: getattr(BASE, f) for f in BASE.__dataclass_fields__},
                           "after_prefill_s": 0.0006, "after_idle_s": 0.0012})


def served_dir(path, seeds=(0, 1, 2), truth=TRUTH, n=40, **meta):
    """A run --out layout whose step tables are priced by a known model (synthetic)."""
    path.mkdir()
    metas = {}
    for s in seeds:
        (path / f"p{s}").mkdir()
        write_table(path / f"p{s}" / "steps.csv", served_table(truth, seed=s, n=n))
        metas[f"p{s}"] = {**IDENT, **meta}
    (path / "meta.json").write_text(json.dumps(metas))
    return path


def test_fit_from_scratch_recovers_the_model_and_judges_held_out_runs(tmp_path, capsys):
    d = served_dir(tmp_path / "runs")
    out = tmp_path / "served.json"
    code, text, err = run_cli(["calibrate", "--from-run", str(d), "--out", str(out), "--format", "json"], capsys)
    assert code == 0, err
    rep = json.loads(text)
    assert rep["judged_on"] == [f"{d} (p1)"] and len(rep["fitted_on"]) == 2
    held = rep["heldout"]
    assert held["all"]["n"] > 30 and held["all"]["median_ape"] < 0.5
    assert held["after_idle"]["n"] >= 5 and held["after_idle"]["median_ape"] < 1.0
    from batchlab.core.cost.profile import load_profile
    p = load_profile(out)
    assert p.cost.after_idle_s == pytest.approx(0.0012, rel=0.05)
    assert p.cost.after_prefill_s == pytest.approx(0.0006, rel=0.1)
    assert p.runs == rep["fitted_on"]


def test_refine_a_profile_prints_before_and_after(tmp_path, capsys):
    d = served_dir(tmp_path / "runs")
    prof = tmp_path / "p.json"
    make_profile().save(prof)
    code, text, err = run_cli(["calibrate", "--from-run", str(d), "--profile", str(prof),
                               "--out", str(tmp_path / "o.json")], capsys)
    assert code == 0, err
    assert "given profile" in text and "after_idle" in text and "serving level" in text


def test_not_a_run(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(["calibrate", "--from-run", str(tmp_path / "empty")], capsys)
    one_line_error(code, err, "empty", "not a batchlab run")
    code, _, err = run_cli(["calibrate", "--from-run", str(tmp_path / "nope")], capsys)
    one_line_error(code, err, "nope", "not a directory")


def test_a_simulated_run_is_not_a_measurement(tmp_path, capsys):
    main(["simulate", "--num-requests", "5", "--policy", "continuous", "--out", str(tmp_path / "s")])
    capsys.readouterr()
    code, _, err = run_cli(["calibrate", "--from-run", str(tmp_path / "s")], capsys)
    one_line_error(code, err, "continuous", "simulated run")


def test_runs_of_different_threads_or_models(tmp_path, capsys):
    a = served_dir(tmp_path / "a", seeds=(0,))
    b = served_dir(tmp_path / "b", seeds=(1,), threads=2)
    code, _, err = run_cli(["calibrate", "--from-run", str(a), str(b)], capsys)
    one_line_error(code, err, str(b), "threads")
    c = served_dir(tmp_path / "c", seeds=(1,), model="batchlab-small")
    prof = tmp_path / "p.json"
    make_profile().save(prof)  # a batchlab-tiny profile
    code, _, err = run_cli(["calibrate", "--from-run", str(c), "--profile", str(prof)], capsys)
    one_line_error(code, err, str(c), "batchlab-small", "profile")


def test_too_few_steps_of_a_kind(tmp_path, capsys):
    d = served_dir(tmp_path / "d", seeds=(0,))
    steps = (d / "p0" / "steps.csv").read_text().splitlines()
    (d / "p0" / "steps.csv").write_text("\n".join(steps[:4]) + "\n")
    code, _, err = run_cli(["calibrate", "--from-run", str(d)], capsys)
    one_line_error(code, err, str(d), "too few steps", "after_idle")


def test_a_broken_step_table(tmp_path, capsys):
    d = served_dir(tmp_path / "d", seeds=(0,))
    (d / "p0" / "steps.csv").write_text("replica,start_s\n0,1\n")
    code, _, err = run_cli(["calibrate", "--from-run", str(d)], capsys)
    one_line_error(code, err, str(d), "steps.csv", "not a batchlab step table")


@pytest.mark.slow
def test_from_a_real_run_end_to_end(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    trace = tmp_path / "t.csv"  # requests 0.3 s apart (each finds the engine idle), a few in pairs
    rows = [f"{0.3 * (i // 2 * 2 if i % 4 == 3 else i):.2f},{9 + 37 * i % 200},{3 + i % 7},0," for i in range(14)]
    trace.write_text("# batchlab trace\narrival_s,prompt_len,output_len,priority,prefix_hashes\n"
                     + "\n".join(sorted(rows, key=lambda r: float(r.split(",")[0]))) + "\n")
    code, _, err = run_cli(["run", "--model", "batchlab-tiny", "--kv-memory", "32MiB", "--workload", str(trace),
                            "--policy", "continuous,chunked",
                            "--out", str(out), "--no-progress"], capsys)
    assert code == 0, err
    code, text, err = run_cli(["calibrate", "--from-run", str(out), "--out", str(tmp_path / "p.json"),
                               "--format", "json"], capsys)
    assert code == 0, err
    rep = json.loads(text)
    assert rep["judged_on"] == [f"{out} (chunked)"] and rep["heldout"]["all"]["n"] > 10
    code, text, _ = run_cli(["simulate", "--profile", str(tmp_path / "p.json"), "--num-requests", "5"], capsys)
    assert code == 0


def test_a_validate_repeats_out_dir_gives_every_real_run(tmp_path):
    """validate --repeats 3 --out writes POLICY/real, real_2, real_3 (and simulated runs
    beside them): all three real runs are read, in order, and no simulated one."""
    from batchlab.calibration.served.runs import read_runs
    d = tmp_path / "val"
    for policy in ("chunked", "continuous"):
        for i, name in enumerate(("real", "real_2", "real_3", "real_10", "sim", "sim_normalised_2")):
            run = d / policy / name
            run.mkdir(parents=True)
            write_table(run / "steps.csv", served_table(TRUTH, seed=i, n=10))
            world = "sim" if name.startswith("sim") else "real"
            (run / "meta.json").write_text(json.dumps({**IDENT, "world": world}))
    got = [r.where for r in read_runs(d)]
    assert got == [str(d / p / n) for p in ("chunked", "continuous")
                   for n in ("real", "real_2", "real_3", "real_10")]


def test_a_table_written_before_the_later_features_gets_them_derived(tmp_path):
    """Step tables from before after_prefill, after_idle and masked_pairs existed still
    read: each derived from the table as the engine would have recorded it (masked_pairs
    exactly where a step has one chunk; with several, as if they were equal)."""
    import numpy as np

    from batchlab.core.run_folder import read_steps
    from batchlab.core.features import CONTEXT_FEATURES, LATER_FEATURES
    steps = served_table(TRUTH, seed=3, n=30)
    path = tmp_path / "steps.csv"
    write_table(path, {k: v for k, v in steps.items() if k not in LATER_FEATURES})
    got = read_steps(path, "old")
    one = steps["num_prefill_seqs"] <= 1
    assert (~one).any() and steps["masked_pairs"][one].any()
    for name in CONTEXT_FEATURES:
        assert np.array_equal(got[name], np.asarray(steps[name], dtype=float)), name
    true = np.asarray(steps["masked_pairs"], dtype=float)
    assert np.array_equal(got["masked_pairs"][one], true[one])
    assert (got["masked_pairs"][~one] <= true[~one]).all()  # equal chunks: the fewest pairs
