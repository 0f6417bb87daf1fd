"""`capacity deploy`'s launch lines run: each preset's Hugging Face id, the quantisation
flags its checkpoint takes, expert and data parallelism where they apply, and only flags
(and values) that vLLM's `vllm serve` has (tests/data/vllm_serve_flags.txt, read from the
vLLM source it names). The `simulate` command deploy prints reproduces the winner."""
from __future__ import annotations

import csv
import json
import shlex
import tomllib
from pathlib import Path


from batchlab.core.model.presets import MODELS, PRESET_CONFIGS, lookup_model
from batchlab.experiments.capacity.launch import checkpoint, data_parallel_command, vllm_command
from batchlab.experiments.capacity.space import Deployment, why_not
from batchlab.experiments.cli import main

DATA = Path(__file__).parent / "data"


def vllm_flags() -> dict[str, set[str] | None]:
    """flag -> the values batchlab may give it (None: any)."""
    out: dict[str, set[str] | None] = {}
    for line in (DATA / "vllm_serve_flags.txt").read_text().splitlines():
        if line.startswith("--"):
            flag, _, values = line.partition(":")
            out[flag] = set(values.split()) if values else None
    return out


FLAGS = vllm_flags()
SOURCES = {n: e["repo"] for n, e in tomllib.loads((PRESET_CONFIGS / "SOURCES.toml").read_text()).items()}


def check_line(line: str) -> list[str]:
    """The `vllm serve` words of a printed line; every flag vLLM's, every value one it takes."""
    words = shlex.split(line.split("  #")[0])
    assert words[:2] == ["vllm", "serve"] and not words[2].startswith("-")
    flags = words[3:]
    i = 0
    while i < len(flags):
        flag = flags[i]
        assert flag in FLAGS, f"{flag} is not a vllm serve flag ({line})"
        takes_value = i + 1 < len(flags) and not flags[i + 1].startswith("--")
        if takes_value:
            allowed = FLAGS[flag]
            assert allowed is None or flags[i + 1] in allowed, f"{flag} {flags[i + 1]} ({line})"
            i += 2
        else:
            i += 1
    return words


def runnable_deployments():
    for model in sorted(MODELS):
        spec = lookup_model(model)
        for tp in (1, 2, 8):
            for ep in ([1, tp] if spec.is_moe and tp > 1 else [1]):
                for dtype in ("bf16", "fp16", "fp8"):
                    dep = Deployment(model, "h100-sxm", tp, dtype, 256, 2048, ep=ep)
                    if not why_not(dep):
                        yield dep


DEPLOYMENTS = list(runnable_deployments())


def test_every_runnable_deployment_of_every_preset_gets_a_line_vllm_accepts():
    assert len({d.model for d in DEPLOYMENTS}) >= 20
    for dep in DEPLOYMENTS:
        line = vllm_command(dep, 3)
        if checkpoint(dep.model) is None:  # the backend's embedded models
            assert dep.model.startswith("batchlab-") and "no vLLM command" in line
            continue
        words = check_line(line)
        expected = SOURCES.get(dep.model)
        if expected is not None:
            assert words[2] == expected  # the repository the preset's config.json came from
        else:
            assert "/" in words[2] and words[2] != dep.model  # an org/name id, not the preset name
        assert ("--enable-expert-parallel" in words) == (dep.ep > 1)
        assert f"--tensor-parallel-size {dep.tp}" in line
        if dp := data_parallel_command(dep, 2):
            assert check_line(dp)[-2:] == ["--data-parallel-size", "2"]


def test_quantised_checkpoints_are_served_in_their_own_quantisation():
    oss = Deployment("gpt-oss-120b", "h100-sxm", 1, "bf16", 256, 2048)
    assert not why_not(oss) and oss.label().split()[3] == "mxfp4"
    line = vllm_command(oss, 1)
    assert line.startswith("vllm serve openai/gpt-oss-120b ") and "--quantization" not in line
    assert "--dtype" not in line and "--kv-cache-dtype" not in line
    assert "mxfp4 checkpoint" in why_not(oss._replace(dtype="fp8"))
    r1 = Deployment("deepseek-r1", "h200", 8, "fp8", 256, 2048, ep=8)
    assert not why_not(r1) and "fp8 checkpoint" in why_not(r1._replace(dtype="bf16"))
    line = vllm_command(r1, 1)
    assert line.startswith("vllm serve deepseek-ai/DeepSeek-R1 ") and "--quantization" not in line
    assert "--enable-expert-parallel" in line
    dense = vllm_command(Deployment("qwen3-32b", "h100-sxm", 2, "fp8", 256, 2048), 1)
    assert "--quantization fp8 --kv-cache-dtype fp8" in dense  # vLLM's online fp8 of a bf16 checkpoint


def test_data_parallel_is_offered_for_dense_replicas_on_one_node_only():
    dense = Deployment("llama-3-8b", "h100-sxm", 2, "bf16", 256, 2048)
    assert data_parallel_command(dense, 4).split("  #")[0].endswith("--data-parallel-size 4")
    assert data_parallel_command(dense, 1) == ""  # one replica: the plain line
    assert data_parallel_command(dense, 5) == ""  # 10 GPUs: more than one node
    assert data_parallel_command(Deployment("qwen3-30b-a3b", "h100-sxm", 1, "bf16", 256, 2048), 4) == ""


def test_the_printed_simulate_command_reproduces_the_winner(capsys, tmp_path):
    trace = str(DATA / "azure_conv_300.csv")
    assert main(["capacity", "deploy", "--workload", trace, "--busiest-window", "120", "--rate-scale", "4",
                 "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60", "--models", "llama-3-8b", "--gpus", "a100-80gb",
                 "--tp-options", "1", "--dtype-options", "bf16", "--seats-options", "256",
                 "--budget-options", "2048", "--workers", "1", "--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "sized for: the busiest 120 s of " in out
    winner = out.split("winner: ")[1].split("\n")
    replicas = int(winner[0].split(" x ")[1].split(":")[0])
    cmd = next(x for x in winner if x.strip().startswith("reproduce: ")).split("reproduce: ")[1]
    words = shlex.split(cmd)
    assert words[:2] == ["batchlab", "simulate"] and f"--replicas {replicas}" in cmd
    assert "--out" not in words  # deploy's folder is not the rerun's
    with open(tmp_path / "d" / "options.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["deployment"] == winner[0].split(" x ")[0])
    assert main([*words[1:], "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["chunked"]
    assert got["p99_ttft_ms"] == float(row["p99_ttft_ms"]) and got["p99_tpot_ms"] == float(row["p99_tpot_ms"])
    assert got["rejected"] == int(row["rejected"]) and got["completed"] + got["rejected"] == int(row["requests"])


def test_the_json_answer_carries_the_window_and_the_commands(capsys):
    trace = str(DATA / "azure_conv_300.csv")
    assert main(["capacity", "deploy", "--workload", trace, "--busiest-window", "120", "--slo-ttft-ms", "1000",
                 "--slo-tpot-ms", "60", "--models", "llama-3-8b", "--gpus", "a100-80gb", "--tp-options", "1",
                 "--dtype-options", "bf16", "--seats-options", "256", "--budget-options", "2048", "--workers", "1",
                 "--format", "json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["sized_for"].startswith("the busiest 120 s of ")
    assert list(r["reproduce"]) == [r["winner"]] and r["reproduce"][r["winner"]].startswith("batchlab simulate ")
