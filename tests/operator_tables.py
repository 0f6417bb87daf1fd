"""Small operator tables in Vidur's layout, written by the tests themselves: timings the GPU
form prices exactly with known constants (so a fit must find them again), and ways to spoil
them (tests/test_operator_tables.py)."""
from __future__ import annotations

import csv
from pathlib import Path

from batchlab.calibration.operators.vidur import ELEMENTWISE_OPS, GEMM_OPS, SHAPE_COLUMNS
from batchlab.core.cost.dispatch import gpu_cost, operator_shapes
from batchlab.core.cost.gpu_form import AllReduce, GpuCostParams
from batchlab.core.model.presets import lookup_hardware
from batchlab.core.model.spec import ModelSpec

TRUE = GpuCostParams(mem_efficiency=0.82, compute_efficiency=0.72, ridge_k=2.5, gemm_fixed_s=6e-6,
                     layer_fixed_s=8e-6, elementwise_efficiency=0.55, elementwise_row_efficiency=0.006,
                     attn_layer_s=15e-6, attn_seq_s=0.5e-6, attn_kv_efficiency=0.9,
                     attn_pair_efficiency=0.3, step_s=1e-3, seq_s=10e-6)
# (folder, heads, KV heads, hidden, intermediate, vocab)
SHAPES = [("small", 32, 8, 4096, 14336, 32000), ("mid", 40, 40, 5120, 13824, 32000),
          ("big", 64, 8, 8192, 28672, 32000)]
TOKENS = (1, 4, 16, 64, 128, 192, 256, 384, 512, 1024, 2048, 4096)
TPS = (1, 2, 4)
NONE = AllReduce({}, 1e-5, 1e11)


def header() -> list[str]:
    stats = [f"time_stats.{op}.{s}" for op in ("emb", *GEMM_OPS, *ELEMENTWISE_OPS)
             for s in ("min", "max", "mean", "median", "std")]
    return stats + list(SHAPE_COLUMNS)


def row(heads, kv, hidden, inter, vocab, tp, tokens, gpu="a100-80gb", params=TRUE) -> dict[str, str]:
    """One exact row: every operator's median the form's price at TRUE (elementwise split
    evenly over its five kernels)."""
    h = lookup_hardware(gpu)
    m = ModelSpec(name="t", num_layers=1, hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
                  head_dim=hidden // heads, intermediate_size=inter, vocab_size=vocab)
    form = gpu_cost(operator_shapes(m, tp), params, h.mem_bandwidth, h.peak_flops, h.peak_flops, NONE)
    out = {f"time_stats.emb.{s}": "0.001" for s in ("min", "max", "mean", "median", "std")}
    gemms = [form._gemm(mem, fl, tokens) for mem, fl in zip(form._gemm_mem, form._gemm_flop)]
    times = dict(zip(GEMM_OPS, gemms)) | {op: form._elementwise(tokens) / 5 for op in ELEMENTWISE_OPS}
    for op, t in times.items():
        for s in ("min", "max", "mean", "median"):
            out[f"time_stats.{op}.{s}"] = repr(t * 1e3)
        out[f"time_stats.{op}.std"] = "0.0"
    out |= {"n_head": str(heads), "n_kv_head": str(kv), "n_embd": str(hidden), "n_expanded_embd": str(inter),
            "vocab_size": str(vocab), "use_gated_mlp": "True", "num_tokens": str(tokens),
            "num_tensor_parallel_workers": str(tp)}
    return out


def write_csv(path: Path, rows: list[dict[str, str]], columns: list[str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns or header(), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def write_tables(root: Path, gpu: str = "a100", params: GpuCostParams = TRUE) -> Path:
    """root/compute/GPU/org/NAME/mlp.csv for every SHAPES model; returns root."""
    for name, heads, kv, hidden, inter, vocab in SHAPES:
        rows = [row(heads, kv, hidden, inter, vocab, tp, t, params=params) for tp in TPS for t in TOKENS]
        write_csv(root / "compute" / gpu / "org" / name / "mlp.csv", rows)
    return root


def mlp_path(root: Path, name: str = "small", gpu: str = "a100") -> Path:
    return root / "compute" / gpu / "org" / name / "mlp.csv"


def shared_vidur() -> Path:
    """../shared/gpu-profiles/vidur (from the repository, or from a worktree one folder deeper,
    or BATCHLAB_GPU_PROFILES); the test skips, saying where it looked, when absent."""
    import os

    import pytest

    repo = Path(__file__).resolve().parents[1]
    env = os.environ.get("BATCHLAB_GPU_PROFILES")
    tried = [Path(env)] if env else [repo.parent / "shared" / "gpu-profiles", repo.parent.parent / "shared" / "gpu-profiles"]
    for base in tried:
        if (base / "vidur" / "compute").is_dir():
            return base / "vidur"
    pytest.skip(f"the shared operator tables are absent (looked in {', '.join(map(str, tried))}; "
                f"set BATCHLAB_GPU_PROFILES)")
