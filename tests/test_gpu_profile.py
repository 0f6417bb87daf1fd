"""The GPU profile (core/cost/gpu_profile.py): shipped ones load and price their preset, a bad
document is one line naming the field, knobs carry every constant with a range around it,
and a preset without data is priced from the nearest measured GPU, saying so."""
from __future__ import annotations

import json

import pytest

from batchlab.core.features import StepFeatures
from batchlab.core.cost.gpu_form import GpuCostParams
from batchlab.core.cost.gpu_profile import GpuProfileError, load_gpu_profile, parse_gpu_profile, scaled_to, shipped_gpu_dir, shipped_gpu_profiles
from batchlab.core.model.hardware import HARDWARE
from batchlab.core.model.presets import MODELS
from tests.operator_tables import shared_vidur



def test_every_measured_gpu_ships_a_profile_that_prices_its_preset():
    assert shipped_gpu_profiles() == ["a100-80gb", "a40", "h100-sxm"]
    decode = StepFeatures(32, 0, 0, 32, 32 * 1000, 32 * 1000)
    times = {}
    for name in shipped_gpu_profiles():
        p = load_gpu_profile(name)
        assert p.gpu == name and "MIT" in p.source and p.scaled_from is None
        assert p.heldout.overall.n > 1000 and set(p.heldout.by_region) == {"decode", "ridge", "prefill"}
        times[name] = p.cost(MODELS["llama-2-70b"], 4, HARDWARE[name]).step_time(decode)
    assert times["h100-sxm"] < times["a100-80gb"] < times["a40"]  # bandwidth 3.35, 2.04, 0.70 TB/s


def test_knobs_cover_every_constant_with_a_range_around_its_value():
    p = load_gpu_profile("a100-80gb")
    knobs = p.knobs()
    assert [k.name for k in knobs] == list(GpuCostParams.names())
    for k in knobs:
        assert k.low < k.value < k.high or (k.low <= k.value <= k.high and k.value < 1e-12), k
        assert "a100-80gb GPU profile" in k.source
    mem = next(k for k in knobs if k.name == "mem_efficiency")
    assert (mem.high - mem.low) / mem.value >= 2 * p.heldout.overall.median * (1 - 1e-9)  # the held-out error at least
    step = next(k for k in knobs if k.name == "step_s")
    assert step.source.startswith("assumed") and step.ends() == (0.3e-3, 3e-3)


def test_changed_values_change_the_price():
    p = load_gpu_profile("h100-sxm")
    f = StepFeatures(8, 0, 0, 8, 8000, 8000)
    base = p.cost(MODELS["llama-3-8b"], 1, HARDWARE["h100-sxm"]).step_time(f)
    slower = p.with_values({"mem_efficiency": p.params["mem_efficiency"].value / 2})
    assert slower.cost(MODELS["llama-3-8b"], 1, HARDWARE["h100-sxm"]).step_time(f) > 1.5 * base
    with pytest.raises(ValueError, match="unknown GPU profile constants"):
        p.with_values({"efficiency": 1.0})


def test_a_preset_without_data_is_scaled_from_a_measured_one():
    h100 = load_gpu_profile("h100-sxm")
    h200 = scaled_to(h100, HARDWARE["h100-sxm"], HARDWARE["h200"])
    assert h200.gpu == "h200" and h200.scaled_from.gpu == "h100-sxm"
    assert h200.scaled_from.bandwidth_ratio == pytest.approx(4.8 / 3.35, rel=1e-3)
    assert h200.collectives.allreduce == h100.collectives.allreduce  # NVLink 4 on both
    assert "scaled from h100-sxm" in h200.assumptions[0]
    f = StepFeatures(16, 0, 0, 16, 16000, 16000)  # decode: memory-bound, faster by the bandwidth
    t100 = h100.cost(MODELS["llama-3-8b"], 1, HARDWARE["h100-sxm"]).step_time(f)
    t200 = h200.cost(MODELS["llama-3-8b"], 1, HARDWARE["h200"]).step_time(f)
    assert t200 < t100
    l4 = scaled_to(load_gpu_profile("a40"), HARDWARE["a40"], HARDWARE["l4"])
    assert l4.collectives == load_gpu_profile("a40").collectives  # PCIe 4 on both
    nvlink_to_pcie = scaled_to(load_gpu_profile("a100-80gb"), HARDWARE["a100-80gb"], HARDWARE["l4"])
    assert nvlink_to_pcie.collectives.allreduce == {}
    assert nvlink_to_pcie.collectives.bandwidth == HARDWARE["l4"].interconnect_bandwidth
    assert "l4's datasheet interconnect" in nvlink_to_pcie.collectives.fallback


def document(name="a100-80gb") -> dict:
    return json.loads((shipped_gpu_dir() / f"{name}.json").read_text())


@pytest.mark.parametrize("change, expected", [
    (lambda d: d.update(format="batchlab-profile"), 'not a batchlab GPU profile'),
    (lambda d: d.update(version=3), "GPU profile version 3"),
    (lambda d: d["params"].pop("ridge_k"), "missing ['ridge_k']"),
    (lambda d: d["params"]["mem_efficiency"].update(value=-0.5), "params.mem_efficiency.value"),
    (lambda d: d["collectives"]["allreduce"]["2"].reverse(), "sizes must increase"),
    (lambda d: d.update(colour="red"), "bad GPU profile field colour"),
])
def test_a_bad_document_is_one_line_naming_its_field(change, expected):
    d = document()
    change(d)
    with pytest.raises(GpuProfileError) as e:
        parse_gpu_profile(json.dumps(d), "p.json")
    assert expected in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("p.json: ")


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(GpuProfileError, match="GPU profile not found .* a100-80gb, a40, h100-sxm"):
        load_gpu_profile(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(GpuProfileError, match="not a JSON document"):
        load_gpu_profile(tmp_path / "bad.json")


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["a100-80gb"])
def test_the_shipped_profile_is_what_the_shared_data_fits(gpu):
    """Refitting on ../shared/gpu-profiles gives the shipped constants (the file is the code's)."""
    root = shared_vidur()
    from batchlab.calibration.operators.build import build_profile
    built = build_profile(root, gpu, judge=False)
    shipped = load_gpu_profile(gpu)
    for name, p in built.profile.params.items():
        assert p.value == pytest.approx(shipped.params[name].value, rel=1e-6, abs=1e-15), name
