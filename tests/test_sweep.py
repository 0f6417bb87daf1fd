"""`batchlab sweep`: grid parsing and hashing, results identical on every executor,
streaming and resuming, the Pareto table, bad input."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from batchlab.core.cost.gpu_profile import load_gpu_profile
from batchlab.experiments.cli import main
from batchlab.experiments.sweep.grid import load_sweep
from batchlab.experiments.sweep.pareto import pareto

from tests.helpers import SWEEP_BASE as BASE

GRID = BASE + """
[grid]
policy = ["continuous", "chunked"]
"scheduler.max_num_seqs" = [4, 128]
[grid.hardware]
name = ["a100-80gb", "h100-sxm"]
[sweep]
gpu_hour_price = 2.0
"""


def write(tmp_path: Path, text: str, name: str = "grid.toml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def sweep(args, capsys, code=0):
    got = main(["sweep", *args])
    out, err = capsys.readouterr()
    assert got == code, err
    return out, err


def results(out_dir: Path) -> list[dict]:
    return results_of(out_dir, "results.csv")


def results_of(out_dir: Path, name: str) -> list[dict]:
    return list(csv.DictReader(open(out_dir / name)))


def test_grid_points_are_the_product_in_file_order_with_stable_hashes(tmp_path):
    s = load_sweep(write(tmp_path, GRID))
    assert s.fields == ["scheduler.policy", "scheduler.max_num_seqs", "hardware.name"]
    assert [tuple(p.values.values()) for p in s.points][:3] == [
        ("continuous", 4, "a100-80gb"), ("continuous", 4, "h100-sxm"), ("continuous", 128, "a100-80gb")]
    assert len(s.points) == 8 and len({p.key for p in s.points}) == 8
    assert [p.key for p in load_sweep(write(tmp_path, GRID, "again.toml")).points] == [p.key for p in s.points]
    assert s.points[3].config.scheduler.max_num_seqs == 128 and s.points[3].config.hardware.name == "h100-sxm"
    changed = load_sweep(write(tmp_path, GRID.replace("rate = 10.0", "rate = 11.0"), "c.toml"))
    assert not {p.key for p in changed.points} & {p.key for p in s.points}  # the hash covers the base


def test_serial_and_pool_give_identical_results_and_a_pareto_front(tmp_path, capsys):
    grid = write(tmp_path, GRID)
    out, _ = sweep(["--config", grid, "--out", str(tmp_path / "a"), "--workers", "1"], capsys)
    sweep(["--config", grid, "--out", str(tmp_path / "b"), "--workers", "2"], capsys)
    a, b = results(tmp_path / "a"), results(tmp_path / "b")
    assert a == b and len(a) == 8
    assert "Pareto front (cost_per_hour against p99_ttft_ms)" in out
    assert "a point passes with p99 TTFT <= 1000 ms, p99 TPOT <= 60 ms, a stable queue and every request served" in out
    assert "API server's rule for h100-sxm" in out
    # the front is the passing points no other passing point beats on both cost and p99 TTFT
    ok = [(float(r["cost_per_hour"]), float(r["p99_ttft_ms"]), r["point"]) for r in a if r["passes"] == "True"]
    front = {p for c, t, p in ok if not any(c2 <= c and t2 <= t and (c2, t2) != (c, t) for c2, t2, _ in ok)}
    assert front and {r["point"] for r in results_of(tmp_path / "a", "pareto.csv")} == front
    fitted = {g: str(round(load_gpu_profile(g).params["compute_efficiency"].value, 4)) for g in ("a100-80gb", "h100-sxm")}
    assert {r["compute_efficiency"] for r in a} == set(fitted.values())  # priced by the GPU profiles
    assert {r["weights_dtype"] for r in a} == {"bf16"}
    rows = json.loads((tmp_path / "a" / "sweep.json").read_text())["pareto"]
    assert rows and all(r["passes"] for r in rows)
    for f in ("results.parquet", "pareto.csv", "pareto.parquet", "pareto.png"):
        assert (tmp_path / "a" / f).exists()
    assert {r["stability"] for r in a} <= {"stable", "overloaded"}
    assert any(r["stability"] == "overloaded" for r in a)  # 4 seats at 10 req/s


def test_an_interrupted_sweep_resumes_and_gives_the_same_results(tmp_path, capsys):
    grid = write(tmp_path, GRID)
    full = tmp_path / "full"
    sweep(["--config", grid, "--out", str(full), "--workers", "1"], capsys)
    part = tmp_path / "part"
    part.mkdir()
    lines = (full / "points.jsonl").read_text().splitlines()
    # Three points finished, a fourth was being written when the sweep was stopped.
    (part / "points.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
    out, _ = sweep(["--config", grid, "--out", str(part), "--workers", "1"], capsys)
    assert "8 points (simulate), 3 from an earlier run" in out
    assert results(part) == results(full)
    out, _ = sweep(["--config", grid, "--out", str(part), "--workers", "1"], capsys)
    assert "8 from an earlier run" in out


def test_max_rate_points_and_a_model_that_does_not_fit(tmp_path, capsys):
    grid = write(tmp_path, BASE + """
[grid]
model = ["llama-3-8b", "llama-3-70b"]
[sweep]
point = "max-rate"
tolerance = 0.1
""")
    sweep(["--config", grid, "--out", str(tmp_path / "o"), "--workers", "1"], capsys)
    small, big = results(tmp_path / "o")
    assert float(small["answer"]) > 5 and small["passes"] == "True"
    assert "leaves no KV memory" in big["error"] and big["passes"] == "False"


def test_pareto_keeps_only_undominated_passing_points():
    rows = [{"point": i, "passes": ok, "gpus": g, "p99_ttft_ms": t}
            for i, (ok, g, t) in enumerate([(True, 4, 500.0), (True, 4, 300.0), (True, 8, 400.0),
                                            (True, 8, 100.0), (False, 2, 50.0)])]
    assert [r["point"] for r in pareto(rows, "p99_ttft_ms")] == [1, 3]


@pytest.mark.parametrize("grid, message", [
    (BASE + "[grid]\n\"scheduler.max_seqs\" = [1, 2]\n", "[grid] scheduler.max_seqs: no field 'max_seqs' in scheduler"),
    (BASE + "[grid]\nseats = [1, 2]\n", "[grid] seats: no field 'seats' in the config"),
    (BASE + "[grid]\npolicy = []\n", "[grid] scheduler.policy: empty list of values"),
    (BASE + "[grid]\npolicy = \"chunked\"\n", "expected a list of values"),
    (BASE + "[grid]\nmax_num_seqs = [0]\n", "grid point scheduler.max_num_seqs=0: scheduler.max_num_seqs"),
    (BASE + "[grid]\nhardware = [\"h900\"]\n", "unknown hardware preset 'h900'"),
    (BASE + "[grid]\npolicy = [\"chunked\"]\n[sweep]\ngpu_hour_price = -3.0\n", "[sweep]: gpu_hour_price"),
    (BASE + "[grid]\npolicy = [\"chunked\"]\n[sweep]\nspeed = 1\n", "[sweep]: speed"),
    (BASE, "needs a [grid] table"),
])
def test_bad_grids_are_one_line_errors(grid, message, tmp_path, capsys):
    _, err = sweep(["--config", write(tmp_path, grid), "--out", str(tmp_path / "o")], capsys, code=2)
    assert message in err and err.count("\n") == 1


def test_a_dask_address_that_does_not_answer_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    from batchlab.experiments import executor
    monkeypatch.setattr(executor, "DASK_TIMEOUT_S", 1)  # the wait is the test's cost: keep it short
    grid = write(tmp_path, BASE + "[grid]\npolicy = [\"chunked\"]\n")
    _, err = sweep(["--config", grid, "--out", str(tmp_path / "o"), "--dask", "tcp://127.0.0.1:9"],
                   capsys, code=2)
    assert "--dask tcp://127.0.0.1:9: no Dask scheduler answered within 1 s" in err
    assert err.count("\n") == 1


@pytest.mark.slow
def test_a_dask_local_cluster_gives_the_process_pools_results(tmp_path, capsys):
    grid = write(tmp_path, GRID)
    sweep(["--config", grid, "--out", str(tmp_path / "pool"), "--workers", "2"], capsys)
    out, _ = sweep(["--config", grid, "--out", str(tmp_path / "dask"), "--dask", "local",
                    "--workers", "2"], capsys)
    assert "ran on Dask LocalCluster (2 workers)" in out
    assert results(tmp_path / "dask") == results(tmp_path / "pool")


def test_the_throughput_front_is_vllms_convention_over_passing_points():
    from batchlab.experiments.sweep.pareto import PER_GPU, PER_USER, throughput_front, with_rates

    r = with_rates({"gpus": 4, "output_throughput": 2000.0, "median_tpot_ms": 20.0})
    assert r[PER_GPU] == 500 and r[PER_USER] == 50
    rows = [{"point": i, "passes": ok, PER_GPU: g, PER_USER: u}
            for i, (ok, g, u) in enumerate([(True, 500, 50), (True, 400, 60), (True, 300, 40),
                                            (False, 900, 90), (True, 600, 20)])]
    assert [x["point"] for x in throughput_front(rows)] == [4, 0, 1]  # 2 dominated, 3 fails


def test_tied_values_get_a_window_not_a_degenerate_axis():
    from batchlab.experiments.capacity.limits import spread_limits

    assert spread_limits([4.0, 4.0, 4.0]) == pytest.approx((3.6, 4.4))
    assert spread_limits([0.0]) == (-1.0, 1.0) and spread_limits([1.0, 2.0]) is None


def test_a_sweep_whose_points_tie_on_cost_plots_both_fronts(tmp_path, capsys):
    grid = write(tmp_path, BASE + '[grid]\n"scheduler.max_num_seqs" = [16, 64, 256]\n')
    out, _ = sweep(["--config", grid, "--out", str(tmp_path / "o"), "--workers", "1"], capsys)
    rows = results(tmp_path / "o")
    assert {r["gpus"] for r in rows} == {"1"}  # every point costs 1 GPU
    assert all(float(r["tokens_per_s_per_gpu"]) > 0 and float(r["tokens_per_s_per_user"]) > 0 for r in rows)
    assert "tokens/s per user against tokens/s per GPU" in out
    assert (tmp_path / "o" / "pareto.png").stat().st_size > 20_000
    tf = json.loads((tmp_path / "o" / "sweep.json").read_text())["pareto_throughput"]
    assert tf and all(r["passes"] for r in tf)


def test_a_sweep_without_an_slo_says_what_a_point_passes_on(tmp_path, capsys):
    """No [run.slo]: a point passes on its queue and its losses alone, and the line says so
    (it once printed 'a point passes with p99 , a stable queue ...')."""
    grid = BASE.split("[run.slo]")[0] + "[grid]\nrate = [5.0, 10.0]\n[sweep]\n"
    out, _ = sweep(["--config", write(tmp_path, grid), "--out", str(tmp_path / "o"), "--workers", "1"], capsys)
    assert ("a point passes with a stable queue and every request served that fits the model's context "
            "(no latency SLO given)") in out
    assert "p99 ," not in out
