"""calibrate --from-operators' whole-step judgment (calibration/operators/heldout.py
judge_steps): a layer's operators plus its attention, each half priced by a fit that never
saw it, on tables the tests write (tests/operator_tables.py, tests/test_gpu_attention.py)."""
from __future__ import annotations

import csv

import pytest

from batchlab.calibration.operators.build import build_profile, read_layers
from batchlab.calibration.operators.heldout import heldout_attention, judge_steps
from batchlab.calibration.operators.report import built_report
from batchlab.calibration.operators.vidur import read_attention
from tests.operator_tables import TRUE, mlp_path, write_tables
from tests.test_gpu_attention import A100, write_attention

PEAK = A100.flops_for("bf16")


def tables(tmp_path):
    root = write_tables(tmp_path)
    (root / "attention" / "a100").mkdir(parents=True)
    write_attention(root / "attention" / "a100" / "attention.csv")
    return root


def judged(root):
    layers, _ = read_layers(root, "a100")
    attention = read_attention(root / "attention" / "a100" / "attention.csv")
    priced = heldout_attention(attention, A100.mem_bandwidth, PEAK)
    assert len(priced) == len(attention)  # four context lengths: every quarter judged
    return layers, attention, judge_steps(layers, priced, A100.mem_bandwidth, PEAK, TRUE.gemm_tile_tokens)


def test_exact_timings_give_exact_steps(tmp_path):
    layers, attention, steps = judged(tables(tmp_path))
    # "big" is the attention table's shape; its layers are timed at 1, 64, 128, 256, 1024 and
    # 4096 tokens among the attention rows' step sizes (decode batches 1 and 128; chunks 64-4096)
    matched = [a for a in attention if (a.prefill_tokens if a.prefill else a.num_seqs) in {1, 64, 128, 256, 1024, 4096}]
    assert steps["all"].n == len(matched) > 0
    assert set(steps) == {"decode", "ridge", "prefill", "all"}
    assert steps["all"].p90 < 1e-3


def test_the_judged_shape_never_enters_the_layer_fit(tmp_path):
    """Every table of the judged shape slowed 1.5x, at every TP degree: a fit on the other
    shapes still finds the true constants, so each step is priced at the true layer
    plus its attention, against 1.5x the layer plus its attention."""
    root = tables(tmp_path)
    path = mlp_path(root, "big")
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    true_layers = {(int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])): r for r in rows}
    for r in rows:
        for k in r:
            if k.startswith("time_stats.") and ".median" in k and not k.startswith("time_stats.emb"):
                r[k] = repr(float(r[k]) * 1.5)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    layers, attention, steps = judged(root)
    assert true_layers and steps["all"].share_high == 0
    big = {r.tokens: r.total_s for r in layers if r.label == "big" and r.tp == 2}
    want = sorted((big[t] / 1.5 + a.time_s) / (big[t] + a.time_s) - 1
                  for a in attention for t in [a.prefill_tokens if a.prefill else a.num_seqs] if t in big)
    assert steps["all"].n == len(want)
    assert steps["all"].median == pytest.approx(abs(want[len(want) // 2]), rel=0.02)


def test_the_report_prints_whole_steps_where_attention_was_timed(tmp_path):
    built = build_profile(tables(tmp_path), "a100-80gb")
    assert built.steps and "whole steps" in built_report(built).text(tmp_path / "p.json")
    without = build_profile(write_tables(tmp_path / "no-attention"), "a100-80gb")
    assert without.steps == {} and "whole steps" not in built_report(without).text(tmp_path / "q.json")
