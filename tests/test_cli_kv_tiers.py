"""`batchlab simulate` with a KV tier: the flags and the [kv_tier] table reach the
simulation, its figures land in steps.csv and summary.json (and the assumptions), a run
without one writes what it wrote before, and bad settings are one-line errors naming the
field."""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import pytest

from tests.helpers import run_cli

SMALL = ["--workload", "multiturn", "--num-requests", "200", "--policy", "chunked", "--num-kv-blocks", "300"]


def test_a_tier_adds_its_columns_and_figures_and_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    code, text, _ = run_cli(["simulate", *SMALL, "--kv-tier-capacity", "16", "--out", str(out)], capsys)
    assert code == 0 and "KV tier: cpu, 16 GiB per GPU, 25 GB/s each way" in text
    with open(out / "chunked" / "steps.csv") as f:
        header = next(csv.reader(f))
    assert {"tier_blocks_used", "tier_out_bytes", "tier_in_bytes", "tier_swaps"} <= set(header)
    summary = json.loads((out / "summary.json").read_text())["chunked"]
    assert summary["kv_tier_bytes_out"] > 0 and summary["kv_tier_prefix_hits"] > 0
    assert json.loads((out / "config.json").read_text())["kv_tier"]["capacity_gib"] == 16
    # the printed table shows what the tier moved and served, as summary.json has it
    rows = dict(re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.startswith("KV tier "))
    assert rows["KV tier bytes out"] == f"{summary['kv_tier_bytes_out']:.3g}"
    assert rows["KV tier prefix hit rate"] == f"{summary['kv_tier_prefix_hit_rate']:.1%}"
    assert {"KV tier swaps", "KV tier recomputes", "KV tier bytes in", "KV tier occupancy (mean)"} <= set(rows)


def test_without_a_tier_nothing_of_it_is_written(tmp_path, capsys):
    out = tmp_path / "run"
    code, text, _ = run_cli(["simulate", *SMALL, "--out", str(out)], capsys)
    assert code == 0 and "KV tier" not in text
    with open(out / "chunked" / "steps.csv") as f:
        assert not any(c.startswith("tier_") for c in next(csv.reader(f)))
    assert not any(k.startswith("kv_tier") for k in json.loads((out / "summary.json").read_text())["chunked"])
    assert "kv_tier" not in json.loads((out / "config.json").read_text())


def test_the_toml_table_is_the_flags(tmp_path, capsys):
    cfg = tmp_path / "tier.toml"
    cfg.write_text('[kv_tier]\nkind = "disk"\ncapacity_gib = 16\npreemption = "swap"\n')
    plain = tmp_path / "plain.toml"  # a config file either way: the embedded demo's seats aside
    plain.write_text("# nothing but the defaults\n")
    code, text, _ = run_cli(["simulate", *SMALL, "--config", str(cfg), "--format", "json"], capsys)
    _, flags, _ = run_cli(["simulate", *SMALL, "--config", str(plain), "--kv-tier", "disk", "--kv-tier-capacity",
                           "16", "--kv-tier-preemption", "swap", "--format", "json"], capsys)
    assert code == 0 and text == flags
    assert json.loads(text)["chunked"]["kv_tier_bytes_in"] > 0


@pytest.mark.parametrize("args, expect", [
    (["--kv-tier-capacity", "0"], "kv_tier.capacity_gib (--kv-tier-capacity): expected a finite number > 0"),
    (["--kv-tier-capacity", "1", "--kv-tier-bandwidth", "0"], "kv_tier.bandwidth_gbs (--kv-tier-bandwidth)"),
    (["--kv-tier-capacity", "-3"], "kv_tier.capacity_gib"),
    (["--kv-tier-capacity", "0.0001"], "kv_tier.capacity_gib = 0.0001 holds no KV block"),
    (["--kv-tier", "disk"], "kv_tier.capacity_gib: Field required"),
])
def test_bad_tier_settings_are_one_line_exit_2(args, expect):
    p = subprocess.run([sys.executable, "-m", "batchlab", "simulate", *SMALL, *args],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert expect in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
