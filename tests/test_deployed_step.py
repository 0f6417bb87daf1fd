"""The compiled step of a deployed form (core/cost/deployed_step.py) prices a mixed
step's constant part (prefill chunks beside decodes) as the form's own fixed() does, bit
for bit, whichever shapes it has kept and in whatever order they come: MoE, windowed,
MLA, under TP, EP and DP attention (sequence groups), and past the kept range."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.cost.deployed_step import KEPT_TOKENS, DeployedStep
from batchlab.core.cost.gpu_deployment import DeployedGpuCost
from batchlab.core.cost.gpu_profile import load_gpu_profile
from batchlab.core.features import features_of
from batchlab.core.model.hardware import HARDWARE
from batchlab.core.model.layout import Layout
from batchlab.core.model.presets import MODELS
from batchlab.experiments.config import build_config
from batchlab.experiments.setup import sim_setup

PROFILE = load_gpu_profile("h100-sxm")
CASES = {  # (model, layout): each a one-stage deployed form
    "windowed MoE": ("gpt-oss-20b", Layout(tp=1)),
    "windowed MoE, TP 2": ("gpt-oss-20b", Layout(tp=2)),
    "MoE, TP 2 EP 2": ("qwen3-30b-a3b", Layout(tp=2, ep=2)),
    "MLA, DP attention": ("deepseek-v2-lite", Layout(tp=2, ep=2, dp_attention=True)),
    "windowed dense": ("gemma-2-9b", Layout(tp=1)),
}
FORMS = {name: PROFILE.cost(MODELS[m], layout, HARDWARE["h100-sxm"]) for name, (m, layout) in CASES.items()}


def test_the_cases_are_deployed_forms_of_one_stage():
    for name, form in FORMS.items():
        assert isinstance(form, DeployedGpuCost) and DeployedStep.of(form) is not None, name
    assert FORMS["MLA, DP attention"].shapes.sequence_groups > 1
    assert FORMS["windowed dense"].shapes.moe_layers == 0 and FORMS["windowed dense"].window


shapes = st.lists(st.tuples(st.integers(1, 600), st.integers(0, 20_000)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(FORMS)), shapes)
def test_a_mixed_steps_fixed_part_is_the_forms(case, steps):
    form = FORMS[case]
    step = DeployedStep.of(form)
    assert step is not None
    for seqs, prefill in steps:  # the same shapes again come from what was kept
        tokens = seqs + prefill
        assert step.mixed_fixed(seqs, tokens) == form.fixed(seqs, tokens)
    for seqs, prefill in reversed(steps):
        tokens = seqs + prefill
        assert step.mixed_fixed(seqs, tokens) == form.fixed(seqs, tokens)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(FORMS)), st.integers(1, 300), st.integers(1, 4), st.integers(1, 8192),
       st.integers(0, 100_000), st.integers(0, 1))
def test_a_mixed_step_is_priced_as_the_form_prices_it(case, seqs, chunks, prefill, kv, after_prefill):
    form = FORMS[case]
    step = DeployedStep.of(form)
    assert step is not None
    chunks = min(chunks, seqs)
    pairs = kv + prefill * (prefill + 1) // 2
    f = features_of(seqs, chunks, prefill, seqs - chunks, kv + prefill, pairs, after_prefill, 0, 0,
                    min(kv, 128 * seqs) + prefill, min(pairs, 128 * seqs), prefill * (prefill + 1) // 2,
                    prefill * (prefill + 1) // 2)
    assert step.step_time(f) == form.step_time(f)


def test_past_the_kept_range_the_form_is_asked():
    form = FORMS["windowed MoE"]
    step = DeployedStep.of(form)
    assert step is not None
    for seqs, tokens in ((3, KEPT_TOKENS), (1, KEPT_TOKENS + 5), (2, 40)):
        assert step.mixed_fixed(seqs, tokens) == form.fixed(seqs, tokens)
    assert len(step.by_tokens) == 41 * step.width  # only the kept shape took room


def served(model: str):
    """The default price of `model` on an A100 (the served GPU form)."""
    return sim_setup(build_config({"model": {"name": model}, "workload": {"source": "chat", "num_requests": 1},
                                   "hardware": {"name": "a100-80gb"}})).cost


WINDOWED = served("gpt-oss-20b")


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 600), st.integers(0, 300_000), st.integers(1, 5))
def test_a_windowed_models_short_decode_stretch_is_its_steps(n, kv, m):
    """decode_times of a few steps (the fast-forward's first guess, a draft's passes): as
    FormDefaults prices them, step_time of decodes without windowed reads."""
    assert WINDOWED.graph_deployed is not None and WINDOWED.graph_deployed.windowed
    want = [WINDOWED.step_time(features_of(n, 0, 0, n, kv + j * n, kv + j * n, 0, 0, 0, 0, 0, 0, 0))
            for j in range(m)]
    assert WINDOWED.decode_times(n, kv, m) == want
