"""The draft's passes priced as the served engine runs them (experiments/setup/speculative.py):
where the target is priced as vLLM serves it, its draft is too, from piecewise CUDA graphs
in every pass (vLLM's EagleProposer, v1/spec_decode/eagle.py at 008603a) and without host
time of its own; where the target is the kernels' sum, so is the draft."""
from __future__ import annotations

import pytest

from batchlab.core.cost.gpu_form import GpuCostModel
from batchlab.core.cost.served.model import ServedGpuCost
from batchlab.core.features import StepFeatures
from batchlab.core.speculative.draft_cost import DraftedCost
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.setup import sim_setup


def setup(served_engine: str, method: str = "eagle"):
    cfg = ExperimentConfig.model_validate({
        "model": {"name": "llama-3.1-8b"},
        "hardware": {"name": "h100-sxm", "served_engine": served_engine},
        "speculative": {"method": method, "acceptance": 0.7, "num_speculative_tokens": 3}})
    cost = sim_setup(cfg).cost
    assert isinstance(cost, DraftedCost)
    return cost


def test_a_served_targets_draft_runs_piecewise_graphs_without_host_time():
    cost = setup("vllm")
    assert isinstance(cost.base, ServedGpuCost) and isinstance(cost.draft, ServedGpuCost)
    d = cost.draft
    assert d.graph is d.piecewise  # a decode pass of the draft: piecewise, as a mixed step of the target
    for form in (d.graph, d.eager):
        assert form.params.step_s == 0.0 and form.params.seq_s == 0.0
    # The target's own decode step runs its full graph, with the engine's host time.
    assert cost.base.graph is not cost.base.piecewise and cost.base.graph.params.step_s > 0
    # Priced as served, a decode pass of the draft costs less than as its kernels' sum, at
    # any batch (graphs remove per-layer launch costs, the served kernels are faster).
    kernels = setup("none").draft
    assert isinstance(kernels, GpuCostModel)
    for n in (1, 32, 128):
        f = StepFeatures(n, 0, 0, n, n * 1200, n * 1200)
        assert d.step_time(f) < kernels.step_time(f)


def test_without_the_served_engine_the_draft_is_the_kernels_sum():
    cost = setup("none")
    assert isinstance(cost.base, GpuCostModel) and isinstance(cost.draft, GpuCostModel)
    assert cost.draft.params.step_s == 0.0  # the target's step pays the engine's per-step cost


@pytest.mark.parametrize("speculative", [{"method": "eagle"}, {"method": "draft_model", "draft_layers": 2}])
def test_the_assumptions_say_how_the_draft_is_priced(speculative):
    cfg = ExperimentConfig.model_validate({
        "model": {"name": "llama-3.1-8b"}, "hardware": {"name": "h100-sxm"},
        "speculative": {**speculative, "acceptance": 0.7}})
    assert "as served (piecewise CUDA graphs)" in sim_setup(cfg).meta.speculation


@pytest.mark.parametrize("k", [1, 3])
def test_a_speculating_decode_widens_the_capture_sizes(k):
    """vLLM sizes its CUDA graphs for decodes of 1 + k tokens (vllm/config/vllm.py @ 09f030e:
    min(max_num_seqs x decode_query_len x 2, 512)): 16 seats capture 32 tokens plain,
    32 (1 + k) speculating, for the target's steps and the draft's passes alike."""
    def served(speculative: dict):
        cfg = ExperimentConfig.model_validate({
            "model": {"name": "llama-3.1-8b"}, "hardware": {"name": "h100-sxm"},
            "scheduler": {"max_num_seqs": 16}, "speculative": speculative})
        return sim_setup(cfg).cost

    assert served({}).max_capture_tokens == 32
    cost = served({"method": "eagle", "acceptance": 0.7, "num_speculative_tokens": k})
    assert cost.base.max_capture_tokens == cost.draft.max_capture_tokens == 32 * (1 + k)
    # A verification of 16 sequences (16 (1 + k) tokens) replays the target's full graph.
    f = StepFeatures(16, 0, 0, 16 * (1 + k), 16 * 500, 16 * (1 + k) * 500)
    assert cost.base.step_time(f) == cost.base.graph.step_time(f)
