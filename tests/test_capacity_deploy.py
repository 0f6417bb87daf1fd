"""`capacity deploy`: the cheapest deployment of the space, in GPUs or in dollars, the
same as sizing every deployment without pruning; its vLLM command; the runner-up; every
option without an answer says why; bad input is one line."""
from __future__ import annotations

import json
import math

import pytest

from batchlab.core.summary import SLO
from batchlab.experiments.capacity.deploy import search_deployments
from batchlab.experiments.capacity.launch import vllm_command
from batchlab.experiments.capacity.point import Criteria, sample_configs
from batchlab.experiments.capacity.search import search_replicas
from batchlab.experiments.capacity.space import Deployment, DeploySpace, configure
from batchlab.experiments.cli import main
from batchlab.experiments.config import build_config
from batchlab.experiments.executor import SerialExecutor

LOAD = ["--workload", "chat", "--num-requests", "150", "--rate", "60", "--policy", "chunked",
        "--slo-ttft-ms", "800", "--slo-tpot-ms", "40", "--workers", "1"]
SPACE = ["--models", "llama-3-8b", "--gpus", "a100-80gb,h100-sxm", "--tp-options", "1,2",
         "--dtype-options", "bf16,fp8", "--seats-options", "256", "--budget-options", "2048"]


def deploy_json(args, capsys, code=0):
    assert main(["capacity", "deploy", *args, "--format", "json"]) == code
    return json.loads(capsys.readouterr().out)


def test_the_winner_is_the_cheapest_of_every_deployment_sized_without_pruning(capsys):
    r = deploy_json([*LOAD, *SPACE], capsys)
    cfg = build_config({"workload": {"source": "chat", "num_requests": 150, "rate": 60.0},
                        "scheduler": {"policy": "chunked"}})
    crit = Criteria(SLO(ttft_ms=800, tpot_ms=40))
    samples = sample_configs(cfg.workload, 1, 1)
    brute = {}
    for row in r["options"]:
        if "no fp8" in row["why_none"] or "does not divide" in row["why_none"]:
            continue
        d = Deployment(row["model"], row["hardware"], row["tp"], row["dtype"], 256, 2048)
        a = search_replicas(configure(cfg, d), crit, samples, 64)
        brute[d.label()] = a.value * d.tp if a.value else math.inf
    cheapest = min(brute.values())
    winner = next(o for o in r["options"] if o["deployment"] == r["winner"])
    assert winner["gpus"] == cheapest
    for row in r["options"]:  # a pruned option could not have beaten the runner-up
        if row["why_none"].startswith("pruned"):
            assert brute[row["deployment"]] >= winner["gpus"]
    assert any("a100-80gb has no fp8 tensor cores" == o["why_none"] for o in r["options"])
    runner = next(o for o in r["options"] if o["deployment"] == r["runner_up"])
    key = ("model", "hardware", "tp", "dtype")
    assert tuple(runner[k] for k in key) != tuple(winner[k] for k in key)
    assert runner["gpus"] >= winner["gpus"]
    assert all(o["replicas"] is not None or o["why_none"] for o in r["options"])


def test_prices_rank_by_dollars(capsys):
    cheap_a100 = deploy_json([*LOAD, *SPACE, "--price", "a100-80gb=0.1", "--price", "h100-sxm=10"], capsys)
    assert "a100-80gb" in cheap_a100["winner"]
    cheap_h100 = deploy_json([*LOAD, *SPACE, "--price", "a100-80gb=10", "--price", "h100-sxm=0.1"], capsys)
    assert "h100-sxm" in cheap_h100["winner"]
    w = next(o for o in cheap_h100["options"] if o["deployment"] == cheap_h100["winner"])
    assert w["cost_per_hour"] == pytest.approx(w["gpus"] * 0.1)


def test_the_printout_states_the_space_and_gives_launch_commands(capsys):
    assert main(["capacity", "deploy", *LOAD, *SPACE]) == 0
    out, err = capsys.readouterr()
    assert "search space: 1 model (llama-3-8b) x 2 GPUs (a100-80gb, h100-sxm) x 2 TPs (1, 2)" in out
    assert "= 8 deployments" in out and "[8/8]" in err
    win = out.split("winner: ")[1]
    assert win.split("\n")[1].strip().startswith("vllm serve meta-llama/Meta-Llama-3-8B-Instruct "
                                                 "--tensor-parallel-size ")
    assert "tightest at the answer: p99 " in win and "runner-up (another GPU, model, layout or dtype): " in out
    assert "\n  priced by: GPU profile shipped " in win and "\n  reproduce: batchlab simulate " in win
    assert "sized for: the whole workload (chat, 150 requests) at x1 its rate" in out


def test_the_launch_command_carries_the_deployment():
    cmd = vllm_command(Deployment("llama-3-70b", "h200", 4, "fp8", 1024, 1024), 3)
    assert cmd.startswith("vllm serve meta-llama/Meta-Llama-3-70B-Instruct --tensor-parallel-size 4 "
                          "--max-num-seqs 1024 --max-num-batched-tokens 1024 --quantization fp8")
    assert "x 3 replica(s), 12 GPU(s)" in cmd


def test_the_space_size_and_the_tp_that_does_not_divide():
    s = DeploySpace(["llama-3-8b"], ["h100-sxm"], [1, 3], ["bf16"], [256, 1024], [2048])
    assert s.size() == 4
    cfg = build_config({"workload": {"source": "chat", "num_requests": 50, "rate": 5.0},
                        "run": {"slo": {"ttft_ms": 1000.0}}})
    opts = search_deployments(cfg, Criteria(SLO(ttft_ms=1000)), sample_configs(cfg.workload, 1, 1), s, None, 8,
                              SerialExecutor(), 1)
    assert {o.why_none() for o in opts if o.dep.tp == 3} == {"TP 3 does not divide 32 attention heads"}


def test_layouts_pp_and_ep_for_a_mixture_of_experts(capsys):
    """PP degrees for every model, EP (ep = tp) for a MoE model at TP > 1 only; each layout
    configured, counted in GPUs (tp x pp) and carried into its launch command."""
    s = DeploySpace(["qwen3-30b-a3b", "llama-3-8b"], ["h100-sxm"], [1, 2], ["bf16"], [256], [2048],
                    pp=[1, 2], ep=["off", "on"])
    from batchlab.experiments.capacity.space import deployments
    deps = {(d.model, d.tp, d.pp, d.ep) for d in deployments(s)}
    moe = {(tp, pp, ep) for m, tp, pp, ep in deps if m == "qwen3-30b-a3b"}
    dense = {(tp, pp, ep) for m, tp, pp, ep in deps if m == "llama-3-8b"}
    assert moe == {(1, 1, 1), (1, 2, 1), (2, 1, 1), (2, 1, 2), (2, 2, 1), (2, 2, 2)}
    assert dense == {(1, 1, 1), (1, 2, 1), (2, 1, 1), (2, 2, 1)} and s.size() == 10
    dep = Deployment("qwen3-30b-a3b", "h100-sxm", 2, "bf16", 256, 2048, pp=2, ep=2)
    c = configure(build_config({}), dep)
    assert (c.hardware.tensor_parallel, c.hardware.pipeline_parallel, c.hardware.expert_parallel) == (2, 2, 2)
    assert c.hardware.gpus == dep.gpus_per_replica == 4
    cmd = vllm_command(dep, 3)
    assert "--pipeline-parallel-size 2" in cmd and "--enable-expert-parallel" in cmd
    from batchlab.experiments.capacity.space import why_not
    assert why_not(Deployment("llama-3-8b", "h100-sxm", 1, "bf16", 256, 2048, pp=64)).startswith(
        "pipeline_parallel=64 exceeds")


@pytest.mark.parametrize("extra, message", [
    (["--tp-options", "0,2"], "--tp-options: expected positive whole numbers, got '0'"),
    (["--dtype-options", "int4"], "--dtype-options: 'int4' is not one of bf16, fp16, fp8"),
    (["--price", "a100-80gb=1"], "--price: no price for h100-sxm"),
    (["--price", "h100-sxm=cheap"], "expected GPU=USD_PER_GPU_HOUR"),
    (["--models", "llama-9"], "unknown model preset 'llama-9'"),
    (["--ep-options", "maybe"], "--ep-options: 'maybe' is not one of off, on"),
    (["--models", ""], "--models: expected a comma-separated list, got ''"),  # not the default model
    (["--gpus", " , "], "--gpus: expected a comma-separated list, got ' , '"),
])
def test_bad_input_is_one_line(extra, message, capsys):
    assert main(["capacity", "deploy", *LOAD, *SPACE, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_sensitivity_gives_the_winners_range_over_every_knob(capsys, tmp_path):
    space = ["--models", "llama-3-70b", "--gpus", "h100-sxm", "--tp-options", "4", "--dtype-options", "bf16",
             "--seats-options", "256", "--budget-options", "2048"]
    assert main(["capacity", "deploy", *LOAD, *space, "--sensitivity", "--cost", "roofline", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("sensitivity of llama-3-70b TP4 h100-sxm bf16"))
    assert "replicas" in line and "GPUs over the knobs of its price" in line
    for knob in ("mem_efficiency", "compute_efficiency", "step_overhead_s", "allreduce_latency_s", "traffic_rate"):
        assert f"\n  {knob} " in out
    assert (tmp_path / "sensitivity.csv").exists() and (tmp_path / "options.csv").exists()


def test_the_batch_width_is_the_executors_workers():
    from batchlab.experiments.capacity.deploy_command import _width

    assert _width("process pool (2 workers)") == 2
    assert _width("Dask cluster at tcp://10.0.0.1:8786 (4 workers)") == 4 and _width("serial (1 process)") == 1


def test_the_router_is_searched_when_asked(capsys):
    r = deploy_json([*LOAD, *SPACE, "--router-options", "round_robin,least_loaded", "--gpus", "h100-sxm",
                     "--tp-options", "1", "--dtype-options", "bf16"], capsys)
    labels = [o["deployment"] for o in r["options"]]
    assert sorted(x.rsplit(" ", 1)[1] for x in labels) == ["least_loaded", "round_robin"]
    winner = r["winner"].rsplit(" ", 1)[1]
    assert f"--router {winner} " in r["reproduce"][r["winner"]]
    plain = deploy_json([*LOAD, *SPACE, "--gpus", "h100-sxm", "--tp-options", "1", "--dtype-options", "bf16"],
                        capsys)
    assert [o["deployment"] for o in plain["options"]] == ["llama-3-8b TP1 h100-sxm bf16 256 seats 2048 tokens"]


def test_an_unknown_router_is_one_line(capsys):
    assert main(["capacity", "deploy", *LOAD, *SPACE, "--router-options", "random"]) == 2
    err = capsys.readouterr().err
    assert "--router-options: 'random' is not one of round_robin, least_loaded" in err and err.count("\n") == 1
