"""The fitted (CPU) cost form prices the MoE and window terms from the model's shape:
the experts a step's tokens touch and the windowed KV reads and pairs; a fit recovers
its parameters from synthetic timings of such models exactly, as it does for dense ones."""
from __future__ import annotations

import pytest

from tests.test_calibration_fit import SMALL, TRUTH, synthetic
from batchlab.calibration.fit.fitted_form import fit
from batchlab.core.features import StepFeatures
from batchlab.core.cost.fitted import FittedCostModel, PARAM_NAMES, Shape
from batchlab.core.model.presets import MODELS

MOE, SWA = MODELS["batchlab-tiny-moe"], MODELS["batchlab-tiny-swa"]


def test_the_moe_shape_reads_the_experts_a_step_touches():
    sh = Shape.of(MOE)
    assert sh.expert_weight_bytes == MOE.expert_params_total * 4 and sh.expert_touch == 2 / 8
    model = FittedCostModel(sh, **TRUTH, combine="sum")
    one, two = (model.step_time(StepFeatures(n, 0, 0, n, 10 * n, 10 * n, 0, 0, 0, 10 * n, 10 * n))
                for n in (1, 2))
    # A second token touches 8 (1 - 0.75^2) - 2 = 1.5 more experts' worth of weights.
    expert = MOE.expert_params * 4 * MOE.moe_layers
    extra = (1.5 * expert * TRUTH["s_per_weight_byte"] + TRUTH["per_seq_s"]
             + sh.layer_flops_per_token * TRUTH["s_per_flop"] + sh.head_flops_per_row * TRUTH["s_per_flop"]
             + 10 * (sh.kv_bytes_per_token * TRUTH["s_per_kv_byte"] + sh.attn_flops_per_pair * TRUTH["s_per_attn_flop"]))
    assert two - one == pytest.approx(extra, rel=1e-9)
    assert Shape.of(MODELS["batchlab-tiny"]).expert_weight_bytes == 0  # dense: as before


def test_the_window_shape_splits_the_kv_terms():
    sh = Shape.of(SWA)
    per_layer = SWA.kv_bytes_per_token_layer
    assert sh.kv_bytes_per_token == 3 * per_layer and sh.window_kv_bytes_per_token == 3 * per_layer
    model = FittedCostModel(sh, **TRUTH, combine="sum")
    full = StepFeatures(4, 0, 0, 4, 800, 800, 0, 0, 0, 800, 800)
    windowed = full._replace(window_kv_tokens_read=128, window_attention_pairs=128)
    saved = 672 * (sh.window_kv_bytes_per_token * TRUTH["s_per_kv_byte"]
                   + sh.window_attn_flops_per_pair * TRUTH["s_per_attn_flop"])
    assert model.step_time(full) - model.step_time(windowed) == pytest.approx(saved, rel=1e-9)


def _windowed(ms, window=32):
    """The grid's measurements with the windowed counts a 32-token window gives."""
    out = []
    for m in ms:
        f = StepFeatures(**m.features)
        f = f._replace(window_kv_tokens_read=min(f.kv_tokens_read, f.num_seqs * window + f.prefill_tokens),
                       window_attention_pairs=min(f.attention_pairs, f.tokens * window))
        out.append(m.model_copy(update={"features": f._asdict()}))
    return out


@pytest.mark.parametrize("spec", [MOE, SWA], ids=["moe", "swa"])
@pytest.mark.parametrize("combine", ["max", "sum"])
def test_fit_recovers_known_parameters_of_moe_and_window_shapes(spec, combine):
    sh = Shape.of(spec)
    truth = FittedCostModel(sh, **TRUTH, small_rows=SMALL, combine=combine)
    ms = synthetic(truth)
    if spec.layer_windows:
        ms = [m.model_copy(update={"median_s": truth.step_time(StepFeatures(**m.features))})
              for m in _windowed(ms)]
    pin = TRUTH["s_per_weight_byte"] if combine == "sum" else None
    got = fit(sh, ms, weight_s_per_byte=pin, forms=(combine,)).model
    for name in PARAM_NAMES:
        assert getattr(got, name) == pytest.approx(TRUTH[name], rel=1e-5, abs=1e-15), name
