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
from batchlab.core.gpu_profile import ErrorStats

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


def judge_attention(rows: Sequence[AttentionTiming], bandwidth: float, peak16: float) -> dict[str, ErrorStats]:
    contexts = sorted({r.kv_tokens_read // r.num_seqs for r in rows})
    fold_of = {c: i % FOLDS for i, c in enumerate(contexts)}
    errs: list[tuple[bool, float]] = []
    for k in range(FOLDS):
        judged = [r for r in rows if fold_of[r.kv_tokens_read // r.num_seqs] == k]
        train = [r for r in rows if fold_of[r.kv_tokens_read // r.num_seqs] != k]
        if not judged or not train:
            continue
        x = list(fit_attention(train, bandwidth, peak16).values.values())
        d = AttentionArrays.of(judged)
        errs += zip([r.prefill for r in judged], (attention_prices(x, d, bandwidth, peak16) / d.time_s - 1).tolist())
    return {"decode": error_stats([e for p, e in errs if not p]),
            "prefill": error_stats([e for p, e in errs if p])}
