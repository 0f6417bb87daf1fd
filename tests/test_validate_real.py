"""`batchlab validate --real DIR --profile P`: a profile judged on stored real runs without
serving again. Re-judged with the profile that validated them, the stored runs give
validate's own errors exactly (the simulation is deterministic); another profile gives
other errors; broken stores are one-line errors (exit 2)."""
from __future__ import annotations

import json
import math
import shutil

import pytest

pytest.importorskip("torch")

from tests.helpers import cli  # noqa: E402


def rejudged(args: list[str]) -> dict:
    code, out, err = cli(["validate", "--real", *args, "--format", "json"])
    assert code == 0, err
    return json.loads(out)


def test_the_validating_profile_gives_validates_own_errors(validated, profile_file):
    out, _ = validated
    comp = {c["policy"]: c for c in json.loads((out / "comparison.json").read_text())["cells"]}
    got = rejudged([str(out), "--profile", str(profile_file)])
    assert [c["policy"] for c in got["cells"]] == list(comp)
    for cell in got["cells"]:
        want = {m["key"]: m for m in comp[cell["policy"]]["metrics"]}
        judged = [m for m in cell["metrics"] if m["target"] is not None]
        assert len(judged) >= 13
        for m in judged:
            w = want[m["key"]]
            if w["real"][0] is None or not math.isfinite(w["real"][0]):
                continue
            assert m["real"] == [pytest.approx(w["real"][0])]
            assert m["sim"] == pytest.approx(w["sim"], rel=1e-9)
            for field in ("error", "error_normalised"):  # the normalised variant too, at the stored speed
                if w[field] is not None and math.isfinite(w[field]):
                    assert m[field] == pytest.approx(w[field], abs=1e-12)
            assert (m["verdict"], m["verdict_normalised"]) == (w["verdict"], w["verdict_normalised"])
        # the machine speed as this profile prices the stored steps: as validate measured it
        stored = json.loads((out / cell["policy"] / "real" / "meta.json").read_text())["machine_speed"]
        assert cell["machine_speed"][0]["factor"] == pytest.approx(stored["factor"])
    ps = got["per_step"]  # one stored run a policy: every step priced, no pair to compare
    assert ps["steps"] > 0 and ps["pairs"] == 0 and ps["met"] is None
    t = got["totals"]
    # judged: every targeted number of a stable run (a run this noisy VM overloads is flagged, not judged)
    stable = [m for c in got["cells"] for m in c["metrics"]
              if m["target"] is not None and m["verdict"] != "overloaded" and math.isfinite(m["error"])]
    assert t["judged"] == len(stable)
    for c in got["cells"]:
        flagged = "overloaded" in c["stability"]["real"] or c["stability"]["sim"] == "overloaded"
        # an overloaded run's latencies are flagged, not judged; throughput is judged all the same
        assert {m["verdict"] == "overloaded" for m in c["metrics"]
                if m["target"] is not None and m["key"].endswith("_ms")} == {flagged}
        assert not any(m["verdict"] == "overloaded" for m in c["metrics"] if not m["key"].endswith("_ms"))
    assert 0 <= t["within"] <= t["judged"] and 0 <= t["faster"] <= t["latency"]


def test_another_profile_gives_other_errors(validated, profile_file, tmp_path):
    from batchlab.core.cost.profile import load_profile

    out, _ = validated
    slow = load_profile(profile_file)
    # 1 ms more a step, added rather than multiplied: a fit can leave the fixed term at its
    # bound of 0 (a suite run fitted step_s = 3e-32 s), which no factor makes slower.
    cost = slow.cost.model_copy(update={"overhead_s": slow.cost.overhead_s + 1e-3})
    update = {"cost": cost}
    if slow.gpu_form is not None:  # a profile priced by the GPU form (core/cost/cpu_form.py): its step cost
        g = slow.gpu_form
        update["gpu_form"] = g.model_copy(update={"step_s": g.step_s.model_copy(update={"value": g.step_s.value + 1e-3})})
    slow = slow.model_copy(update=update)
    path = tmp_path / "slow.json"
    slow.save(path)
    base = rejudged([str(out), "--profile", str(profile_file)])
    other = rejudged([str(out), "--profile", str(path)])
    for a, b in zip(base["cells"], other["cells"]):
        ea = {m["key"]: m["error"] for m in a["metrics"]}
        eb = {m["key"]: m["error"] for m in b["metrics"]}
        assert eb["mean_e2el_ms"] > ea["mean_e2el_ms"]  # a slower profile predicts slower runs


def test_the_table_and_the_out_file(validated, profile_file, tmp_path):
    out, _ = validated
    code, text, err = cli(["validate", "--real", str(out), "--profile", str(profile_file),
                           "--out", str(tmp_path / "o")])
    assert code == 0, err
    assert "[continuous]" in text and "[chunked]" in text and "within target raw" in text
    assert "Per step: the profile's median |error|" in text
    saved = json.loads((tmp_path / "o" / "rejudged.json").read_text())
    t = saved["totals"]
    assert len(saved["cells"]) == 2 and t["judged"] + t["verdicts"].get("overloaded", 0) > 0
    assert f"within target raw {t['within']}/{t['judged']}" in text.replace("\n    ", " ")  # they agree
    assert max(len(line) for line in text.splitlines()) <= 120  # as every source's report


def test_broken_stores_are_one_line_errors(validated, profile_file, tmp_path):
    out, _ = validated
    code, _, err = cli(["validate", "--real", str(out)])
    assert code == 2 and "needs --profile" in err and err.strip().count("\n") == 0
    code, _, err = cli(["validate", "--real", str(out), "--profile", str(profile_file), "--rate", "3"])
    assert code == 2 and "--rate" in err and "not with --real" in err
    code, _, err = cli(["validate", "--real", str(tmp_path), "--profile", str(profile_file)])
    assert code == 2 and "no config.json" in err and err.strip().count("\n") == 0
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    meta = broken / "continuous" / "real" / "meta.json"
    m = json.loads(meta.read_text())
    meta.write_text(json.dumps({k: v for k, v in m.items() if k != "scheduler"}))
    code, _, err = cli(["validate", "--real", str(broken), "--profile", str(profile_file)])
    assert code == 2 and "records no scheduler settings" in err and err.strip().count("\n") == 0
    meta.write_text(json.dumps({**m, "model": "batchlab-small"}))
    code, _, err = cli(["validate", "--real", str(broken), "--profile", str(profile_file)])
    assert code == 2 and "but profile" in err and err.strip().count("\n") == 0
    meta.write_text(json.dumps({**m, "num_kv_blocks": "many"}))
    code, _, err = cli(["validate", "--real", str(broken), "--profile", str(profile_file)])
    assert code == 2 and "real/meta.json: num_kv_blocks is 'many'" in err and err.strip().count("\n") == 0
    meta.write_text(json.dumps({**m, "block_size": 2**24}))  # a whole number, past the bound
    code, _, err = cli(["validate", "--real", str(broken), "--profile", str(profile_file)])
    assert code == 2 and "real/meta.json: scheduler" in err and "block_size" in err \
        and err.strip().count("\n") == 0
    meta.write_text(json.dumps(m))
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "workload": {**config["workload"],
                                                                            "num_requests": 5}}))
    code, _, err = cli(["validate", "--real", str(broken), "--profile", str(profile_file)])
    assert code == 2 and "does not rebuild the requests" in err and err.strip().count("\n") == 0
    (broken / "config.json").write_text(json.dumps(config))
    (broken / "chunked" / "real" / "steps.csv").write_text("start_s,duration_s\n1,x\n")
    code, _, err = cli(["validate", "--real", str(broken), "--profile", str(profile_file)])
    assert code == 2 and "steps.csv" in err and err.strip().count("\n") == 0, err


def test_other_settings_warn_once_and_a_broken_profile_is_reported_first(validated, profile_file, tmp_path):
    out, _ = validated
    other = tmp_path / "other"
    shutil.copytree(out, other)
    for meta in other.glob("*/real/meta.json"):
        m = json.loads(meta.read_text())
        meta.write_text(json.dumps({**m, "threads": m["threads"] + 1}))
    code, _, err = cli(["validate", "--real", str(other), "--profile", str(profile_file), "--format", "json"])
    warnings = [line for line in err.splitlines() if "thread(s), but profile" in line]
    assert code == 0 and len(warnings) == 1 and "warning" in warnings[0]  # one warning for both runs
    (other / "config.json").unlink()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = cli(["validate", "--real", str(other), "--profile", str(bad)])
    assert code == 2 and "bad.json" in err and "config.json" not in err and err.strip().count("\n") == 0


def test_every_stored_run_of_a_policy_has_its_scheduler_read(validated, profile_file, tmp_path):
    """A second run's settings are checked too: broken, or other than the first run's, is a
    one-line error naming that run, not a judgement against the first run's settings."""
    out, _ = validated
    two = tmp_path / "two"
    shutil.copytree(out, two)
    shutil.copytree(two / "continuous" / "real", two / "continuous" / "real_2")
    meta = two / "continuous" / "real_2" / "meta.json"
    m = json.loads(meta.read_text())
    assert rejudged([str(two), "--profile", str(profile_file)])["cells"][0]["runs"] == 2
    meta.write_text(json.dumps({**m, "scheduler": {**m["scheduler"], "max_num_seqs": "lots"}}))
    code, _, err = cli(["validate", "--real", str(two), "--profile", str(profile_file)])
    assert code == 2 and "real_2/meta.json: scheduler: max_num_seqs" in err and err.strip().count("\n") == 0
    meta.write_text(json.dumps({**m, "scheduler": {**m["scheduler"], "max_num_seqs": 3}}))
    code, _, err = cli(["validate", "--real", str(two), "--profile", str(profile_file)])
    assert code == 2 and "real_2/meta.json: scheduler settings differ" in err and err.strip().count("\n") == 0


def test_a_pool_no_machine_holds_is_refused(validated, profile_file, tmp_path):
    """A stored num_kv_blocks of 10^12 ran silently: a real run's pool is refused beyond its
    device's memory, a stored one beyond any machine's (issue 46 item 1)."""
    out, _ = validated
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    meta = broken / "continuous" / "real" / "meta.json"
    m = json.loads(meta.read_text())
    assert m["kv_bytes_per_token"] > 0 and m["num_kv_blocks"] * m["block_size"] * m["kv_bytes_per_token"] < 2**46
    meta.write_text(json.dumps({**m, "num_kv_blocks": 10**12}))
    code, _, err = cli(["validate", "--real", str(broken), "--profile", str(profile_file)])
    assert code == 2 and "real/meta.json: num_kv_blocks 1,000,000,000,000 of" in err and "no machine" in err \
        and err.strip().count("\n") == 0, err
