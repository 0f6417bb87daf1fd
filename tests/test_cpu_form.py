"""The CPU backend priced by the GPU form (core/cost/cpu_form.py) and its calibration
(calibration/fit/gpu_form.py): the fit recovers the constants of steps the form itself
priced, a decode run equals its steps bit for bit, profiles of every version price as
their form says (older ones exactly as before), and bad input is refused in one line."""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.calibration.fit.gpu_form import fit_cpu_form
from batchlab.calibration.sweep.grid import default_grid, features_of
from batchlab.calibration.fit.both_forms import refit
from batchlab.core.cost.cpu_form import cpu_form, cpu_gpu_params, CpuExtras, CpuFormModel
from batchlab.core.features import StepFeatures
from batchlab.core.cost.fitted import FittedCostModel, Shape
from batchlab.core.cost.profile import load_profile, Measurement, parse_profile, ProfileError
from batchlab.core.model.presets import MODELS

TINY = MODELS["batchlab-tiny"]
READ, FLOPS = 30e9, 90e9  # a machine's measured figures
TRUE = {"mem_efficiency": 0.6, "compute_efficiency": 1.2, "ridge_k": 4.0, "attn_kv_efficiency": 0.2,
        "attn_pair_efficiency": 0.5, "step_s": 2e-3, "seq_s": 5e-5}
EXTRAS = CpuExtras(chunk_s=3e-4, masked_pair_share=0.7, small_rows=(2e-4, -1e-4, 3e-4, -4e-4))


def model(extras: CpuExtras = EXTRAS, spec=TINY) -> CpuFormModel:
    return cpu_form(spec, cpu_gpu_params(TRUE), READ, FLOPS, extras)


def synthetic(m: CpuFormModel) -> list[Measurement]:
    """The default grid's steps priced by m, one in four held out (as the sweep does)."""
    grid = default_grid()
    held = grid.heldout()
    out = []
    for p in grid.points:
        f = features_of(p)
        out.append(Measurement(point=p.key, region=p.region, features=dict(f._asdict()), median_s=m.step_time(f),
                               mad_s=0.0, reps=1, heldout=p.key in held))
    return out


@pytest.mark.parametrize("spec", ["batchlab-tiny", "batchlab-small"])
def test_the_fit_recovers_the_constants_of_steps_the_form_priced(spec):
    rows = (2e-4, -1e-4, 3e-4, -4e-4, 1e-4, 0.0, -2e-4, 1e-4)  # sums to zero over rows 1-8
    truth = model(CpuExtras(chunk_s=3e-4, masked_pair_share=0.7, small_rows=rows), MODELS[spec])
    f = fit_cpu_form(MODELS[spec], synthetic(truth), READ, FLOPS)
    assert f.pinned == {}  # mem_efficiency separable: the ridge is not a sum
    for name, v in TRUE.items():
        assert f.values[name] == pytest.approx(v, rel=1e-3), name
    assert f.values["chunk_s"] == pytest.approx(3e-4, rel=1e-3)
    assert f.values["masked_pair_share"] == pytest.approx(0.7, rel=1e-3)
    assert f.model.extras.small_rows == pytest.approx(rows, abs=1e-7)
    assert f.rms_log < 1e-5 and f.quality.heldout.median_ape < 1e-3
    assert all(np.isfinite(list(f.stderr.values())))


def test_a_ridge_that_fits_to_a_sum_pins_the_weight_read_to_the_measured_bandwidth():
    truth = cpu_form(TINY, cpu_gpu_params({**TRUE, "ridge_k": 1.0, "mem_efficiency": 1.0}), READ, FLOPS, EXTRAS)
    f = fit_cpu_form(TINY, synthetic(truth), READ, FLOPS)
    assert f.pinned == {"mem_efficiency": 1.0} and "mem_efficiency" not in f.values
    assert f.values["ridge_k"] == pytest.approx(1.0, abs=1e-3)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 64), kv=st.integers(0, 5000), m=st.integers(0, 40), prefill=st.integers(0, 3),
       ctx=st.sampled_from(["steady", "after_prefill", "after_idle"]),
       steady_s=st.floats(-1e-3, 1e-3), masked=st.integers(0, 500))
def test_a_decode_run_equals_its_steps_bit_for_bit(n, kv, m, prefill, ctx, steady_s, masked):
    cost = model(CpuExtras(chunk_s=3e-4, masked_pair_share=0.7, after_prefill_s=4e-4, after_idle_s=6e-4,
                           steady_s=steady_s, small_rows=(2e-4, -1e-4, 3e-4)))
    first = StepFeatures(n, 0, 0, n, kv, kv, after_prefill=int(ctx == "after_prefill"),
                         after_idle=int(ctx == "after_idle"), masked_pairs=masked if prefill else 0)
    run = cost.decode_run_times(first, m)
    assert len(run) == m
    for i in range(m):
        f = first if i == 0 else StepFeatures(n, 0, 0, n, kv + i * n, kv + i * n, masked_pairs=first.masked_pairs)
        assert run[i] == cost.step_time(f)  # bit for bit


def test_an_empty_step_is_free_and_the_extras_add_on_top_of_the_gpu_form():
    cost = model()
    assert cost.step_time(StepFeatures(0, 0, 0, 0, 0, 0)) == 0.0
    f = StepFeatures(1, 1, 3, 0, 3, 6, masked_pairs=10)
    bare = model(CpuExtras()).step_time(f)
    extra = 3e-4 + 0.7 * cost.pair_s * 10 + 3e-4  # a chunk, masked pairs, 3 rows' correction
    assert cost.step_time(f) == pytest.approx(bare + extra, rel=1e-12)


@pytest.mark.parametrize("name", ["batchlab-tiny-cpu", "batchlab-small-cpu"])
def test_older_profiles_load_and_price_exactly_as_before(name):
    p = load_profile(name)
    assert p.version < 6 and p.form == "fitted" and p.gpu_form is None
    c = p.cost
    before = FittedCostModel(Shape.of(p.model), c.overhead_s, c.per_seq_s, c.per_chunk_s, c.s_per_weight_byte,
                             c.s_per_flop, c.s_per_kv_byte, c.s_per_attn_flop, tuple(c.small_rows), c.combine,
                             c.after_prefill_s, c.after_idle_s, c.s_per_masked_flop, c.steady_s)
    now = p.cost_model()
    assert isinstance(now, FittedCostModel)
    for m in p.measurements or []:
        f = StepFeatures(**m.features)
        assert now.step_time(f) == before.step_time(f)


def test_a_refitted_profile_carries_both_forms_and_round_trips(tmp_path):
    base = load_profile("batchlab-small-cpu")
    for form, kind in (("gpu", CpuFormModel), ("fitted", FittedCostModel)):
        p = parse_profile(_refitted()).model_copy(update={"form": form})
        p.save(tmp_path / "p.json")
        back = load_profile(tmp_path / "p.json")
        assert back.version == 6 and isinstance(back.cost_model(), kind)
        assert isinstance(back.fitted_cost_model(), FittedCostModel)
        for m in base.measurements:
            f = StepFeatures(**m.features)
            assert back.cost_model().step_time(f) == p.cost_model().step_time(f)


def test_what_if_factors_scale_the_sides_they_name():
    p = parse_profile(_refitted())
    f = StepFeatures(8, 0, 0, 8, 4000, 4000)
    base = p.cost_model()
    assert p.cost_model(bandwidth=0.5, flops=0.25, overhead=2.0).step_time(f) == pytest.approx(
        base.at_speed(2.0, 4.0).step_time(f), rel=1e-9)
    assert p.cost_model(overhead=2.0).step_time(f) > base.step_time(f)


@functools.cache
def _refitted() -> str:
    return refit(load_profile("batchlab-small-cpu"), "gpu").model_dump_json()


def _doc(**change) -> str:
    d = json.loads(_refitted())
    for path, v in change.items():
        node = d
        *head, last = path.split(".")
        for k in head:
            node = node[k]
        node[last] = v
    return json.dumps(d)


@pytest.mark.parametrize("change, words", [
    ({"gpu_form": None}, "gpu_form"),
    ({"gpu_form.ridge_k.value": 0.5}, "ridge_k"),
    ({"gpu_form.compute_efficiency.value": -1.0}, "compute_efficiency"),
    ({"gpu_form.read_bandwidth": 0}, "read_bandwidth"),
    ({"form": "roofline"}, "form"),
])
def test_a_bad_gpu_form_is_one_line_naming_the_field(change, words):
    with pytest.raises(ProfileError) as e:
        parse_profile(_doc(**change), "p.json")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("p.json") and words in msg


def test_bad_fit_input_is_refused():
    ms = synthetic(model())
    with pytest.raises(ValueError, match="measure more"):
        fit_cpu_form(TINY, ms[:5], READ, FLOPS)
    bad = [m.model_copy(update={"median_s": 0.0}) if i == 0 else m for i, m in enumerate(ms)]
    with pytest.raises(ValueError, match="not positive"):
        fit_cpu_form(TINY, bad, READ, FLOPS)
    with pytest.raises(ValueError, match="read bandwidth"):
        fit_cpu_form(TINY, ms, 0.0, FLOPS)
    with pytest.raises(ValueError, match="missing"):
        cpu_gpu_params({"step_s": 1.0})


@pytest.mark.parametrize("k", [1.0, 5.0])
def test_the_serving_refit_recovers_served_levels_and_terms_of_the_gpu_form(k):
    """Exactly where the ridge is a sum (the form is then linear in the two sides' levels,
    as refine's split assumes); to first order in the levels' change otherwise."""
    from batchlab.calibration.fit.served_steps import refine
    base = cpu_form(TINY, cpu_gpu_params({**TRUE, "ridge_k": k}), READ, FLOPS, EXTRAS)
    rng = np.random.default_rng(0)
    feats = []
    for i in range(240):
        if i % 3 == 0:
            c = int(rng.integers(1, 300))
            feats.append(StepFeatures(1, 1, c, 0, c, c * (c + 1) // 2, after_prefill=i % 2, masked_pairs=c))
        else:
            n, kv = int(rng.integers(1, 16)), int(rng.integers(16, 4000))
            feats.append(StepFeatures(n, 0, 0, n, kv, kv, after_prefill=int(i % 7 == 0), after_idle=int(i % 11 == 0)))
    truth = base.at_speed(1.3, 1.1).with_terms(base.per_chunk_s + 1e-4, base.per_seq_s, 5e-4, 7e-4, -2e-4)
    y = np.array([truth.step_time(f) for f in feats])
    refined, levels = refine(base, feats, y)
    exact = k == 1.0
    assert (levels.memory, levels.compute) == pytest.approx((1.3, 1.1), rel=1e-6 if exact else 1e-2)
    if exact:
        assert (refined.after_prefill_s, refined.after_idle_s, refined.steady_s) == pytest.approx(
            (5e-4, 7e-4, -2e-4), rel=1e-6)
    errors = [refined.step_time(f) / truth.step_time(f) - 1 for f in feats]
    assert np.median(np.abs(errors)) < (1e-9 if exact else 1e-2)
    for f in feats[:20]:
        mem, comp = base.parts(f)
        assert mem + comp == pytest.approx(base.swept().step_time(f._replace(after_prefill=0, after_idle=0)), rel=1e-9)


def test_from_run_refines_both_forms_of_a_profile_and_keeps_its_form(tmp_path, capsys):
    from batchlab.core.cost.cpu_form_params import GpuFormParams
    from tests.helpers import run_cli
    from tests.test_calibrate_from_run import served_dir
    base = cpu_form(TINY, cpu_gpu_params({**TRUE, "ridge_k": 1.0}), READ, FLOPS, CpuExtras(chunk_s=1e-4))
    truth = base.at_speed(1.2, 1.1).with_terms(1e-4, TRUE["seq_s"], 6e-4, 1.2e-3, 0.0)
    d = served_dir(tmp_path / "runs", truth=truth)
    prof = tmp_path / "p.json"
    from tests.profiles import make_profile
    make_profile(version=6, form="gpu", gpu_form=GpuFormParams.of(base, {}, {}, None)).save(prof)
    code, text, err = run_cli(["calibrate", "--from-run", str(d), "--profile", str(prof), "--out",
                               str(tmp_path / "o.json"), "--format", "json"], capsys)
    assert code == 0, err
    out = load_profile(tmp_path / "o.json")
    assert out.form == "gpu" and isinstance(out.cost_model(), CpuFormModel)
    assert isinstance(out.fitted_cost_model(), FittedCostModel)  # the fitted form refined alongside
    assert json.loads(text)["heldout"]["all"]["median_ape"] < 0.5  # the GPU form judged, and exact
    assert out.gpu_form.after_idle_s.value == pytest.approx(1.2e-3, rel=0.05)


@pytest.mark.parametrize("change", [{"num_experts": 8, "experts_per_token": 2, "expert_intermediate_size": 256,
                                     "moe_layers": 6}, {"layer_windows": (64, 0, 64, 0, 64, 0)}])
def test_a_model_the_gpu_forms_shapes_do_not_cover_is_refused_in_one_line(change):
    spec = TINY.model_copy(update=change)
    with pytest.raises(ValueError, match="dense full-attention") as e:
        fit_cpu_form(spec, synthetic(model()), READ, FLOPS)
    assert "\n" not in str(e.value)


def test_at_a_measured_speed_without_a_compute_factor_flops_stay_as_priced():
    """The CostForm contract (core/cost/form.py): compute None is the compute side as priced."""
    cost = model()
    prefill = StepFeatures(1, 1, 512, 0, 512, 512 * 513 // 2)
    assert cost.at_speed(2.0).step_time(prefill) == cost.at_speed(2.0, 1.0).step_time(prefill)
    assert cost.at_speed(2.0).step_time(prefill) < cost.at_speed(2.0, 2.0).step_time(prefill)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 64), chunk=st.integers(0, 600), kv=st.integers(0, 6000), k=st.floats(1.0, 30.0),
       ap=st.integers(0, 1))
def test_the_two_sides_add_up_to_the_price_without_context(n, chunk, kv, k, ap):
    """parts() splits a step by Euler's theorem: memory + compute = the price without its
    context terms, each side non-negative (compute ~0 on a memory-bound decode of a sharp ridge)."""
    cost = cpu_form(TINY, cpu_gpu_params({**TRUE, "ridge_k": k}), READ, FLOPS, EXTRAS)
    f = StepFeatures(n + (1 if chunk else 0), 1 if chunk else 0, chunk, n, kv + chunk, kv + chunk * (chunk + 1) // 2,
                     after_prefill=ap, masked_pairs=chunk)
    mem, comp = cost.parts(f)
    assert mem + comp == pytest.approx(cost.swept().step_time(f._replace(after_prefill=0)), rel=1e-9)
    assert comp >= 0 and mem > 0
    if chunk >= 256:  # a long chunk's GEMMs and attention are compute-bound
        assert comp > 0.1 * (mem + comp)


def test_with_noisy_timings_the_constants_land_within_their_standard_errors():
    """2% log-normal noise on every step (a seeded draw): the well-determined constants
    come back within 4 standard errors, and the errors are not vanishingly small."""
    rng = np.random.default_rng(7)
    ms = [m.model_copy(update={"median_s": m.median_s * float(np.exp(rng.normal(0, 0.02)))})
          for m in synthetic(model())]
    f = fit_cpu_form(TINY, ms, READ, FLOPS)
    for name in ("compute_efficiency", "attn_kv_efficiency", "attn_pair_efficiency", "step_s"):
        assert abs(f.values[name] - TRUE[name]) < 4 * f.stderr[name], name
        assert f.stderr[name] > 1e-4 * TRUE[name], name
    assert 0.01 < f.rms_log < 0.03
