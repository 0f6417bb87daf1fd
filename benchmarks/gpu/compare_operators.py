"""Price the steps batchlab's own backend measured on a GPU (`batchlab calibrate --device
cuda`: the profile's embedded measurements) with the GPU profile fitted on public operator
timings for the same GPU, and print the error by region: does the public-data profile
price batchlab's backend on this GPU?

    python benchmarks/gpu/compare_operators.py PROFILE.json [--gpu PRESET|auto]

auto: the preset whose name matches torch.cuda.get_device_name() (A100 -> a100-80gb,
H100 -> h100-sxm, A40 -> a40, H200 -> h200 scaled from h100-sxm, L4 -> l4 scaled from a40).
The engine loop differs (batchlab's, not vLLM's), so the table is printed twice: with the
profile's assumed step and sequence overhead, and with the overhead that best fits these
steps (the median of measured minus priced-without-overhead), which isolates the kernels."""
from __future__ import annotations

import argparse
import statistics
import sys

from batchlab.core.features import recorded_features
from batchlab.core.cost.profile import load_profile
from batchlab.core.model.hardware import HARDWARE
from batchlab.experiments.config import ExperimentConfig
from batchlab.experiments.setup.gpu import gpu_profile_for

NAMES = {"a100": "a100-80gb", "h100": "h100-sxm", "h200": "h200", "a40": "a40", "l4": "l4"}


def detect() -> str:
    import torch

    name = torch.cuda.get_device_name().lower()
    for key, preset in NAMES.items():
        if key in name:
            return preset
    sys.exit(f"compare_operators: no hardware preset for GPU {name!r}; give --gpu")


def table(rows: list[tuple[str, float]], title: str, signed: bool = False) -> str:
    """Relative errors (region, error) by region: median and p90 of |error|, the signed
    median (with `signed`), and the share priced high."""
    out = [title, f"  {'region':<10} {'steps':>5} {'median':>8} {'p90':>8} "
                  f"{'signed':>8} {'high':>6}" if signed else
           f"  {'region':<10} {'steps':>5} {'median':>8} {'p90':>8} {'high':>6}"]
    for region in sorted({r for r, _ in rows}) + ["all"]:
        e = [x for r, x in rows if region in (r, "all")]
        a = sorted(abs(x) for x in e)
        p90 = a[min(len(a) - 1, int(0.9 * len(a)))]
        mid = f" {statistics.median(e):>+8.1%}" if signed else ""
        out.append(f"  {region:<10} {len(e):>5} {statistics.median(a):>8.1%} {p90:>8.1%}{mid} "
                   f"{sum(x > 0 for x in e) / len(e):>6.0%}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--gpu", default="auto")
    ap.add_argument("--print-preset", action="store_true", help="print the GPU's preset and exit")
    args = ap.parse_args()
    if args.print_preset:
        print(detect() if args.gpu == "auto" else args.gpu)
        return
    measured = load_profile(args.profile)
    if not measured.measurements:
        sys.exit(f"{args.profile}: no embedded measurements to compare")
    gpu = detect() if args.gpu == "auto" else args.gpu
    cfg = ExperimentConfig.model_validate({"hardware": {"name": gpu}})
    gpu_profile, where = gpu_profile_for(cfg)
    model = measured.model if measured.model.dtype_bytes <= 2 else measured.model.model_copy(
        update={"dtype_bytes": 2, "kv_dtype_bytes": 2})  # the GPU form prices 16-bit serving
    cost = gpu_profile.cost(model, 1, HARDWARE[gpu])
    bare = gpu_profile.with_values({"step_s": 1e-12, "seq_s": 1e-12}).cost(model, 1, HARDWARE[gpu])
    steps = [(m.region, recorded_features(m.features), m.median_s)
             for m in measured.measurements]
    offset = statistics.median(t - bare.step_time(f) for _, f, t in steps)
    print(f"{args.profile}: {measured.describe()}; {len(steps)} measured steps")
    print(f"priced by GPU profile {where} ({gpu_profile.describe()})")
    print(table([(r, cost.step_time(f) / t - 1) for r, f, t in steps],
                f"priced / measured - 1, the profile's assumed overhead "
                f"({gpu_profile.params['step_s'].value * 1e3:.2f} ms a step)"))
    print(table([(r, (bare.step_time(f) + offset) / t - 1) for r, f, t in steps],
                f"the same with the overhead that fits these steps best ({offset * 1e3:.3f} ms a step)"))


if __name__ == "__main__":
    main()
