"""Vidur's profiling CSVs (microsoft/vidur, MIT: data/profiling/): one decoder layer's
operators by tokens and TP degree (compute/GPU/ORG/MODEL/mlp.csv), attention kernels
(attention/GPU/attention.csv) and NCCL collectives (network/GPU_INTERCONNECT/*.csv).
Every row is checked as it is read (tables.py)."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from batchlab.calibration.operators.tables import (OperatorTableError, check_repeat, count, number,
                                                   read_rows, time_ms, where)
from batchlab.core.cost.dispatch import operator_shapes
from batchlab.core.cost.operator_shapes import OperatorShapes
from batchlab.core.model.spec import ModelSpec

# batchlab's hardware preset -> Vidur's GPU folder name
VIDUR_GPUS = {"a100-80gb": "a100", "h100-sxm": "h100", "a40": "a40"}

SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
                 "num_tokens", "num_tensor_parallel_workers")
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")  # qkv, o, gate_up, down
ELEMENTWISE_OPS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
MLP_COLUMNS = SHAPE_COLUMNS + tuple(f"time_stats.{op}.median" for op in GEMM_OPS + ELEMENTWISE_OPS)


class LayerTiming(NamedTuple):
    """One decoder layer's operators at `tokens` tokens on one GPU of a TP group."""
    label: str  # the model, as its folder names it
    shapes: OperatorShapes  # one layer's, at this TP degree
    tokens: int
    gemm_s: tuple[float, float, float, float]  # qkv, o, gate_up, down
    elementwise_s: float  # norms, rotary, activation, residual add together

    @property
    def tp(self) -> int:
        return self.shapes.tensor_parallel

    @property
    def total_s(self) -> float:
        return sum(self.gemm_s) + self.elementwise_s


def _model(path: Path, line: int, row: dict[str, str], label: str) -> ModelSpec:
    heads, kv = count(path, line, row, "n_head"), count(path, line, row, "n_kv_head")
    hidden = count(path, line, row, "n_embd")
    if hidden % heads:
        raise OperatorTableError(f"{where(path, line, 'n_embd')}: {hidden} is not a multiple of "
                                 f"n_head {heads} (the form needs a whole head size)")
    if heads % kv:
        raise OperatorTableError(f"{where(path, line, 'n_kv_head')}: {kv} KV heads do not divide "
                                 f"n_head {heads} evenly")
    return ModelSpec(name=label, num_layers=1, hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
                     head_dim=hidden // heads, intermediate_size=count(path, line, row, "n_expanded_embd"),
                     vocab_size=count(path, line, row, "vocab_size"))


def _shapes(path: Path, line: int, model: ModelSpec, tp: int) -> OperatorShapes:
    try:
        return operator_shapes(model, tp)
    except ValueError as e:
        raise OperatorTableError(f"{where(path, line, 'num_tensor_parallel_workers')}: {e}") from None


def is_gated(path: Path) -> bool:
    """Whether an mlp.csv times a gated (SwiGLU) MLP: the form's Llama-family layer. Vidur's
    phi-2 is not (a GeLU MLP in parallel with attention, no second norm)."""
    rows = read_rows(path, ("use_gated_mlp",), "Vidur mlp.csv")
    # Any gated row makes it a gated table: read_mlp then names a row that is not.
    return any(row["use_gated_mlp"].strip().lower() == "true" for _, row in rows)


def read_mlp(path: Path, label: str) -> list[LayerTiming]:
    """A Vidur mlp.csv: one LayerTiming per shape; repeats of a shape averaged (or refused
    where they conflict)."""
    seen: dict[tuple, tuple[int, LayerTiming]] = {}
    sums: dict[tuple, list] = {}
    for line, row in read_rows(path, MLP_COLUMNS, "Vidur mlp.csv"):
        if row["use_gated_mlp"].strip().lower() != "true":
            raise OperatorTableError(f"{where(path, line, 'use_gated_mlp')}: the form prices gated "
                                     f"(SwiGLU) MLPs, got {row['use_gated_mlp']!r}")
        model = _model(path, line, row, label)
        tp = count(path, line, row, "num_tensor_parallel_workers")
        tokens = count(path, line, row, "num_tokens")
        gemms = tuple(time_ms(path, line, row, f"time_stats.{op}.median") for op in GEMM_OPS)
        elem = [time_ms(path, line, row, f"time_stats.{op}.median") for op in ELEMENTWISE_OPS]
        key = (model.model_dump_json(), tp, tokens)
        t = LayerTiming(label, _shapes(path, line, model, tp), tokens, gemms, sum(elem))
        if key in seen:
            first_line, first = seen[key]
            for op, a, b in zip(GEMM_OPS, first.gemm_s, t.gemm_s):
                check_repeat(path, line, first_line, f"time_stats.{op}.median", a, b)
            check_repeat(path, line, first_line, "the elementwise operators", first.elementwise_s, t.elementwise_s)
            sums[key].append(t)
        else:
            seen[key] = (line, t)
            sums[key] = [t]
    out = []
    for group in sums.values():
        n = len(group)
        g = tuple(sum(t.gemm_s[i] for t in group) / n for i in range(4))
        out.append(group[0]._replace(gemm_s=g, elementwise_s=sum(t.elementwise_s for t in group) / n))
    return out


class AttentionTiming(NamedTuple):
    """One attention kernel call (one layer, one GPU): a decode batch or a prefill chunk."""
    shapes: OperatorShapes
    prefill: bool
    num_seqs: int
    kv_tokens_read: int
    attention_pairs: int
    time_s: float
    self_pairs: int = 0  # a prefill chunk's pairs with itself (of attention_pairs)
    prefill_tokens: int = 0


ATTENTION_COLUMNS = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size",
                     "prefill_chunk_size", "kv_cache_size", "is_prefill",
                     "time_stats.attn_decode.median", "time_stats.attn_prefill.median")


def read_attention(path: Path) -> list[AttentionTiming]:
    """Vidur's attention.csv: decode rows (batch_size sequences of kv_cache_size tokens each,
    one new token apiece) and prefill rows (a chunk after kv_cache_size cached tokens)."""
    out, seen = [], {}
    for line, row in read_rows(path, ATTENTION_COLUMNS, "Vidur attention.csv"):
        heads, kv = count(path, line, row, "n_q_head"), count(path, line, row, "n_kv_head")
        hidden = count(path, line, row, "n_embd")
        if hidden % heads or heads % kv:
            raise OperatorTableError(f"{where(path, line, 'n_embd')}: {hidden} hidden, {heads} heads, "
                                     f"{kv} KV heads: not a shape of whole heads")
        model = ModelSpec(name="attention", num_layers=1, hidden_size=hidden, num_heads=heads,
                          num_kv_heads=kv, head_dim=hidden // heads, intermediate_size=1, vocab_size=1)
        shapes = _shapes(path, line, model, count(path, line, row, "num_tensor_parallel_workers"))
        prefill = row["is_prefill"].strip().lower() == "true"
        n = count(path, line, row, "batch_size")
        cached = count(path, line, row, "kv_cache_size", least=0)
        if prefill:
            chunk = count(path, line, row, "prefill_chunk_size")
            col = "time_stats.attn_prefill.median"
            own = n * (chunk * (chunk + 1) // 2)
            kv_read, pairs, tokens = n * (cached + chunk), n * chunk * cached + own, n * chunk
        else:
            col = "time_stats.attn_decode.median"
            kv_read = pairs = n * (cached + 1)
            own = tokens = 0
        t = time_ms(path, line, row, col)
        for extra in ("time_stats.attn_input_reshape.median", "time_stats.attn_output_reshape.median"):
            if row.get(extra, "") not in ("", None):  # below the timer's resolution: 0
                v = number(path, line, row, extra)
                if v < 0:
                    raise OperatorTableError(f"{where(path, line, extra)}: expected a time >= 0 ms, got {row[extra]!r}")
                t += v / 1e3
        key = (hidden, heads, kv, shapes.tensor_parallel, prefill, n, kv_read, pairs)
        if key in seen:
            check_repeat(path, line, seen[key][0], col, seen[key][1], t)
        else:
            seen[key] = (line, t)
            out.append(AttentionTiming(shapes, prefill, n, kv_read, pairs, t, own, tokens))
    return out


class CollectiveTiming(NamedTuple):
    gpus: int
    nbytes: int
    time_s: float
    devices_per_node: int


def read_collective(path: Path, op: str) -> list[CollectiveTiming]:
    """Vidur's network all_reduce.csv / send_recv.csv: seconds by message size and GPUs."""
    col = f"time_stats.{op}.median"
    out = []
    for line, row in read_rows(path, (col, "num_workers", "size", "devices_per_node"), f"Vidur {op}.csv"):
        out.append(CollectiveTiming(count(path, line, row, "num_workers"), count(path, line, row, "size"),
                                    time_ms(path, line, row, col), count(path, line, row, "devices_per_node")))
    return out
