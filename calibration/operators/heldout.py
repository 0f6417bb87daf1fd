"""Judging a fit on data left out of it. Layers: for every (model, TP degree) measured,
fit on the other models at the other TP degrees and price the left-out model at the
left-out TP, shape by shape; errors by region (fit.region) and by TP. Attention (one
model shape measured): fit on three quarters of the context lengths, judge the rest."""
from __future__ import annotations

from typing import NamedTuple
from collections.abc import Sequence

from batchlab.calibration.operators.collectives import error_stats
from batchlab.calibration.operators.fit import (REGIONS, AttentionArrays, LayerArrays, attention_prices,
                                                fit_attention, fit_layers, layer_prices, region)
from batchlab.calibration.operators.vidur import AttentionTiming, LayerTiming
from batchlab.core.cost.gpu_profile import ErrorStats

FOLDS = 4


class LayerJudgment(NamedTuple):
    scheme: str
    overall: ErrorStats
    by_region: dict[str, ErrorStats]
    by_tp: dict[str, ErrorStats]
    by_model: dict[str, ErrorStats]
    fits: int


def judge_layers(rows: Sequence[LayerTiming], bandwidth: float, peak: float, tile: float) -> LayerJudgment:
    models = sorted({r.label for r in rows})
    tps = sorted({r.tp for r in rows})
    errs: list[tuple[LayerTiming, float]] = []
    fits = 0
    for m in models:
        for tp in tps:
            judged = [r for r in rows if r.label == m and r.tp == tp]
            train = [r for r in rows if r.label != m and r.tp != tp]
            if not judged or len({r.label for r in train}) < 2:
                continue
            fitted = fit_layers(train, bandwidth, peak, tile)
            fits += 1
            d = LayerArrays.of(judged)
            g, e = layer_prices(list(fitted.values.values()), d, bandwidth, peak, tile)
            priced = g.sum(axis=1) + e
            measured = d.gemm_s.sum(axis=1) + d.elem_s
            errs += zip(judged, (priced / measured - 1).tolist())
    scheme = ("each (model, TP degree) priced by a fit on the other models at the other TP "
              f"degrees ({fits} fits); a step is one decoder layer's GEMMs and elementwise kernels")
    return LayerJudgment(
        scheme, error_stats([e for _, e in errs]),
        {g: error_stats([e for r, e in errs if region(r.tokens) == g]) for g in REGIONS},
        {str(t): error_stats([e for r, e in errs if r.tp == t]) for t in tps},
        {m: error_stats([e for r, e in errs if r.label == m]) for m in models}, fits)


def judge_attention(priced: Sequence[tuple[AttentionTiming, float]]) -> dict[str, ErrorStats]:
    """Decode and prefill errors of attention rows priced by heldout_attention."""
    errs = [(r.prefill, p / r.time_s - 1) for r, p in priced]
    return {"decode": error_stats([e for p, e in errs if not p]),
            "prefill": error_stats([e for p, e in errs if p])}


def heldout_attention(rows: Sequence[AttentionTiming], bandwidth: float, peak16: float
                      ) -> list[tuple[AttentionTiming, float]]:
    """Each row with its price from a fit on the other context quarters (rows whose other
    quarters hold nothing to fit on are left out)."""
    contexts = sorted({r.kv_tokens_read // r.num_seqs for r in rows})
    fold_of = {c: i % FOLDS for i, c in enumerate(contexts)}
    out: list[tuple[AttentionTiming, float]] = []
    for k in range(FOLDS):
        judged = [r for r in rows if fold_of[r.kv_tokens_read // r.num_seqs] == k]
        train = [r for r in rows if fold_of[r.kv_tokens_read // r.num_seqs] != k]
        if not judged or not train:
            continue
        x = list(fit_attention(train, bandwidth, peak16).values.values())
        out += zip(judged, attention_prices(x, AttentionArrays.of(judged), bandwidth, peak16).tolist())
    return out


def judge_steps(layers: Sequence[LayerTiming], attention: Sequence[tuple[AttentionTiming, float]],
                bandwidth: float, peak: float, tile: float) -> dict[str, ErrorStats]:
    """Whole steps where both halves were timed: one layer's operators at a step's tokens
    plus its attention kernel (times the layers, which cancel in the ratio), for the model
    shape the attention table times and every layer table of that shape at that TP degree.
    Each half priced by a fit that never saw it: the layers by one on the models of other
    shapes at the other TP degrees, the attention by heldout_attention (its rows and prices
    given). (All-reduce, priced from its own table, and the engine's assumed loop are left
    out.) By region of the step's tokens: decode steps, then prefill chunks by size."""
    if not attention:
        return {}
    shape = attention[0][0].shapes
    tp = shape.tensor_parallel

    def same_shape(r: LayerTiming) -> bool:
        s = r.shapes
        return (s.kv_bytes_per_token, s.attn_flops_per_pair) == (shape.kv_bytes_per_token, shape.attn_flops_per_pair)
    twins = [r for r in layers if r.tp == tp and same_shape(r)]
    labels = sorted({r.label for r in twins})
    train = [r for r in layers if r.tp != tp and r.label not in labels]
    if not twins or len({r.label for r in train}) < 2:
        return {}
    x = list(fit_layers(train, bandwidth, peak, tile).values.values())
    g, e = layer_prices(x, LayerArrays.of(twins), bandwidth, peak, tile)
    layer_priced = {(r.label, r.tokens): (float(gp.sum() + ep), r.total_s) for r, gp, ep in zip(twins, g, e)}
    errs: list[tuple[str, float]] = []
    for r, a_priced in attention:
        tokens = r.prefill_tokens if r.prefill else r.num_seqs
        for label in labels:
            both = layer_priced.get((label, tokens))
            if both is not None:
                priced, measured = both
                errs.append((region(tokens), (priced + a_priced) / (measured + r.time_s) - 1))
    return {**{g: error_stats([e for k, e in errs if k == g]) for g in REGIONS if any(k == g for k, _ in errs)},
            "all": error_stats([e for _, e in errs])}
