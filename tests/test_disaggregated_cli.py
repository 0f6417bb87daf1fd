"""`batchlab simulate` with prefill and decode pools ([deployment] or its flags): the
pools' figures in the summary, handoffs.csv in --out, config.json recording the table,
and bad input as one-line errors naming the field."""
from __future__ import annotations

import csv
import json

from tests.helpers import one_line_error, run_cli

SMALL = ["--num-requests", "80", "--rate", "8", "--policy", "chunked", "--model", "llama-3-8b",
         "--hardware", "h100-sxm"]


def test_flags_make_a_disaggregated_run(tmp_path, capsys):
    code, out, _ = run_cli(["simulate", *SMALL, "--prefill-replicas", "1", "--decode-replicas", "2",
                            "--link", "roce-400", "--format", "json", "--out", str(tmp_path)], capsys)
    assert code == 0
    s = json.loads(out)["chunked"]
    assert s["completed"] == 80 and s["gpus"] == 3
    with open(tmp_path / "chunked" / "requests.csv") as f:
        requests = list(csv.DictReader(f))
    # Every reply longer than one token was handed on, once; the others ended on prefill.
    assert s["kv_transfers"] == sum(int(r["output_len"]) > 1 for r in requests)
    assert 0 < s["decode_busy_fraction"] <= 1 and s["kv_transfer_bytes"] > 0
    with open(tmp_path / "chunked" / "handoffs.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == s["kv_transfers"]
    assert {int(r["decode_replica"]) for r in rows} <= {1, 2}
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["deployment"]["link"] == "roce-400" and config["deployment"]["decode_replicas"] == 2


def test_a_run_without_pools_records_no_deployment(tmp_path, capsys):
    code, _, _ = run_cli(["simulate", *SMALL, "--out", str(tmp_path)], capsys)
    assert code == 0
    assert "deployment" not in json.loads((tmp_path / "config.json").read_text())


def test_a_faster_link_moves_the_same_bytes_sooner(capsys):
    runs = {}
    for link in ("ib-hdr", "nvlink4"):
        code, out, _ = run_cli(["simulate", *SMALL, "--prefill-replicas", "1", "--link", link,
                                "--format", "json"], capsys)
        assert code == 0
        runs[link] = json.loads(out)["chunked"]
    assert runs["ib-hdr"]["kv_transfer_bytes"] == runs["nvlink4"]["kv_transfer_bytes"]
    assert runs["nvlink4"]["mean_kv_transfer_ms"] < runs["ib-hdr"]["mean_kv_transfer_ms"] / 5
    assert runs["nvlink4"]["mean_tpot_ms"] < runs["ib-hdr"]["mean_tpot_ms"]


def test_the_table_reports_each_pool(capsys):
    code, out, _ = run_cli(["simulate", *SMALL, "--decode-replicas", "1"], capsys)
    assert code == 0
    for label in ("prefill pool stepping", "decode pool stepping", "decode seats all full", "KV transfer mean (ms)",
                  "KV transfer: "):
        assert label in out


def test_a_pool_that_cannot_hold_the_model_names_its_tp(capsys):
    code, _, err = run_cli(["simulate", "--num-requests", "10", "--model", "llama-3-70b", "--hardware",
                            "a100-80gb", "--prefill-tp", "4", "--decode-tp", "1"], capsys)
    one_line_error(code, err, "deployment.decode_tp = 1", "decode pool", "leaves no KV memory")


def test_bad_links_are_one_line_errors(tmp_path, capsys):
    code, _, err = run_cli(["simulate", *SMALL, "--link", "nvlink9"], capsys)
    one_line_error(code, err, "--link", "unknown link", "nvlink4")
    for bad in ("0", "-5"):
        code, _, err = run_cli(["simulate", *SMALL, "--link-gbs", bad], capsys)
        one_line_error(code, err, "--link-gbs", "> 0")
    toml = tmp_path / "pd.toml"
    toml.write_text('[deployment]\nlink = "ib-ndr"\nlink_gbs = 0\n')
    code, _, err = run_cli(["simulate", "--config", str(toml)], capsys)
    one_line_error(code, err, "deployment.link_gbs", "> 0")
    toml.write_text('[deployment]\nlink = "token-ring"\n')
    code, _, err = run_cli(["simulate", "--config", str(toml)], capsys)
    one_line_error(code, err, "deployment.link", "unknown link")


def test_replicas_and_seeds_do_not_mix_with_pools(capsys):
    code, _, err = run_cli(["simulate", *SMALL, "--replicas", "2", "--decode-replicas", "2"], capsys)
    one_line_error(code, err, "run.replicas", "deployment.prefill_replicas")
    code, _, err = run_cli(["simulate", *SMALL, "--seeds", "2", "--decode-replicas", "2"], capsys)
    one_line_error(code, err, "--seeds")


def test_each_pool_is_priced_as_the_same_replica_would_be_alone():
    """A pool's setup is the aggregated setup at that pool's TP: the same cost form (a GPU
    profile unless the roofline is asked for), KV blocks and seats."""
    from batchlab.experiments.config import build_config
    from batchlab.experiments.disaggregation.setup import pd_setup
    from batchlab.experiments.setup import sim_setup
    from batchlab.core.features import StepFeatures
    for hardware in ({"name": "h100-sxm"}, {"name": "h100-sxm", "cost": "roofline"},
                     {"name": "h100-sxm", "mem_efficiency": 0.7}):
        base = {"model": {"name": "llama-3-8b"}, "hardware": hardware}
        alone = sim_setup(build_config(base))
        pools = pd_setup(build_config({**base, "deployment": {"prefill_tp": 2, "decode_tp": 1}}))
        two = sim_setup(build_config({**base, "hardware": {**hardware, "tensor_parallel": 2}}))
        f = StepFeatures(64, 1, 2048, 63, 40_000, 40_000)
        for pool, ref in ((pools.decode, alone), (pools.prefill, two)):
            assert pool.meta.cost_model == ref.meta.cost_model and pool.blocks == ref.blocks
            assert pool.cost.step_time(f) == ref.cost.step_time(f)


def test_commands_that_do_not_run_pools_refuse_the_table(tmp_path, capsys):
    toml = tmp_path / "pd.toml"
    toml.write_text('[deployment]\ndecode_replicas = 2\n[run]\nslo = {ttft_ms = 1000.0, tpot_ms = 100.0}\n')
    code, _, err = run_cli(["capacity", "max-rate", "--config", str(toml)], capsys)
    one_line_error(code, err, "[deployment]", "batchlab simulate")
