"""The knobs of a configuration's price (experiments/setup/knobs.py) and `capacity
--sensitivity` over them: every knob at each end, the answer's range."""
from __future__ import annotations

import json

import pytest

from batchlab.core.cost.knobs import Knob
from batchlab.experiments.cli import main
from batchlab.experiments.config import ExperimentConfig, build_config
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup import knobs as knobs_mod
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.setup.knobs import RATE, price_knobs, register, with_knobs
from batchlab.experiments.setup.served import served_knobs


def cfg(**hardware) -> ExperimentConfig:
    return build_config({"model": {"name": "llama-3-70b"}, "hardware": {"name": "h100-sxm", **hardware},
                         "workload": {"source": "chat", "num_requests": 100, "rate": 5.0}})


def test_the_roofline_knobs_with_their_ranges():
    ks = {k.name: k for k in price_knobs(cfg(tensor_parallel=4, cost="roofline"))}
    assert list(ks) == ["mem_efficiency", "compute_efficiency", "step_overhead_s", "allreduce_latency_s", RATE]
    assert ks["mem_efficiency"].value == 0.8 and ks["mem_efficiency"].high == pytest.approx(0.9)
    assert ks["allreduce_latency_s"].value == pytest.approx(45e-6) and ks["allreduce_latency_s"].high > 1e-4
    assert all(k.low <= k.value <= k.high for k in ks.values())
    assert ks["step_overhead_s"].source.startswith("assumed")
    assert price_knobs(cfg(tensor_parallel=4, step_overhead_s=0.003))[2].source.startswith("given")
    assert "allreduce_latency_s" not in {k.name for k in price_knobs(cfg(cost="roofline"))}  # TP 1
    assert RATE not in {k.name for k in price_knobs(cfg(cost="roofline"), traffic=False)}


def test_a_gpu_profile_prices_with_its_own_knobs():
    """A preset priced by its GPU profile: the profile's constants are the knobs, moved
    values travel in [hardware] knobs and reach the price."""
    from batchlab.core.cost.gpu_profile import load_gpu_profile
    base = cfg(tensor_parallel=4)
    profile = load_gpu_profile("h100-sxm")
    ks = {k.name: k for k in price_knobs(base)}
    # the profile's, less the host times the served engine's own replace, and the served terms
    served = {k.name for k in served_knobs("vllm")}
    own = {k.name for k in profile.knobs() if k.low != k.high} - {"step_s", "seq_s"}
    assert served and all(n.startswith("served_") for n in served) and set(ks) == own | served | {RATE}
    eff = ks["compute_efficiency"]
    assert eff.low < eff.value == profile.params["compute_efficiency"].value < eff.high
    moved = with_knobs(base, {"compute_efficiency": eff.low})
    assert moved.hardware.knobs == {"compute_efficiency": eff.low} and base.hardware.knobs == {}
    prefill = sim_setup(base).cost.step_time, sim_setup(moved).cost.step_time
    from batchlab.core.features import StepFeatures
    f = StepFeatures(num_seqs=1, num_prefill_seqs=1, prefill_tokens=4096, kv_tokens_read=4096,
                     attention_pairs=4096 * 4097 // 2)
    assert prefill[1](f) > prefill[0](f)  # a compute-bound step costs more at a lower efficiency
    assert price_knobs(moved)[[k.name for k in price_knobs(moved)].index("compute_efficiency")].value == eff.low
    with pytest.raises(UserError, match="GPU profile has no knob 'mem_efficiency_x'"):
        with_knobs(base, {"mem_efficiency_x": 1.0})


def test_a_knob_moved_moves_the_price():
    base = cfg(tensor_parallel=4, cost="roofline")
    moved = with_knobs(base, {"allreduce_latency_s": 1e-4, RATE: 1.5})
    assert moved.hardware.allreduce_latency_s == 1e-4 and moved.workload.rate_scale == 1.5
    assert base.hardware.allreduce_latency_s is None and base.workload.rate_scale == 1.0
    assert sim_setup(moved).meta.allreduce_latency_s == 1e-4
    with pytest.raises(UserError, match="no knob 'c_layer'"):
        with_knobs(base, {"c_layer": 1.0})


def test_a_registered_source_prices_first(monkeypatch):
    class Fitted:
        def applies(self, c):
            return c.hardware.name == "h100-sxm"

        def knobs(self, c):
            return [Knob("c_layer", 1e-5, 5e-6, 2e-5, "fitted")]

        def with_values(self, c, values):
            return c.model_copy(update={"hardware": c.hardware.model_copy(
                update={"step_overhead_s": values["c_layer"] * 100})}, deep=True)

    monkeypatch.setattr(knobs_mod, "SOURCES", list(knobs_mod.SOURCES))
    register(Fitted())
    assert [k.name for k in price_knobs(cfg())] == ["c_layer", RATE]
    assert with_knobs(cfg(), {"c_layer": 2e-5}).hardware.step_overhead_s == pytest.approx(2e-3)
    assert "c_layer" not in {k.name for k in price_knobs(cfg(name="a100-80gb"))}


def test_sensitivity_varies_every_knob_and_reports_the_range(capsys):
    args = ["capacity", "replicas", "--workload", "chat", "--num-requests", "200", "--rate", "30",
            "--policy", "chunked", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60", "--workers", "1",
            "--candidate", "llama-3-70b:4:h100-sxm", "--sensitivity", "--cost", "roofline"]
    assert main([*args, "--format", "json"]) == 0
    r = json.loads(capsys.readouterr().out)
    rows = r["sensitivity"]
    assert {(x["knob"], x["end"]) for x in rows} == {(k, e) for k in ("mem_efficiency", "compute_efficiency",
                                                     "step_overhead_s", "allreduce_latency_s", RATE)
                                                    for e in ("low", "high")}
    got = [x["answer"] for x in rows] + [r["answers"][0]["answer"]]
    slow = next(x for x in rows if x["knob"] == "compute_efficiency" and x["end"] == "low")["answer"]
    fast = next(x for x in rows if x["knob"] == "compute_efficiency" and x["end"] == "high")["answer"]
    assert slow >= r["answers"][0]["answer"] >= fast  # more replicas where compute is slower
    assert main(args) == 0
    out = capsys.readouterr().out
    lo, hi = min(got), max(got)
    assert lo < hi  # the knobs' ranges move this answer
    assert f"{lo}-{hi} replicas over the knobs" in out


def test_a_profiles_sizing_varies_the_traffic_and_max_rate_refuses(capsys):
    args = ["--profile", "default", "--workload", "chat", "--num-requests", "100", "--rate", "5",
            "--slo-ttft-ms", "5000", "--slo-tpot-ms", "500", "--workers", "1", "--sensitivity"]
    assert main(["capacity", "replicas", *args]) == 0
    out = capsys.readouterr().out
    assert "replicas over the knobs" in out and "    traffic_rate 1 (the traffic forecast" in out
    assert "mem_efficiency" not in out.split("sensitivity (")[1]
    assert main(["capacity", "max-rate", *args]) == 2
    assert "a --profile has none" in capsys.readouterr().err


# Physical bounds of knobs given by hand (issue 46 item 1): [hardware] knobs pass the
# bounds the plain fields have; an efficiency above 1 beats the datasheet, a link of 0 GB/s
# makes the collectives of several GPUs free.
@pytest.mark.parametrize("knob, value, expected", [
    ("mem_efficiency", 5.0, "mem_efficiency = 5.0: expected a share of the datasheet figure > 0 and <= 1"),
    ("compute_efficiency", 1e9, "compute_efficiency = 1000000000.0: expected a share"),
    ("attn_kv_efficiency", 0.0, "attn_kv_efficiency = 0.0"),
    ("step_s", 5.0, "step_s = 5.0: expected a fixed cost in seconds from 0 to 1"),
    ("gemm_tile_tokens", 0.5, "gemm_tile_tokens = 0.5: expected a whole tile"),
    ("ridge_k", 1e12, "ridge_k = 1000000000000.0: expected a finite number > 0 and <= 1000"),
])
def test_knobs_beyond_their_physical_bounds_are_refused(knob, value, expected):
    with pytest.raises(UserError, match=f"knobs: GPU profile constant {expected}"):
        sim_setup(cfg(tensor_parallel=4, knobs={knob: value}))
    sim_setup(cfg(tensor_parallel=4, knobs={knob: {"mem_efficiency": 0.9, "compute_efficiency": 0.7, "attn_kv_efficiency": 0.5,
                                "step_s": 0.003, "gemm_tile_tokens": 64.0, "ridge_k": 3.0}[knob]}))


def test_cli_knob_above_one_and_a_boolean_knob_are_one_line(tmp_path):
    from tests.helpers import cli, one_line_error
    for line, words in (("mem_efficiency = 5.0", ("mem_efficiency = 5.0", "<= 1")),
                        ("step_s = true", ("hardware.knobs.step_s", "boolean"))):
        p = tmp_path / "k.toml"
        p.write_text(f'[workload]\nnum_requests = 10\n[hardware]\nname = "a100-80gb"\n[hardware.knobs]\n{line}\n')
        code, _, err = cli(["simulate", "--config", str(p)])
        one_line_error(code, err, *words)


def test_every_shipped_profiles_knob_range_stays_within_bounds():
    from batchlab.core.cost.gpu_profile import knob_bound, load_gpu_profile, shipped_gpu_profiles
    for name in shipped_gpu_profiles():
        p = load_gpu_profile(name)
        for k in p.knobs():
            lo, hi, _ = knob_bound(k.name, k.value)
            assert lo <= k.low <= k.value <= k.high <= hi, (name, k)
            p.with_values({k.name: k.low}), p.with_values({k.name: k.high})  # sensitivity's ends are accepted


@pytest.mark.parametrize("layout", [{"tensor_parallel": 8}, {"pipeline_parallel": 2}, {"tensor_parallel": 2, "cost": "roofline"}])
def test_a_zero_link_between_gpus_is_refused(layout):
    def small(**hw):
        return build_config({"model": {"name": "llama-3-8b"}, "hardware": {"name": "h100-sxm", **hw},
                             "workload": {"source": "chat", "num_requests": 100, "rate": 5.0}})
    with pytest.raises(Exception, match="interconnect_gbs = 0 .*collectives would be free"):
        small(interconnect_gbs=0, **layout)
    sim_setup(small(interconnect_gbs=0))  # one GPU: no link needed
    sim_setup(small(interconnect_gbs=100, **layout))


@pytest.mark.parametrize("field", ["mem_bandwidth_gbs", "interconnect_gbs", "bf16_tflops", "memory_gib"])
def test_datasheet_figures_beyond_any_gpu_are_refused(field):
    with pytest.raises(Exception, match=f"{field}.*less than or equal"):
        cfg(tensor_parallel=4, **{field: 1e30})
    cfg(tensor_parallel=4, **{field: 1000.0})
