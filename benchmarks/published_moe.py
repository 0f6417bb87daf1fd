"""batchlab's roofline predictions beside published serving figures of MoE models.

The figures: GPUStack's performance lab (github.com/gpustack/gpustack, Apache-2.0),
docs/performance-lab/gpt-oss-20b/h100.md, deepseek-r1/h200.md and qwen3-235b-a22b/h100.md:
`vllm bench serve` (random dataset, fixed input and output lengths, every request sent at
once) against vLLM v0.11.0 (`vllm serve MODEL [-tp N]`, and for Qwen3-235B also the FP8
checkpoint on TP4 with --max-num-batched-tokens 16384). Each case here is
simulated with the same lengths, count and arrival (rate inf), the chunked policy with
the engine defaults batchlab applies for the GPU, under the default pricing (the GPU
profile of the preset: docs/results/2026-12-02-moe-gpu-form.md) beside the roofline's
default efficiencies (--cost roofline: docs/results/2026-12-02-moe-published.md). Prints
a markdown table; --roofline-only prints the roofline's alone (the earlier page's table).

    PYTHONPATH=. .venv/bin/python benchmarks/published_moe.py [--roofline-only]"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from batchlab.experiments.cli import main

GPT = "docs/performance-lab/gpt-oss-20b/h100.md (vLLM v0.11.0, `vllm serve openai/gpt-oss-20b`)"
R1 = "docs/performance-lab/deepseek-r1/h200.md (vLLM v0.11.0, `vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8`)"
Q = "docs/performance-lab/qwen3-235b-a22b/h100.md (vLLM v0.11.0)"
# Per source and deployment (the label's name, model, hardware, tp): (prompt, output,
# requests, published: duration s, total tok/s, mean TTFT ms, mean TPOT ms) per case.
PUBLISHED = {
    GPT: {("gpt-oss-20b, 1 x H100", "gpt-oss-20b", "h100-sxm", 1): [
        (32000, 100, 100, (107.95, 29730.30, 53687.69, 239.44)),
        (4000, 200, 500, (61.73, 33236.17, 31245.12, 184.26)),
        (2000, 100, 500, (32.58, 32113.65, 16515.86, 149.76)),
        (128, 4, 1000, (4.70, 28032.23, 3174.14, 178.91))]},
    R1: {("DeepSeek-R1, 8 x H200 TP8", "deepseek-r1", "h200", 8): [
        (32000, 100, 100, (206.90, 15514.57, 101351.99, 365.79)),
        (4000, 200, 500, (132.68, 15808.55, 63058.71, 164.23))]},
    Q: {("Qwen3-235B-A22B, 8 x H100 TP8", "qwen3-235b-a22b", "h100-sxm", 8): [
        (32000, 100, 100, (141.60, 22657.51, 70409.55, 132.10)),
        (4000, 200, 500, (98.99, 21113.53, 47811.58, 68.94)),
        (2000, 100, 500, (43.91, 23858.69, 21313.79, 101.08))],
        ("Qwen3-235B-A22B FP8, 4 x H100 TP4", "qwen3-235b-a22b:fp8", "h100-sxm", 4): [
        (32000, 100, 100, (208.79, 15366.32, 103754.50, 194.60)),
        (4000, 200, 500, (126.76, 16478.79, 60513.14, 89.52))]},
}
# (label, model, hardware, tp, prompt, output, requests, published, source)
CASES = [(f"{name}, {p}/{o}", model, hw, tp, p, o, n, pub, source)
         for source, deployments in PUBLISHED.items()
         for (name, model, hw, tp), cases in deployments.items() for p, o, n, pub in cases]
KEYS = ("duration", "total_token_throughput", "mean_ttft_ms", "mean_tpot_ms")


def predict(model: str, hardware: str, tp: int, prompt: int, output: int, n: int,
            cost: str = "auto") -> tuple[float, ...]:
    """model: a preset, or PRESET:fp8 for its FP8 checkpoint (fp8 weights, bf16 KV, the
    optimised run's --max-num-batched-tokens 16384). cost: auto (the GPU profile) or roofline."""
    model, _, fp8 = model.partition(":")
    extra = ('dtype = "fp8"\nkv_cache_dtype = "bf16"\n', "max_num_batched_tokens = 16384\n") if fp8 else ("", "")
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "case.toml"
        cfg.write_text(f"""[workload]
source = "uniform"
num_requests = {n}
rate = inf
prompt = {{dist = "fixed", value = {prompt}}}
output = {{dist = "fixed", value = {output}}}
[model]
name = "{model}"
{extra[0]}[hardware]
name = "{hardware}"
tensor_parallel = {tp}
cost = "{cost}"
[scheduler]
policy = "chunked"
{extra[1]}""")
        out, err = Path(d) / "out.json", Path(d) / "err.txt"
        with open(out, "w") as o, open(err, "w") as e:
            stdout, stderr = sys.stdout, sys.stderr
            sys.stdout, sys.stderr = o, e
            try:
                code = main(["simulate", "--config", str(cfg), "--format", "json"])
            finally:
                sys.stdout, sys.stderr = stdout, stderr
        if code:
            raise SystemExit(err.read_text())
        summary = next(iter(json.loads(out.read_text()).values()))
        return tuple(summary[k] for k in KEYS)


def _cell(a: float, b: float) -> str:
    return f"{b:,.0f} ({b / a:.2f}x)" if a >= 100 else f"{b:.1f} ({b / a:.2f}x)"


def _pub(a: float) -> str:
    return f"{a:,.0f}" if a >= 100 else f"{a:.1f}"


def main_table() -> None:
    print("| case | duration s (pub / sim) | total tok/s (pub / sim) | mean TTFT ms (pub / sim) "
          "| mean TPOT ms (pub / sim) |")
    print("|---|---|---|---|---|")
    for label, model, hw, tp, p, o, n, pub, _ in CASES:
        sim = predict(model, hw, tp, p, o, n, "roofline")
        cells = [f"{_pub(a)} / {_cell(a, b)}" for a, b in zip(pub, sim)]
        print(f"| {label} | " + " | ".join(cells) + " |")


def both_table() -> None:
    """Published / GPU profile / roofline, per figure."""
    print("| case | duration s (pub / GPU form / roofline) | total tok/s | mean TTFT ms | mean TPOT ms |")
    print("|---|---|---|---|---|")
    for label, model, hw, tp, p, o, n, pub, _ in CASES:
        form = predict(model, hw, tp, p, o, n, "gpu-profile")
        roof = predict(model, hw, tp, p, o, n, "roofline")
        cells = [f"{_pub(a)} / {_cell(a, b)} / {_cell(a, c)}" for a, b, c in zip(pub, form, roof)]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main_table() if "--roofline-only" in sys.argv[1:] else both_table()
