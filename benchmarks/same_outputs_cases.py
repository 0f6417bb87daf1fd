"""The fixed set of commands benchmarks/same_outputs.py runs, and the inputs it writes for
them (traces, configs, vllm bench files, stored runs): every case's exact command is
`python benchmarks/same_outputs.py --list`."""
from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

def save(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@dataclass
class Ctx:
    tree: Path
    shared: str
    env: dict
    python: str
    paths: list[tuple[re.Pattern, str]] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)


# -- inputs the script writes (fixed: the same bytes whichever tree runs) ----------------
def lcg(seed: int):
    """A tiny deterministic generator (no numpy, no random: the same on any version)."""
    x = seed
    while True:
        x = (6364136223846793005 * x + 1442695040888963407) % 2**64
        yield (x >> 11) / 2**53


def write_vllm_bench(path: Path, n: int, seed: int, model: str, ttft: tuple[float, float],
                     itl: float, gap: float, prompt: tuple[int, int], output: tuple[int, int]) -> None:
    """A `vllm bench serve --save-result --save-detailed` JSON (the fields calibrate
    --from-replay reads), generated from a fixed seed: timings of a plausible server."""
    g = lcg(seed)
    ins = [prompt[0] + int(next(g) * (prompt[1] - prompt[0])) for _ in range(n)]
    outs = [output[0] + int(next(g) * (output[1] - output[0])) for _ in range(n)]
    t, starts = 0.0, []
    for _ in range(n):
        starts.append(round(t, 6))
        t += -math.log(1.0 - next(g)) * gap
    ttfts = [round(ttft[0] + ttft[1] * (i / 1000.0) * (0.8 + 0.4 * next(g)), 6) for i in ins]
    itls = [[round(itl * (0.9 + 0.2 * next(g)), 6) for _ in range(o - 1)] for o in outs]
    d = {"date": "20260101-000000", "backend": "vllm", "model_id": model, "tokenizer_id": model,
         "num_prompts": n, "request_rate": 1.0 / gap, "burstiness": 1.0, "max_concurrency": None,
         "duration": round(t, 6), "completed": n, "input_lens": ins, "output_lens": outs,
         "ttfts": ttfts, "itls": itls, "start_times": starts, "errors": [""] * n,
         "generated_texts": [""] * n}
    path.write_text(json.dumps(d, indent=1))


GRID_TOML = """\
[workload]
source = "chat"
num_requests = 150
rate = 10.0
[run.slo]
ttft_ms = 1000.0
tpot_ms = 60.0

[grid]
policy = ["continuous", "chunked"]
"scheduler.max_num_seqs" = [4, 128]
[grid.hardware]
name = ["a100-80gb", "h100-sxm"]
[sweep]
gpu_hour_price = 2.0
"""

GRID_MAXRATE_TOML = """\
[workload]
source = "chat"
num_requests = 120
rate = 4.0
[run.slo]
ttft_ms = 2000.0
tpot_ms = 100.0

[grid]
policy = ["continuous", "chunked"]
[sweep]
point = "max-rate"
tolerance = 0.1
"""

EXPERIMENT_TOML = """\
[workload]
source = "chat"
num_requests = 300
rate = 20.0
seed = 1
[workload.output]
dist = "lognormal"
mean = 200
sigma = 1.0
max = 2048
[scheduler]
policy = "chunked"
max_num_seqs = 128
max_num_batched_tokens = 2048
[model]
name = "llama-3-8b"
[hardware]
name = "h100-sxm"
tensor_parallel = 1
mem_efficiency = 0.8
compute_efficiency = 0.6
step_overhead_s = 0.002
[run]
policies = ["continuous", "chunked"]
replicas = 2
router = "least_loaded"
slo = { ttft_ms = 2000, tpot_ms = 100 }
"""

# A Hugging Face config.json of a small dense model (a Qwen2-shaped 1.5B), for --model DIR.
MODEL_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 1536,
    "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
    "num_key_value_heads": 2, "max_position_embeddings": 32768, "vocab_size": 151936,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_sliding_window": False,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
}

BATCHLAB_TRACE_CSV = """\
arrival_s,prompt_len,output_len,priority
0.0,120,30,0
0.1,800,12,1
0.25,64,200,0
0.4,2000,40,2
0.7,300,90,0
1.1,150,15,1
1.3,4000,8,0
1.6,90,400,0
2.0,512,64,1
2.2,256,128,0
"""

BROKEN_TRACE_CSV = """\
arrival_s,prompt_len,output_len
0.0,100,10
0.5,-3,10
"""


def make_file(name: str, text: str) -> Callable[[Path, "Ctx"], None]:
    def fn(work: Path, ctx: "Ctx") -> None:
        p = work / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    fn.__name__ = f"write {name}"
    return fn


def copy_shared_trace(work: Path, ctx: "Ctx") -> None:
    shutil.copy(Path(ctx.shared) / "traces" / "azure2023_code.csv", work / "trace.csv")


def make_model_dir(work: Path, ctx: "Ctx") -> None:
    d = work / "Qwen2-1.5B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2))


def make_replays(work: Path, ctx: "Ctx") -> None:
    # an H100 serving Llama-3.1-8B: ~25 ms + 60 us a prompt token to first token, ~8 ms a token
    write_vllm_bench(work / "bench-a.json", 60, 1, "meta-llama/Llama-3.1-8B-Instruct",
                     (0.025, 0.06), 0.008, 0.25, (100, 2000), (20, 300))
    write_vllm_bench(work / "bench-b.json", 60, 2, "meta-llama/Llama-3.1-8B-Instruct",
                     (0.025, 0.06), 0.009, 0.15, (100, 2000), (20, 300))


def make_tiny_replay(work: Path, ctx: "Ctx") -> None:
    # batchlab-tiny on a CPU (the shipped profile's model): ~20 ms + 0.1 ms a token, ~10 ms a token
    write_vllm_bench(work / "tiny.json", 40, 3, "batchlab-tiny", (0.02, 0.1), 0.01, 0.3,
                     (16, 200), (4, 40))


def make_stored_validation(src: str, dst: str, device: dict) -> Callable[[Path, "Ctx"], None]:
    """A `validate --out` folder (DIR/config.json, DIR/POLICY/real/{meta,summary}.json and
    its tables) built from a `simulate --out` run of the same workload: serving for real
    needs torch and the wall clock, so the simulated run stands in for the real one, its
    meta marked world "real" with the device the profile was measured on and the scheduler
    settings validate records."""
    def fn(work: Path, ctx: "Ctx") -> None:
        s, d = work / src, work / dst
        config = json.loads((s / "config.json").read_text())
        metas = json.loads((s / "meta.json").read_text())
        summaries = json.loads((s / "summary.json").read_text())
        d.mkdir()
        (d / "config.json").write_text(json.dumps(config, indent=2))
        for policy, meta in metas.items():
            real = d / policy / "real"
            real.mkdir(parents=True)
            for t in ("requests.csv", "steps.csv"):
                shutil.copy(s / policy / t, real / t)
            meta = dict(meta, world="real", **device)
            meta["scheduler"] = dict(config["scheduler"], policy=policy,
                                     num_kv_blocks=meta["num_kv_blocks"],
                                     block_size=meta.get("block_size", 16))
            (real / "meta.json").write_text(json.dumps(meta, indent=2))
            (real / "summary.json").write_text(json.dumps(summaries[policy], indent=2))
    fn.__name__ = f"store {src} as {dst}"
    return fn


# The shipped CPU profile's device (calibration/profiles/batchlab-tiny-cpu.json): the
# stored runs claim it, so that --real and --from-run judge them without a device warning.
TINY_DEVICE = {"device": "cpu", "threads": 1, "dtype": "float32", "cpu": "AMD EPYC",
               "matmul": "onednn", "torch": "2.13.0+cpu"}


# -- the fixed set of commands ------------------------------------------------------------
@dataclass
class B:
    """One batchlab command: `python -m batchlab *args` ({traces}, {vidur}, {shared} are
    filled in). label "" is the case's main (last) command."""
    args: list[str]
    label: str = ""
    rc: int = 0  # the exit code expected
    stderr: bool = False  # hash stderr too (error paths: their message is the output)


@dataclass
class F:
    """Python writing an input into the case's folder."""
    fn: Callable[[Path, "Ctx"], None]


@dataclass
class Case:
    name: str
    steps: list[Union[B, F]]
    why: str = ""


def sim(*a: str) -> list[str]:
    return ["simulate", *a]


SLO = ["--slo-ttft-ms", "2000", "--slo-tpot-ms", "100"]

CASES: list[Case] = [
    # --- cheap listings and the help of every command (their options are behaviour too)
    Case("help", [B(["--help"])]),
    *[Case(f"help-{c.replace(' ', '-')}", [B([*c.split(), "--help"])])
      for c in ("simulate", "run", "calibrate", "validate", "workload", "workload stats",
                "workload convert", "experiment", "capacity", "capacity max-rate",
                "capacity replicas", "capacity deploy", "sweep", "serve", "replay")],
    Case("simulate-list-policies", [B(sim("--list-policies"))]),
    Case("simulate-list-policies-json", [B(sim("--list-policies", "--format", "json"))]),
    Case("experiment-list", [B(["experiment", "--list"])]),

    # --- simulate: the demo, synthetic presets, shared traces
    Case("simulate-demo", [B(sim("--out", "out"))], "the embedded default, its run folder"),
    Case("simulate-demo-json", [B(sim("--format", "json"))]),
    Case("simulate-chat-policies", [B(sim("--workload", "chat", "--num-requests", "300", "--rate", "16",
                                          "--policy", "static,continuous,chunked,memory_aware",
                                          "--out", "out"))]),
    Case("simulate-chat-seeds", [B(sim("--workload", "chat", "--num-requests", "200", "--rate", "16",
                                       "--policy", "continuous,chunked", "--seeds", "3", "--out", "out"))]),
    Case("simulate-multiturn-prefix", [B(sim("--workload", "multiturn", "--num-requests", "200", "--rate", "8",
                                             "--turns", "4", "--system-prompt-len", "200",
                                             "--policy", "continuous,chunked", "--replicas", "2",
                                             "--router", "prefix_aware", "--out", "out"))]),
    Case("simulate-azure-code-admission", [B(sim("--workload", "azure_code", "--num-requests", "300",
                                                 "--policy", "continuous,chunked",
                                                 "--admission", "fcfs,shortest_prompt", "--out", "out"))]),
    Case("simulate-azure-conv-window", [B(sim("--workload", "azure_conv", "--window-duration", "120",
                                              "--policy", "continuous,chunked", *SLO, "--out", "out"))],
         "the shared trace, a window of it"),
    Case("simulate-azure-conv-json", [B(sim("--workload", "azure_conv", "--num-requests", "400",
                                            "--rate-scale", "2", "--policy", "chunked", "--format", "json"))]),
    Case("simulate-trace-file", [F(copy_shared_trace),
        B(sim("--workload", "trace.csv", "--num-requests", "200", "--jitter", "0.5", "--seed", "3",
              "--max-prompt-len", "2048", "--policy", "chunked", "--out", "out"))],
         "a trace file by path, jittered"),
    Case("simulate-mooncake", [B(sim("--workload", "mooncake", "--num-requests", "300",
                                     "--policy", "continuous,chunked", "--out", "out"))]),
    Case("simulate-batchlab-trace", [F(make_file("t.csv", BATCHLAB_TRACE_CSV)),
                                     B(sim("--workload", "t.csv", "--admission", "priority,priority_aging",
                                           "--preemption", "priority", "--num-kv-blocks", "300",
                                           "--policy", "continuous", "--out", "out"))]),
    Case("simulate-memory-aware", [B(sim("--policy", "memory_aware,continuous", "--num-kv-blocks", "600",
                                         "--rate", "inf", "--num-requests", "120",
                                         "--policy-param", "long_prompt=1", "--policy-param",
                                         "kv_threshold=0.3", "--out", "out"))]),
    Case("simulate-reserved-static", [B(sim("--workload", "chat", "--num-requests", "200", "--rate", "12",
                                            "--policy", "static,continuous", "--kv-allocation", "reserved",
                                            "--max-batch-delay", "0.5", "--no-prefix-caching",
                                            "--out", "out"))]),
    Case("simulate-closed-loop", [B(sim("--workload", "chat", "--num-requests", "150", "--max-concurrency", "8",
                                        "--think-time", "1", "--policy", "chunked", "--step-by-step",
                                        "--out", "out"))]),
    Case("simulate-no-step-table", [B(sim("--workload", "uniform", "--num-requests", "300", "--rate", "20",
                                          "--policy", "continuous", "--no-step-table", "--out", "out"))]),
    Case("simulate-plot", [B(sim("--workload", "chat", "--num-requests", "150", "--rate", "10",
                                 "--policy", "continuous,chunked", "--plot", "plots"))],
         "PNG plots hashed byte for byte"),
    Case("simulate-config-toml", [F(make_file("exp.toml", EXPERIMENT_TOML)),
                                  B(sim("--config", "exp.toml", "--out", "out"))]),
    Case("simulate-profile-cpu", [B(sim("--profile", "batchlab-tiny-cpu", "--workload", "chat",
                                        "--num-requests", "60", "--rate", "4", "--max-output-len", "64",
                                        "--out", "out"))], "a shipped calibration profile"),

    # --- models, GPUs, layouts
    Case("simulate-moe-qwen3-h100", [B(sim("--model", "qwen3-30b-a3b", "--hardware", "h100-sxm",
                                           "--workload", "chat", "--num-requests", "200", "--rate", "20",
                                           "--policy", "continuous,chunked", "--out", "out"))],
         "MoE, GPU-profile price"),
    Case("simulate-moe-qwen3-h100-roofline", [B(sim("--model", "qwen3-30b-a3b", "--hardware", "h100-sxm",
                                                    "--workload", "chat", "--num-requests", "200", "--rate", "20",
                                                    "--policy", "chunked", "--cost", "roofline",
                                                    "--out", "out"))]),
    Case("simulate-gpt-oss-20b-h200", [B(sim("--model", "gpt-oss-20b", "--hardware", "h200",
                                             "--workload", "chat", "--num-requests", "120", "--rate", "10",
                                             "--policy", "chunked", "--out", "out"))],
         "MoE with sliding windows (step by step)"),
    Case("simulate-gpt-oss-120b-b200", [B(sim("--model", "gpt-oss-120b", "--hardware", "b200", "--rate", "20",
                                              "--num-requests", "120", "--format", "json"))]),
    Case("simulate-gemma3-h100", [B(sim("--model", "gemma-3-12b", "--hardware", "h100-sxm",
                                        "--workload", "chat", "--num-requests", "100", "--rate", "8",
                                        "--policy", "chunked", "--out", "out"))], "sliding window (dense)"),
    Case("simulate-gemma2-h200-roofline", [B(sim("--model", "gemma-2-9b", "--hardware", "h200",
                                                 "--workload", "chat", "--num-requests", "100", "--rate", "8",
                                                 "--policy", "continuous", "--cost", "roofline",
                                                 "--out", "out"))]),
    Case("simulate-llama70b-tp4", [B(sim("--model", "llama-3-70b", "--hardware", "h100-sxm", "--tp", "4",
                                         "--workload", "chat", "--num-requests", "200", "--rate", "10",
                                         "--policy", "continuous,chunked", "--out", "out"))],
         "dense TP: the shipped H100 GPU profile"),
    Case("simulate-llama70b-tp4-roofline", [B(sim("--model", "llama-3-70b", "--hardware", "h100-sxm",
                                                  "--tp", "4", "--workload", "chat", "--num-requests", "200",
                                                  "--rate", "10", "--policy", "chunked", "--cost", "roofline",
                                                  "--out", "out"))]),
    Case("simulate-llama70b-tp4-pp2", [B(sim("--model", "llama-3-70b", "--hardware", "h100-sxm", "--tp", "4",
                                             "--pp", "2", "--workload", "chat", "--num-requests", "200",
                                             "--rate", "10", "--policy", "chunked", "--out", "out"))]),
    Case("simulate-llama70b-tp4-pp2-roofline", [B(sim("--model", "llama-3-70b", "--hardware", "h100-sxm",
                                                      "--tp", "4", "--pp", "2", "--workload", "chat",
                                                      "--num-requests", "200", "--rate", "10", "--policy", "chunked",
                                                      "--cost", "roofline", "--out", "out"))]),
    Case("simulate-llama70b-l40s-tp4-pp2", [B(sim("--model", "llama-3-70b", "--hardware", "l40s", "--tp", "4",
                                                  "--pp", "2", "--workload", "chat", "--num-requests", "150",
                                                  "--rate", "5", "--policy", "chunked", "--out", "out"))]),
    Case("simulate-deepseek-r1-ep-dpa", [B(sim("--model", "deepseek-r1", "--hardware", "h200", "--tp", "8",
                                               "--ep", "8", "--dp-attention", "--workload", "chat",
                                               "--num-requests", "200", "--rate", "10", "--policy", "chunked",
                                               "--out", "out"))], "MLA, EP, data-parallel attention"),
    Case("simulate-deepseek-r1-ep-dpa-roofline", [B(sim("--model", "deepseek-r1", "--hardware", "h200", "--tp", "8",
                                                        "--ep", "8", "--dp-attention", "--workload", "chat",
                                                        "--num-requests", "200", "--rate", "10",
                                                        "--policy", "chunked", "--cost", "roofline",
                                                        "--out", "out"))]),
    Case("simulate-qwen3-moe-tp2-ep2", [B(sim("--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--tp", "2",
                                              "--ep", "2", "--workload", "chat", "--num-requests", "200",
                                              "--rate", "20", "--policy", "chunked", "--out", "out"))]),
    Case("simulate-deepseek-v2-lite-ep-roofline", [B(sim("--model", "deepseek-v2-lite", "--hardware", "h100-sxm",
                                                         "--tp", "2", "--ep", "2", "--workload", "chat",
                                                         "--num-requests", "150", "--rate", "10",
                                                         "--policy", "chunked", "--cost", "roofline",
                                                         "--out", "out"))]),
    Case("simulate-mixtral-tp2-fp8", [B(sim("--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--tp", "2",
                                            "--dtype", "fp8", "--kv-cache-dtype", "fp8", "--workload", "chat",
                                            "--num-requests", "150", "--rate", "10", "--policy", "chunked",
                                            "--format", "json"))]),
    Case("simulate-llama8b-fp8-h100", [B(sim("--model", "llama-3-8b", "--hardware", "h100-sxm", "--dtype", "fp8",
                                             "--workload", "chat", "--num-requests", "200", "--rate", "16",
                                             "--policy", "continuous,chunked", "--out", "out"))]),
    Case("simulate-model-dir", [F(make_model_dir),
                                B(sim("--model", "Qwen2-1.5B", "--hardware", "l4", "--workload", "chat",
                                      "--num-requests", "100", "--rate", "5", "--policy", "chunked",
                                      "--out", "out"))], "a config.json directory"),
    Case("simulate-roofline-knobs", [B(sim("--hardware", "a100-80gb", "--mem-efficiency", "0.7",
                                           "--compute-efficiency", "0.5", "--step-overhead", "0.003",
                                           "--collective-latency-us", "30", "--tp", "2", "--num-requests", "200",
                                           "--out", "out"))]),

    # --- workload
    Case("workload-stats-azure-conv", [B(["workload", "stats", "azure_conv", "--window-duration", "600"])]),
    Case("workload-stats-mooncake-json", [B(["workload", "stats", "mooncake", "--window-duration", "600",
                                             "--length-scale", "8", "--format", "json"])]),
    Case("workload-stats-chat", [B(["workload", "stats", "chat", "--num-requests", "500", "--rate", "10"])]),
    Case("workload-stats-plot", [B(["workload", "stats", "azure_code", "--num-requests", "500",
                                    "--plot", "code.png"])]),
    Case("workload-convert-azure-csv", [B(["workload", "convert", "azure_conv", "--window-duration", "300",
                                           "--rate-scale", "2", "-o", "conv.csv"])]),
    Case("workload-convert-mooncake-jsonl", [B(["workload", "convert", "mooncake", "--num-requests", "300",
                                                "-o", "mc.jsonl"])]),
    Case("workload-convert-chat", [B(["workload", "convert", "chat", "--num-requests", "300", "--turns", "3",
                                      "--system-prompt-len", "100", "-o", "chat.jsonl"])]),

    # --- capacity and sweep (explicit worker counts: the default is every core)
    Case("capacity-max-rate", [B(["capacity", "max-rate", "--workload", "chat", "--num-requests", "200",
                                  "--policy", "continuous,chunked", *SLO, "--workers", "2", "--out", "cap"])]),
    Case("capacity-max-rate-json", [B(["capacity", "max-rate", "--workload", "azure_conv", "--window-duration",
                                       "300", "--model", "llama-3-8b", "--hardware", "h100-sxm",
                                       "--policy", "chunked", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60",
                                       "--workers", "1", "--format", "json"])]),
    Case("capacity-replicas", [B(["capacity", "replicas", "--workload", "azure_conv", "--window-duration", "300",
                                  "--rate-scale", "3", "--policy", "chunked", "--router", "least_loaded",
                                  "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60", "--gpu-hour-price", "2.5",
                                  "--candidate", "llama-3-70b:4:h100-sxm,llama-3-8b:1:h100-sxm,llama-3-8b:1:h200",
                                  "--workers", "2", "--out", "cap"])]),
    Case("capacity-replicas-sensitivity", [B(["capacity", "replicas", "--workload", "azure_conv",
                                              "--window-duration", "200", "--rate-scale", "3",
                                              "--policy", "chunked", "--slo-ttft-ms", "1000",
                                              "--slo-tpot-ms", "60", "--candidate", "llama-3-8b:1:h100-sxm",
                                              "--cost", "roofline", "--sensitivity", "--workers", "2",
                                              "--out", "cap"])]),
    Case("capacity-deploy", [B(["capacity", "deploy", "--workload", "azure_conv", "--window-duration", "300",
                                "--rate-scale", "3", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60",
                                "--max-rejected-share", "0.01", "--models", "llama-3-8b", "--tp-options", "1",
                                "--gpus", "h100-sxm,h200", "--dtype-options", "bf16,fp8",
                                "--seats-options", "256", "--budget-options", "2048",
                                "--price", "h100-sxm=2.5", "--price", "h200=3.5", "--workers", "2",
                                "--out", "deploy"])]),
    Case("sweep-simulate", [F(make_file("grid.toml", GRID_TOML)),
                            B(["sweep", "--config", "grid.toml", "--out", "sw", "--workers", "2"])]),
    Case("sweep-max-rate-serial", [F(make_file("grid.toml", GRID_MAXRATE_TOML)),
                                   B(["sweep", "--config", "grid.toml", "--out", "sw", "--workers", "1",
                                      "--format", "json"])]),

    # --- calibrate (no torch: operator tables, request timings, stored runs)
    Case("calibrate-from-operators-a100", [B(["calibrate", "--from-operators", "{vidur}", "--gpu", "a100-80gb",
                                              "--out", "a100.json"]),
                                           B(sim("--hardware", "a100-80gb", "--gpu-profile", "a100.json",
                                                 "--num-requests", "200", "--out", "out"), label="simulate")],
         "a GPU profile fitted on Vidur's tables, then used"),
    Case("calibrate-from-operators-h100", [B(["calibrate", "--from-operators", "{vidur}", "--gpu", "h100-sxm",
                                              "--out", "h100.json", "--format", "json"])]),
    Case("calibrate-from-replay-vllm", [F(make_replays),
                                        B(["calibrate", "--from-replay", "bench-a.json", "bench-b.json",
                                           "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                                           "--policy", "chunked", "--max-num-seqs", "256",
                                           "--max-num-batched-tokens", "8192", "--out", "h100-llama.json"])],
         "vllm bench serve JSON written by this script from a fixed seed"),
    Case("calibrate-from-replay-tiny", [F(make_tiny_replay),
                                        B(["calibrate", "--from-replay", "tiny.json", "--profile",
                                           "batchlab-tiny-cpu", "--max-num-seqs", "16", "--num-kv-blocks", "2000",
                                           "--out", "fitted.json", "--format", "json"])]),
    Case("calibrate-from-run", [B(sim("--profile", "batchlab-tiny-cpu", "--workload", "chat", "--num-requests",
                                      "60", "--rate", "6", "--max-output-len", "64", "--policy",
                                      "continuous,chunked", "--out", "sim"), label="simulate"),
                                F(make_stored_validation("sim", "served", TINY_DEVICE)),
                                B(["calibrate", "--from-run", "served", "--profile", "batchlab-tiny-cpu",
                                   "--out", "refined.json"])],
         "stored runs built from a simulated run (serving needs torch)"),

    # --- validate --real on stored runs
    Case("validate-real", [B(sim("--profile", "batchlab-tiny-cpu", "--workload", "chat", "--num-requests", "40",
                                 "--rate", "8", "--max-output-len", "64", "--policy", "continuous,chunked",
                                 "--out", "sim"), label="simulate"),
                           F(make_stored_validation("sim", "val", TINY_DEVICE)),
                           B(["validate", "--real", "val", "--profile", "batchlab-tiny-cpu", "--out", "rejudged"]),
                           ], "a validate --out folder built from a simulated run (serving needs torch)"),
    Case("validate-real-json", [
        B(sim("--profile", "batchlab-tiny-cpu", "--workload", "azure_conv", "--num-requests", "50",
              "--length-scale", "8", "--rate", "4", "--policy", "chunked", "--out", "sim"), label="simulate"),
        F(make_stored_validation("sim", "val", TINY_DEVICE)),
        B(["validate", "--real", "val", "--profile", "batchlab-small-cpu", "--format", "json"], rc=2,
          stderr=True, label="other-profile"),
        B(["validate", "--real", "val", "--profile", "batchlab-tiny-cpu", "--format", "json"])],
        "--format json; another model's profile first: its one-line refusal (exit 2)"),

    # --- a study, small
    Case("experiment-static-vs-continuous", [B(["experiment", "static-vs-continuous", "--small",
                                                "--out", "svc"])]),
    Case("experiment-batching", [B(["experiment", "batching", "--small", "--out", "bat", "--format", "json"])]),
    *[Case(f"experiment-{s}", [B(["experiment", s, "--small", "--out", "study"])])
      for s in ("tradeoff", "latency-vs-load", "paging", "prefix-caching")],

    # --- error paths: one line, exit 2
    Case("error-unknown-workload", [B(sim("--workload", "no_such_workload"), rc=2, stderr=True)]),
    Case("error-seeds-on-trace", [B(sim("--workload", "azure_conv", "--seeds", "3"), rc=2, stderr=True)]),
    Case("error-broken-trace", [F(make_file("broken.csv", BROKEN_TRACE_CSV)),
                                B(sim("--workload", "broken.csv"), rc=2, stderr=True)]),
    Case("error-fp8-on-a100", [B(sim("--hardware", "a100-80gb", "--dtype", "fp8"), rc=2, stderr=True)]),
]
