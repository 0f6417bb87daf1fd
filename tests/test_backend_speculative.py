"""Speculative decoding on the torch backend (backend/speculative/): a draft of the
target's own first layers proposes, the target verifies greedily under the same
scheduler, and the output is the target's own greedy output, token for token."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.driver import run_workload
from batchlab.backend.speculative.draft import truncated_runner
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.speculative.acceptance import read_acceptance_file
from batchlab.core.speculative.config import SpeculativeConfig
from batchlab.core.speculative.emission import SpeculativeEmission
from batchlab.core.workload import Workload
from batchlab.experiments.speculative_options import write_acceptance
from batchlab.sim import simulate
from tests.engine_loop_helpers import stream_through_loop

W = Workload(np.zeros(6), np.asarray([8, 30, 3, 17, 50, 12]), np.asarray([5, 19, 12, 3, 27, 10]))


def spec(layers: int, k: int) -> SpeculativeConfig:
    return SpeculativeConfig(method="draft_model", draft_layers=layers, num_speculative_tokens=k)


@pytest.mark.parametrize("policy, budget, layers, k", [
    ("chunked", 64, 1, 3), ("chunked", 8, 5, 4),  # 8: the budget cuts drafts
    ("continuous", None, 5, 2), ("continuous", None, 3, 1)])
def test_greedy_verification_gives_the_targets_own_output(runtime, policy, budget, layers, k):
    cfg = SchedulerConfig(policy=policy, block_size=8, max_num_seqs=4, max_num_batched_tokens=budget)
    plain, drafted = {}, {}
    run_workload(runtime, W, cfg, progress=False, outputs=plain)
    res = run_workload(runtime, W, cfg, progress=False, outputs=drafted, speculative=spec(layers, k))
    assert drafted == plain and len(plain) == len(W)  # token for token
    assert all(len(plain[i]) == W.output_len[i] for i in plain)
    s = res.meta.speculative
    assert s.num_speculative_tokens == k and s.verifications > 0
    assert 1.0 <= s.mean_acceptance_length <= k + 1
    assert s.mean_acceptance_length == pytest.approx(1 + s.accepted_tokens / s.verifications)
    assert sum(s.acceptance_counts) <= s.verifications
    assert res.summary()["mean_acceptance_length"] == s.mean_acceptance_length
    # Tokens kept together arrive together: one gap after the step before, zeros after it.
    after_first = int((W.output_len - 1).sum())
    zeros, gaps = int((res.itl == 0).sum()), int((res.itl > 0).sum())
    assert len(res.itl) == after_first == zeros + gaps
    assert gaps >= s.verifications  # one a verification (and one a decode the budget left undrafted)
    assert zeros <= s.accepted_tokens  # kept drafts arrive with their step (a reply's end cuts some)


def test_a_deeper_draft_is_accepted_more_and_feeds_the_simulator(runtime, tmp_path):
    cfg = SchedulerConfig(policy="chunked", block_size=8, max_num_seqs=4, max_num_batched_tokens=64)
    shallow = run_workload(runtime, W, cfg, progress=False, speculative=spec(1, 3)).meta.speculative
    deep = run_workload(runtime, W, cfg, progress=False, speculative=spec(5, 3))
    d = deep.meta.speculative
    # Random weights: the first layer alone agrees with all six almost never; five of six
    # agree sometimes (measured, not arranged; see backend/speculative/draft.py).
    assert shallow.mean_acceptance_length <= d.mean_acceptance_length
    assert d.accepted_tokens > 0
    path = tmp_path / "acceptance.csv"
    write_acceptance(str(path), 3, [deep.meta])
    acc = read_acceptance_file(path, 3)
    counts = np.asarray(d.acceptance_counts)
    assert acc.probs == pytest.approx(tuple(counts / counts.sum()))
    # The simulator, fed the measured acceptance, runs the same schedule's shape.
    sim = simulate(W, cfg, LinearCostModel(0.01), deep.meta.num_kv_blocks,
                   emission=SpeculativeEmission(3, acc, seed=0))
    assert sim.summary()["total_output_tokens"] == deep.summary()["total_output_tokens"]
    assert abs(sim.meta.speculative.mean_acceptance_length - d.mean_acceptance_length) < 1.0


def test_the_draft_shares_the_targets_weights_and_cache_layers(runtime):
    draft = truncated_runner(runtime.runner, 2)
    assert len(draft.layers) == 2 and draft.layers[0] is runtime.runner.layers[0]
    assert draft.lm_head is runtime.runner.lm_head and len(runtime.runner.layers) == 6
    with pytest.raises(ValueError, match="speculative.draft_layers 6: .* 1 to 5 of its 6"):
        truncated_runner(runtime.runner, 6)


@pytest.mark.slow
def test_validate_simulates_the_real_runs_drafts(tmp_path, capsys):
    from tests.helpers import run_cli
    import json

    code, _, _ = run_cli(["validate", "--profile", "batchlab-tiny-cpu", "--workload", "chat",
                          "--num-requests", "6", "--rate", "inf", "--max-output-len", "24",
                          "--policy", "chunked", "--speculative", "draft_model", "--draft-layers", "5",
                          "--out", str(tmp_path), "--format", "json"], capsys)
    assert code == 0
    real = json.loads((tmp_path / "chunked" / "real" / "meta.json").read_text())["speculative"]
    sim = json.loads((tmp_path / "chunked" / "sim" / "meta.json").read_text())["speculative"]
    assert real["num_speculative_tokens"] == sim["num_speculative_tokens"] == 3
    assert real["verifications"] > 0 and sim["verifications"] > 0
    assert 0 < real["draft_cost_share"] < 1  # five of six layers and the LM head


def test_bad_backend_speculation_is_one_line():
    from tests.helpers import cli, one_line_error

    base = ["run", "--num-requests", "2", "--speculative"]
    one_line_error(*cli([*base, "eagle"])[:3:2], "speculative.method eagle", "draft_layers")
    one_line_error(*cli([*base, "draft_model", "--draft-layers", "1", "--temperature", "0.7"])[:3:2],
                   "run.temperature (--temperature) 0.7", "greedily")
    one_line_error(*cli([*base, "draft_model", "--draft-layers", "1", "--acceptance", "0.5"])[:3:2],
                   "speculative.acceptance", "simulator setting")


def test_a_speculating_server_streams_the_targets_tokens(runtime):
    """The server's loop, speculating: the same tokens as without, several arriving at one
    step's end where drafts were accepted; a request that asks to sample is refused."""
    from batchlab.backend.sampling import SamplingParams

    prompts = [list(range(5, 25)), list(range(100, 130)), [7] * 12]

    def serve(speculative=None, params=None):
        return stream_through_loop(runtime, prompts, 24, speculative, params)

    plain, _ = serve()
    drafted, loop = serve(spec(5, 3))
    assert [[e.token for e in ev] for ev in drafted] == [[e.token for e in ev] for ev in plain]
    assert all([e.index for e in ev] == list(range(24)) for ev in drafted)
    s = loop.result().meta.speculative
    assert s.verifications > 0
    # A request's tokens kept together share their step's end: its repeated times are its
    # accepted drafts, less those a reply's end cut (at most k = 3 a request).
    together = sum(len(ev) - len({e.time_s for e in ev}) for ev in drafted)
    assert s.accepted_tokens - 3 * len(prompts) <= together <= s.accepted_tokens
    refused, _ = serve(spec(1, 2), SamplingParams(temperature=0.8))
    assert all(ev[-1].status == 400 and "greedily" in ev[-1].error for ev in refused)
