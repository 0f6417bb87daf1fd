"""A GPU preset is priced by its GPU profile unless the roofline is asked for; the answer
says which profile, from what, its held-out error, and the defaults in force."""
from __future__ import annotations

import pytest

from batchlab.core.cost.gpu_form import GpuCostModel
from batchlab.core.cost.served.model import ServedGpuCost
from batchlab.core.cost.roofline import RooflineCostModel
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.errors import UserError
from batchlab.experiments.setup import sim_setup
from batchlab.experiments.setup.gpu import gpu_knobs, gpu_setup
from tests.helpers import cli, one_line_error

SMALL = ["--num-requests", "30", "--rate", "20", "--policy", "chunked"]


def config(**hardware) -> ExperimentConfig:
    return ExperimentConfig.model_validate({"model": {"name": "llama-3-70b"},
                                            "hardware": {"name": "h100-sxm", "tensor_parallel": 4, **hardware}})


def test_a_measured_preset_is_priced_by_its_shipped_profile():
    s = sim_setup(config())
    # the GPU form's kernels, as the served engine runs them (the default, experiments/setup/served.py)
    assert isinstance(s.cost, ServedGpuCost) and isinstance(s.cost.eager, GpuCostModel)
    assert s.meta.cost_model == "gpu profile"
    assert s.meta.gpu_profile == "shipped h100-sxm" and "MIT" in s.meta.gpu_profile_source
    assert s.meta.gpu_profile_heldout.startswith("median ") and "decode" in s.meta.gpu_profile_heldout
    assert s.meta.allreduces_per_step == 160 and s.meta.gpu_profile_scaled_from is None
    lines = s.assumptions()
    assert lines[0].startswith("assumptions: GPU profile shipped h100-sxm: ")
    assert any("held-out per-step error: median" in line for line in lines)


@pytest.mark.parametrize("hardware", [{"cost": "roofline"}, {"mem_efficiency": 0.7},
                                      {"allreduce_latency_s": 30e-6}])
def test_the_roofline_when_asked_for_or_one_of_its_constants_is_given(hardware):
    s = sim_setup(config(**hardware))
    assert isinstance(s.cost, RooflineCostModel) and s.meta.cost_model == "roofline"


def test_a_preset_without_data_says_it_is_scaled_from_the_nearest_measured_gpu():
    s = sim_setup(config(name="h200"))
    assert s.meta.gpu_profile == "shipped h100-sxm, scaled to h200" and s.meta.gpu_profile_scaled_from == "h100-sxm"
    text = "\n".join(s.assumptions())
    assert "no operator tables for h200" in text and "held-out per-step error on h100-sxm (none measured on h200)" in text


def test_knob_values_change_the_price_and_knobs_are_the_profiles():
    cfg = config()
    base, _, _ = gpu_setup(cfg)
    slow, _, _ = gpu_setup(cfg, {"step_s": 3e-3})
    from batchlab.core.features import StepFeatures
    f = StepFeatures(8, 0, 0, 8, 8000, 8000)
    assert slow.step_time(f) == pytest.approx(base.step_time(f) + 2e-3)
    # served (the default): the engine's own host time replaces the profile's step_s
    assert {k.name for k in gpu_knobs(cfg)} >= {"mem_efficiency", "compute_efficiency", "allreduce_scale"}
    assert "step_s" in {k.name for k in gpu_knobs(config(served_engine="none"))}
    with pytest.raises(UserError, match="unknown GPU profile constants"):
        gpu_setup(cfg, {"nonsense": 1.0})


def test_simulate_prints_the_profile_its_error_and_the_defaults_in_force():
    code, out, err = cli(["simulate", *SMALL, "--model", "llama-3-8b", "--hardware", "h100-sxm",
                          "--max-num-seqs", "64"])
    assert code == 0, err
    assert "assumptions: GPU profile shipped h100-sxm" in out and "held-out per-step error: median" in out
    assert "max_num_batched_tokens=8192 (chunked): not given, vLLM >= 0.9 API server's rule for h100-sxm" in out
    assert "max_num_seqs=" not in out.split("scheduler defaults:")[1].split(":")[0]  # seats were given
    assert "KV pool: gpu_memory_utilization 0.9 (vLLM's default)" in out


def test_a_gpu_profile_of_another_gpu_is_refused(tmp_path):
    code, _, err = cli(["simulate", *SMALL, "--hardware", "h100-sxm", "--gpu-profile", "a100-80gb"])
    one_line_error(code, err, "GPU profile a100-80gb (--gpu-profile) prices a100-80gb, not h100-sxm")
    (tmp_path / "p.json").write_text("{}")
    code, _, err = cli(["simulate", *SMALL, "--gpu-profile", str(tmp_path / "p.json")])
    one_line_error(code, err, "p.json", "not a batchlab GPU profile")


def test_knobs_in_the_config_reprice_and_are_recorded():
    base = sim_setup(config())
    changed = sim_setup(config(knobs={"mem_efficiency": 0.5}))
    from batchlab.core.features import StepFeatures
    f = StepFeatures(8, 0, 0, 8, 8000, 8000)
    assert changed.cost.step_time(f) > base.cost.step_time(f)
    assert changed.meta.knobs == {"mem_efficiency": 0.5} and base.meta.knobs is None
    with pytest.raises(UserError, match="knobs .* priced by the roofline"):
        sim_setup(config(knobs={"mem_efficiency": 0.5}, cost="roofline"))


def test_gpu_pricing_options_do_not_apply_with_a_calibration_profile():
    code, _, err = cli(["simulate", *SMALL, "--profile", "default", "--cost", "roofline"])
    one_line_error(code, err, "[hardware] cost does not apply to batchlab simulate --profile")


def test_the_all_reduce_line_says_measured_or_fallback():
    h100 = sim_setup(config())
    # by message size as vLLM on Hopper picks it, NCCL's measured table above (the served default)
    assert h100.meta.gpu_profile_allreduce == ("the engine's own below 8 MiB, symmetric memory (multimem) below "
                                               "32 MiB, else NCCL all-reduce measured on 4 GPUs (dgx)")
    kernels = sim_setup(config(served_engine="none"))
    assert kernels.meta.gpu_profile_allreduce == "NCCL all-reduce measured on 4 GPUs (dgx)"
    a40 = sim_setup(config(name="a40", tensor_parallel=4)).meta
    assert "no all-reduce measured" in a40.gpu_profile_allreduce
    assert "160 all-reduces a step, the engine's own below 8 MiB" in "\n".join(h100.assumptions())
