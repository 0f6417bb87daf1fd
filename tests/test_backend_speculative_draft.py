"""Speculative decoding on the torch backend with a separate draft model
(backend/speculative/separate.py): its own weights and KV pool, kept in step with what the
target kept. The output is the target's own greedy output; a draft holding the same
weights as the target's own first layers is accepted exactly as that self-draft is."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.driver import run_workload
from batchlab.core.config import SchedulerConfig
from batchlab.core.kv_tiers import TierConfig
from batchlab.core.speculative.config import SpeculativeConfig
from batchlab.core.workload import Workload
from tests.engine_loop_helpers import stream_through_loop

W = Workload(np.zeros(6), np.asarray([8, 30, 3, 17, 50, 12]), np.asarray([5, 19, 12, 3, 27, 10]))


def spec(k: int, draft_model: str | None = None, layers: int | None = None) -> SpeculativeConfig:
    return SpeculativeConfig(method="draft_model", draft_model=draft_model, draft_layers=layers,
                             num_speculative_tokens=k)


@pytest.fixture(scope="module")
def five_layers(tiny, tmp_path_factory):
    """A local checkpoint of batchlab-tiny's first five layers (its embedding, norm and LM
    head): a separate draft whose weights are the self-draft's of draft_layers 5."""
    hf = copy.deepcopy(tiny.hf)
    hf.model.layers = hf.model.layers[:5]
    hf.config.num_hidden_layers = 5
    path = tmp_path_factory.mktemp("draft5")
    hf.save_pretrained(path)
    return str(path)


SWAP = TierConfig(capacity_gib=0.25, preemption="swap", prefix=False)


@pytest.mark.parametrize("policy, budget, blocks, k, tier", [
    ("chunked", 64, None, 3, None), ("chunked", 8, None, 4, None),  # 8: the budget cuts drafts
    ("continuous", None, None, 2, None),
    ("chunked", 64, 14, 3, None), ("chunked", 64, 14, 3, SWAP)])  # 14 blocks: preemptions
def test_a_separate_draft_keeps_its_kv_in_step_with_the_target(runtime, five_layers, policy, budget,
                                                               blocks, k, tier):
    cfg = SchedulerConfig(policy=policy, block_size=8, max_num_seqs=4, max_num_batched_tokens=budget,
                          num_kv_blocks=blocks)
    plain, own, separate = {}, {}, {}
    run_workload(runtime, W, cfg, progress=False, outputs=plain)
    a = run_workload(runtime, W, cfg, progress=False, outputs=own, speculative=spec(k, layers=5),
                     kv_tier=tier)
    b = run_workload(runtime, W, cfg, progress=False, outputs=separate, speculative=spec(k, five_layers),
                     kv_tier=tier)
    assert separate == own == plain and len(plain) == len(W)  # the target's greedy output
    s, t = b.meta.speculative, a.meta.speculative
    assert s.draft_model == five_layers and t.draft_model is None
    # The same weights draft the same tokens only if the separate pool holds the KV of what
    # the target kept (rejected drafts rolled back, preempted sequences fed again).
    assert s.acceptance_counts == t.acceptance_counts and s.verifications == t.verifications
    assert 0 < s.accepted_tokens < s.verifications * k  # some drafts rejected, some accepted
    if blocks:
        assert b.summary()["preemptions"] > 0
    if tier:  # swapped out and back: only the target's pool moves; the draft is fed again
        assert b.steps["tier_swaps"].sum() > 0


def test_a_draft_of_its_own_shape_beside_the_target(runtime):
    """batchlab-tiny-draft (2 layers, half the width; random weights, so it agrees with the
    target about never): the target's output all the same, its KV in a pool of its shape."""
    cfg = SchedulerConfig(policy="chunked", block_size=8, max_num_seqs=4, max_num_batched_tokens=64)
    plain, drafted = {}, {}
    runtime.use_draft(None)  # as a run without a draft leaves it
    alone = runtime.kv_blocks(8)
    run_workload(runtime, W, cfg, progress=False, outputs=plain)
    res = run_workload(runtime, W, cfg, progress=False, outputs=drafted, speculative=spec(3, "batchlab-tiny-draft"))
    assert drafted == plain
    pool = runtime.draft_cache(res.meta.num_kv_blocks, 8)
    assert (pool.num_layers, pool.kv_heads, pool.head_dim) == (2, 2, 32)
    assert res.meta.num_kv_blocks < alone  # the budget holds both models' KV
    s = res.meta.speculative
    assert s.verifications > 0 and 0 < s.draft_cost_share < 1
    runtime.use_draft(None)
    assert runtime.kv_blocks(8) == alone


def test_a_draft_holding_the_targets_weights_is_always_accepted(runtime):
    """batchlab-tiny as its own draft (same seed, same weights): every draft matches, which
    holds only where the draft's KV follows the target's, all-accepted steps included."""
    cfg = SchedulerConfig(policy="chunked", block_size=8, max_num_seqs=4, max_num_batched_tokens=64)
    plain, drafted = {}, {}
    run_workload(runtime, W, cfg, progress=False, outputs=plain)
    res = run_workload(runtime, W, cfg, progress=False, outputs=drafted, speculative=spec(3, "batchlab-tiny"))
    s = res.meta.speculative
    assert drafted == plain
    assert s.acceptance_counts[:-1] == [0, 0, 0] and s.acceptance_counts[-1] > 0


def _config_dir(tmp_path, **fields):
    d = tmp_path / "draft"
    d.mkdir()
    base = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2,
            "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 32000,
            "max_position_embeddings": 8192}
    (d / "config.json").write_text(json.dumps({**base, **fields}))
    return str(d)


@pytest.mark.parametrize("fields, words", [
    ({"vocab_size": 1000}, ["vocabulary of 1,000 tokens", "batchlab-tiny's 32,000"]),
    ({"max_position_embeddings": 1024}, ["context of 1024 tokens", "shorter than the target"]),
    ({"num_hidden_layers": 4000, "hidden_size": 8192, "intermediate_size": 28672},
     ["parameters need", "beside the target batchlab-tiny", "free"])])
def test_a_draft_that_cannot_serve_beside_the_target_is_one_line(tmp_path, fields, words):
    from tests.helpers import cli, one_line_error

    d = _config_dir(tmp_path, **fields)
    code, _, err = cli(["run", "--num-requests", "2", "--speculative", "draft_model", "--draft-model", d])
    one_line_error(code, err, f"speculative.draft_model {d}", *words)


def test_a_kv_budget_without_room_for_the_drafts_kv_is_one_line():
    from tests.helpers import cli, one_line_error

    # 100 KiB holds one block of 16 tokens of batchlab-tiny (98,304 bytes), not with the
    # draft's 16,384 more.
    code, _, err = cli(["run", "--num-requests", "2", "--kv-memory", "100KiB", "--speculative",
                        "draft_model", "--draft-model", "batchlab-tiny-draft"])
    # The pool is sized once the models are loaded (a line says so): the error is one line after it.
    assert code == 2 and err.strip().splitlines()[0].startswith("model batchlab-tiny loaded")
    one_line_error(code, err.strip().split("\n", 1)[1], "holds no KV block",
                   "speculative.draft_model batchlab-tiny-draft's KV", "114,688 bytes")


def test_measured_acceptance_of_a_separate_draft_feeds_simulate(tmp_path, capsys):
    from tests.helpers import run_cli

    acc = tmp_path / "acceptance.csv"
    common = ["--model", "batchlab-tiny", "--workload", "chat", "--num-requests", "4", "--rate", "inf",
              "--max-output-len", "12", "--policy", "chunked", "--speculative", "draft_model",
              "--draft-model", "batchlab-tiny-draft"]
    code, _, err = run_cli(["run", *common, "--acceptance-out", str(acc), "--no-progress"], capsys)
    assert code == 0, err
    assert acc.read_text().startswith("num_speculative_tokens,emitted,count\n3,1,")
    code, out, err = run_cli(["simulate", *common, "--acceptance-file", str(acc), "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["chunked"]["mean_acceptance_length"] == pytest.approx(1.0)  # as measured


@pytest.mark.slow
def test_validate_simulates_a_separate_drafts_runs(tmp_path, capsys):
    from tests.helpers import run_cli

    code, _, err = run_cli(["validate", "--profile", "batchlab-tiny-cpu", "--workload", "chat",
                            "--num-requests", "6", "--rate", "inf", "--max-output-len", "24",
                            "--policy", "chunked", "--speculative", "draft_model", "--draft-model",
                            "batchlab-tiny-draft", "--out", str(tmp_path), "--format", "json"], capsys)
    assert code == 0, err
    real = json.loads((tmp_path / "chunked" / "real" / "meta.json").read_text())["speculative"]
    sim = json.loads((tmp_path / "chunked" / "sim" / "meta.json").read_text())["speculative"]
    assert real["draft_model"] == "batchlab-tiny-draft" and 0 < real["draft_cost_share"] < 1
    assert real["verifications"] == sim["verifications"] > 0  # every draft rejected, in both worlds
    # The per-step judgement prices each real step as it ran: the profile plus the draft's passes.
    from batchlab.core.cost.profile import load_profile, resolve_profile_path
    from batchlab.core.run_folder import parse_meta, read_steps
    from batchlab.experiments.validation.speculative import drafted
    from batchlab.experiments.validation.steps import step_error

    folder = tmp_path / "chunked" / "real"
    steps = read_steps(folder / "steps.csv", "steps")
    meta = parse_meta(json.loads((folder / "meta.json").read_text()), folder / "meta.json")
    cost = load_profile(resolve_profile_path("batchlab-tiny-cpu")).cost_model()
    reported = json.loads((tmp_path / "comparison.json").read_text())["per_step"]["median_ape"]
    assert reported == pytest.approx(step_error(steps, drafted(cost, meta.speculative)).median_ape)
    assert reported != pytest.approx(step_error(steps, cost).median_ape)  # not the plain profile's


def test_a_server_speculating_with_a_separate_draft_streams_the_targets_tokens(runtime):
    prompts = [list(range(5, 25)), list(range(100, 130)), [7] * 12]

    def serve(speculative=None):
        events, loop = stream_through_loop(runtime, prompts, 16, speculative)
        return [[e.token for e in ev] for ev in events], loop

    plain, _ = serve()
    drafted, loop = serve(spec(3, "batchlab-tiny"))  # the target's weights: every draft accepted
    assert drafted == plain and all(len(t) == 16 for t in plain)
    s = loop.result().meta.speculative
    assert s.draft_model == "batchlab-tiny" and s.accepted_tokens > 0
    assert s.acceptance_counts[:-1] == [0, 0, 0]
