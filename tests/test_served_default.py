"""The default GPU price is the served engine's (experiments/setup/served.py): a GPU
profile's kernels as vLLM runs them, with the shipped terms; `--served-engine none` gives
the kernels' sum, a file a user's fitted terms."""
from __future__ import annotations

import json

from batchlab.core.cost.served.profile import load_served_profile, shipped_served_profile
from tests.helpers import cli, one_line_error

RUN = ["simulate", "--model", "llama-3-8b", "--hardware", "h100-sxm", "--tensor-parallel", "2",
       "--workload", "chat", "--num-requests", "60", "--rate", "8", "--seed", "3", "--policy", "chunked"]


def _summary(*extra: str) -> tuple[dict, str]:
    code, out, err = cli([*RUN, *extra, "--format", "json"])
    assert code == 0, err
    code, text, err = cli([*RUN, *extra])
    assert code == 0, err
    return json.loads(out), text


def test_the_shipped_terms_load_and_name_their_source():
    p = load_served_profile(shipped_served_profile())
    assert p.engine == "vLLM V1" and "served-benchmarks" in p.fitted_on and p.heldout


def test_the_default_prices_steps_as_the_served_engine_runs_them():
    served, text = _summary()
    kernels, plain = _summary("--served-engine", "none")
    assert "served engine: vLLM V1 as served (shipped vLLM terms" in text
    assert "served engine: none (the kernels as timed one at a time, eager)" in plain
    # the shipped terms' judgement on models left out of their fit, TPOT and TTFT, in the assumptions
    folds = [h for h in load_served_profile(shipped_served_profile()).heldout if h.by == "model"]
    assert folds and all(h.ttft_median_pct is not None for h in folds)
    assert f"mean TTFT: {folds[0].left_out} {folds[0].ttft_median_pct:.0f}%" in text
    # vLLM's path by message size on Hopper at 2 GPUs (core/cost/served/engine.py), NCCL's table above
    assert ("the engine's own below 8 MiB, symmetric memory (two-shot) below 64 MiB, else NCCL" in text
            and "the engine's own" not in plain)
    # CUDA graphs, the engine's all-reduce and fused kernels: the same requests decode faster
    (s,), (k,) = served.values(), kernels.values()
    assert s["mean_tpot_ms"] < k["mean_tpot_ms"]


def test_a_served_profile_file_prices_like_the_shipped_one_when_it_is_that_one(tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_text(shipped_served_profile().read_text())
    served, _ = _summary()
    again, text = _summary("--served-engine", str(mine))
    assert served == again and f"({mine}:" in text


def test_a_bad_served_profile_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 2, "engine": "x"}')
    code, _, err = cli([*RUN, "--served-engine", str(bad)])
    one_line_error(code, err, f"[hardware] served_engine: {bad}")


def test_a_profile_from_before_the_fused_moe_share_is_refused_with_how_to_refit(tmp_path):
    # its mxfp4 rate was fitted with experts at the bf16 rate: priced under the share it
    # would count the kernel's slowness twice
    old = tmp_path / "v3.json"
    old.write_text(shipped_served_profile().read_text().replace('"version": 4', '"version": 3', 1))
    code, _, err = cli([*RUN, "--served-engine", str(old)])
    one_line_error(code, err, "served-engine profile version 3, expected 4: write it again with batchlab "
                              "calibrate --from-served")


def test_the_served_terms_are_knobs_that_move_the_price():
    from batchlab.core.features import StepFeatures
    from batchlab.experiments.config import build_config
    from batchlab.experiments.setup import sim_setup
    from batchlab.experiments.setup.knobs import price_knobs, with_knobs

    def cfg(served: str = "vllm"):
        return build_config({"model": {"name": "llama-3-70b"}, "workload": {"source": "chat", "num_requests": 10},
                             "hardware": {"name": "h100-sxm", "tensor_parallel": 4, "served_engine": served}})
    knobs = {k.name: k for k in price_knobs(cfg(), traffic=False)}
    # a term held at its prior (the graphs' share: the tables hold no launch gap) spans the prior's range
    graphs = knobs["served_graph_fixed_share"]
    assert graphs.ends() == (0.02, 1.0) and "held at its prior" in graphs.source and "record_function" in graphs.source
    ar = knobs["served_custom_allreduce_scale"]  # fitted: the range its held-out folds gave it
    assert ar.low < ar.high and "held-out folds" in ar.source
    decode = StepFeatures(8, 0, 0, 8, 8 * 512, 8 * 512)  # 8 tokens: the engine's own all-reduce
    base = sim_setup(cfg()).cost.step_time(decode)
    high = sim_setup(with_knobs(cfg(), {"served_custom_allreduce_scale": ar.high})).cost.step_time(decode)
    assert high > base
    # the kernels' sum has no served knobs, and keeps the profile's assumed host time
    plain = {k.name for k in price_knobs(cfg("none"), traffic=False)}
    assert not any(n.startswith("served_") for n in plain) and {"step_s", "seq_s"} <= plain
