"""Price the GPU kernels of batchlab's backend steps (kernel_times.py's JSON, or the lines
it printed) with a GPU profile fitted on public operator timings, part by part: GEMMs,
elementwise kernels, attention (with the KV cache's write and gather), and the whole step
without the engine loop. Also the host's share: the step's wall time against its kernels.

    python benchmarks/gpu/compare_kernels.py KERNELS.json|KERNELS.txt ... --gpu h200 --model DIR

A printed line carries only the step's total; a JSON point, its kernels by kind."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from compare_operators import table  # this folder's: the same error table

from batchlab.calibration.sweep.grid import features_of, parse_key
from batchlab.core.model.config_json import read_config_file, spec_from_config
from batchlab.core.cost.dispatch import operator_shapes
from batchlab.core.model.hardware import HARDWARE
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.setup.gpu import gpu_profile_for

LINE = re.compile(r"^\d+/\d+ (\S+): wall ([\d.]+) ms, kernels ([\d.]+) ms")
OFF = {"loop": {"step_s": 0.0, "seq_s": 0.0},
       "attention": {"attn_layer_s": 0.0, "attn_seq_s": 0.0, "attn_prefill_token_s": 0.0,
                     "attn_kv_efficiency": 1e9, "attn_pair_efficiency": 1e9},
       "elementwise": {"layer_fixed_s": 0.0, "elementwise_efficiency": 1e9,
                       "elementwise_row_efficiency": 1e9}}
MEASURED = {"gemm": ("gemm",), "elementwise": ("elementwise",), "attention": ("attention", "kv_gather")}


def read_points(path: Path) -> list[dict]:
    if path.suffix == ".json":
        return json.loads(path.read_text())["points"]
    out = []
    for line in path.read_text().splitlines():
        m = LINE.match(line)
        if m:
            out.append({"key": m[1], "wall_s": float(m[2]) / 1e3,
                        "kernels_s": {"all": float(m[3]) / 1e3}})
    return out


def priced_parts(profile, model, hw, features) -> dict[str, float]:
    """Seconds of each part of the profile's price: switched off one after another."""
    values: dict[str, float] = {}
    prices = [profile.cost(model, 1, hw).step_time(features)]
    for part in ("loop", "attention", "elementwise"):
        values |= OFF[part]
        prices.append(profile.with_values(values).cost(model, 1, hw).step_time(features))
    return {"loop": prices[0] - prices[1], "attention": prices[1] - prices[2],
            "elementwise": prices[2] - prices[3], "gemm": prices[3], "kernels": prices[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", nargs="+", type=Path)
    ap.add_argument("--gpu", required=True, help="hardware preset whose GPU profile prices the kernels")
    ap.add_argument("--model", required=True, help="the checkpoint directory (config.json) that ran")
    args = ap.parse_args()
    raw, _ = read_config_file(args.model)
    model = spec_from_config(raw, Path(args.model).name, str(args.model))
    hw = HARDWARE[args.gpu]
    profile, where = gpu_profile_for(ExperimentConfig.model_validate({"hardware": {"name": args.gpu}}))
    points = {p["key"]: p for path in args.kernels for p in read_points(path)}  # later files win
    print(f"{len(points)} steps of {model.name} priced by GPU profile {where}")
    parts: dict[str, list[tuple[str, float]]] = {k: [] for k in (*MEASURED, "kernels", "host")}
    for key, p in points.items():
        point = parse_key(key)
        priced = priced_parts(profile, model, hw, features_of(point))
        k = p["kernels_s"]
        parts["kernels"].append((point.region, priced["kernels"] / sum(
            v for kind, v in k.items() if kind != "copy") - 1))
        parts["host"].append((point.region, p["wall_s"] / sum(k.values()) - 1))
        for part, kinds in MEASURED.items():
            if all(kind in k for kind in kinds):
                parts[part].append((point.region, priced[part] / sum(k[kind] for kind in kinds) - 1))
    print(table(parts["kernels"], "the step's kernels (input copies aside): priced / measured - 1",
                signed=True))
    for part in MEASURED:
        if parts[part]:
            print(table(parts[part], f"{part}: priced / measured - 1", signed=True))
    print(table(parts["host"], "the step's wall time / its kernels' time - 1 (the host's share)",
                signed=True))
    shapes = operator_shapes(model, 1)
    for key, tokens in (("p16@0", 16), ("p4096@0", 4096)):
        k = points.get(key, {}).get("kernels_s", {})
        if "gemm" in k:
            layer_bytes = sum(g.weight_bytes for g in shapes.gemms) * shapes.layers
            flops = sum(g.flops_per_token for g in shapes.gemms) * shapes.layers * tokens
            print(f"{key}: the GEMMs (layers and LM head) {k['gemm'] * 1e3:.2f} ms: "
                  f"{(layer_bytes + shapes.head.weight_bytes) / k['gemm'] / 1e12:.2f} TB/s of weights, "
                  f"{flops / k['gemm'] / 1e12:.0f} TFLOP/s "
                  f"(datasheet {hw.mem_bandwidth / 1e12:.2f} TB/s, {hw.peak_flops / 1e12:.0f} TFLOP/s)")


if __name__ == "__main__":
    main()
