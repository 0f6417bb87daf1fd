"""--plot DIR on simulate and run: the standard plots, drawn from the two tables."""
from __future__ import annotations

import numpy as np
import pytest

from batchlab.experiments.cli import main
from batchlab.experiments.run_plots import FILES, _mean_count

PNG = b"\x89PNG"


def test_simulate_writes_the_plots(tmp_path, capsys):
    code = main(["simulate", "--num-requests", "80", "--policy", "static,continuous",
                 "--admission", "fcfs,shortest_output", "--plot", str(tmp_path / "p"), "--format", "json"])
    assert code == 0
    for f in FILES:
        assert (tmp_path / "p" / f).read_bytes()[:4] == PNG


@pytest.mark.backend
def test_run_writes_the_same_plots(tmp_path, capsys):
    code = main(["run", "--num-requests", "5", "--rate", "inf", "--max-prompt-len", "32",
                 "--max-output-len", "6", "--kv-memory", "16MiB", "--no-progress",
                 "--plot", str(tmp_path), "--format", "json"])
    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES)


@pytest.mark.parametrize("extra, message", [(["--no-step-table"], "drop --no-step-table"),
                                             ([], "is a file")])
def test_plot_errors_before_any_work(tmp_path, capsys, extra, message):
    target = tmp_path / "f"
    if not extra:
        target.write_text("x")
    code = main(["simulate", "--num-requests", "10", "--plot", str(target), *extra])
    assert code == 2 and message in capsys.readouterr().err


def test_queue_length_is_the_exact_time_weighted_mean():
    # Waiting [0, 1) and [0.5, 2); the last never leaves (NaN): open to the end (4 s).
    starts = np.array([0.0, 0.5, 3.0])
    ends = np.array([1.0, 2.0, np.nan])
    edges = np.array([0.0, 1.0, 2.0, 4.0])
    np.testing.assert_allclose(_mean_count(starts, ends, edges), [1.5, 1.0, 0.5])
