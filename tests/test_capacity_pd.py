"""`capacity deploy --pd-ratios`: disaggregated pools searched beside the aggregated
space, each option's first passing pools (fewest GPUs first, below the aggregated
winner's), launch lines vLLM accepts, and bad options as one-line errors."""
from __future__ import annotations

import json

import pytest

from batchlab.experiments.capacity.pd_report import pool_commands
from batchlab.experiments.capacity.pd_search import PDShape, lines, parse_ratios
from batchlab.experiments.errors import UserError
from tests.helpers import one_line_error, run_cli
from tests.test_capacity_launch import check_line

LONG = """[workload]
source = "uniform"
num_requests = 240
rate = 8.5
prompt = {dist = "uniform", low = 3000, high = 6000}
output = {dist = "uniform", low = 100, high = 300}
[model]
name = "llama-3-8b"
[hardware]
name = "h100-sxm"
served_engine = "none"  # the kernels' sum, as the study priced it: this load sits where it decides
[run]
router = "least_loaded"
slo = {ttft_ms = 400.0, tpot_ms = 20.0}
"""
SPACE = ["--tp-options", "1", "--dtype-options", "bf16", "--seats-options", "1024", "--budget-options", "8192",
         "--goodput", "0.9", "--workers", "1", "--format", "json"]


def test_launch_lines_are_vllm_serve_with_the_nixl_connector():
    out = pool_commands("llama-3-70b", "h100-sxm", "fp8", 256, 2048, PDShape(3, 2, 4, 2))
    serve = [line for line in out if line.startswith("vllm serve")]
    assert len(serve) == 2
    for line, n, tp in zip(serve, (3, 2), (4, 2)):
        words = check_line(line)  # every flag one of vllm serve's
        config = json.loads(words[words.index("--kv-transfer-config") + 1])
        assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        assert words[words.index("--tensor-parallel-size") + 1] == str(tp)
        assert f"x {n} replica(s), {n * tp} GPU(s)" in line


def test_lines_scale_a_ratio_or_split_every_gpu_count():
    (scaled,) = lines([(2, 1)], [(1, 2)], 6)
    assert [(s.prefill, s.decode) for s in scaled.candidates] == [(2, 1), (4, 2), (6, 3)]
    (every,) = lines(None, [(1, 1)], 4)
    gpus = [s.gpus for s in every.candidates]
    assert gpus == sorted(gpus) and gpus[0] == 2 and max(gpus) == 4
    assert {(s.prefill, s.decode) for s in every.candidates} == {(1, 1), (1, 2), (2, 1), (1, 3), (2, 2), (3, 1)}


@pytest.mark.parametrize("text", ["1:0", "2", "a:b", ",", "1:2:3"])
def test_bad_ratios_are_refused(text):
    with pytest.raises(UserError, match="--pd-ratios"):
        parse_ratios(text)


def test_long_prompts_under_tight_slos_take_fewer_gpus_disaggregated(tmp_path, capsys):
    """The study's direction at one load (docs/results/2026-12-06-disaggregation.md): the
    disaggregated answer takes fewer GPUs than the aggregated one, passes, and comes with
    one `vllm serve` line per pool and what binds each pool."""
    config = tmp_path / "long.toml"
    config.write_text(LONG)
    code, out, _ = run_cli(["capacity", "deploy", "--config", str(config), *SPACE, "--pd-ratios", "all"], capsys)
    assert code == 0
    r = json.loads(out)
    agg = next(o for o in r["options"] if o["replicas"] is not None)
    pd = r["disaggregated"]
    (option,) = pd["options"]
    assert pd["winner"] == "disaggregated" and option["passes"] and option["gpus"] < agg["gpus"]
    assert option["slo_attainment"] >= 0.9 and option["stability"] == "stable"
    code, out, _ = run_cli(["capacity", "deploy", "--config", str(config), *SPACE[:-2], "--pd-ratios", "all",
                            "--out", str(tmp_path / "out")], capsys)
    assert code == 0
    assert json.loads((tmp_path / "out" / "deploy.json").read_text())["disaggregated"] == pd
    launch = out[out.index("disaggregated winner's launch"):].splitlines()
    serve = [line.strip() for line in launch if line.strip().startswith("vllm serve")]
    assert len(serve) == 2 and all(check_line(line) for line in serve)
    assert any(line.strip().startswith("prefill pool (") for line in launch)
    assert any(line.strip().startswith("binds: goodput") for line in launch)


def test_bad_pd_options_are_one_line_errors(tmp_path, capsys):
    config = tmp_path / "long.toml"
    config.write_text(LONG)
    base = ["capacity", "deploy", "--config", str(config), *SPACE]
    code, _, err = run_cli([*base, "--pd-ratios", "1:1", "--link", "carrier-pigeon"], capsys)
    one_line_error(code, err, "--link", "unknown link")
    code, _, err = run_cli([*base, "--pd-ratios", "0:1"], capsys)
    one_line_error(code, err, "--pd-ratios")
    code, _, err = run_cli([*base, "--pd-ratios", "1:1", "--price", "h100-sxm=2"], capsys)
    one_line_error(code, err, "--pd-ratios with --price")
