"""Least-squares fits of the GPU form's constants on operator timings (scipy, on log
times: every shape's relative error weighs alike). The layer's GEMMs and elementwise
kernels give the efficiencies, the ridge's k and the fixed costs; attention kernels give
the attention terms. Predictions here are the form's own arithmetic, vectorised
(tests/test_gpu_cost.py checks them against core/cost/gpu_form.py)."""
from __future__ import annotations

from typing import NamedTuple
from collections.abc import Sequence

import numpy as np
from scipy.optimize import least_squares

from batchlab.calibration.operators.vidur import AttentionTiming, LayerTiming
from batchlab.core.cost.gpu_form import GEMM_TILE_TOKENS, SMALL_M_ROWS, TILE_CHOICES, prefill_token_width

LAYER_PARAMS = ("mem_efficiency", "compute_efficiency", "ridge_k", "gemm_fixed_s", "layer_fixed_s",
                "elementwise_efficiency", "elementwise_row_efficiency")
LAYER_START = (0.8, 0.7, 3.0, 5e-6, 10e-6, 0.5, 0.01)
LAYER_BOUNDS = ((0.05, 0.05, 1.0, 0.0, 0.0, 0.02, 1e-5), (1.5, 1.5, 40.0, 1e-3, 1e-3, 3.0, 1.0))
ATTN_PARAMS = ("attn_layer_s", "attn_seq_s", "attn_kv_efficiency", "attn_pair_efficiency",
               "attn_self_pair_cost", "attn_prefill_token_s")
ATTN_START = (10e-6, 0.2e-6, 0.7, 0.5, 2.0, 0.05e-6)
# r_self from a tenth to ten times a cached-key pair: the kernels' diagonal blocks cost 2-4x
ATTN_BOUNDS = ((0.0, 0.0, 0.02, 0.02, 0.1, 0.0), (1e-3, 1e-4, 3.0, 3.0, 10.0, 1e-5))


class Fitted(NamedTuple):
    values: dict[str, float]
    stderr: dict[str, float]
    rms_log: float  # root mean square of log(priced / measured) on what it was fitted on


class LayerArrays(NamedTuple):
    weight: np.ndarray  # (n, 4) bytes
    flops: np.ndarray  # (n, 4) per token
    tokens: np.ndarray  # (n,)
    elem_bytes: np.ndarray  # (n,) per token
    gemm_s: np.ndarray  # (n, 4) measured
    elem_s: np.ndarray  # (n,)

    @classmethod
    def of(cls, rows: Sequence[LayerTiming]) -> LayerArrays:
        return cls(np.array([[g.weight_bytes for g in r.shapes.gemms] for r in rows]),
                   np.array([[g.flops_per_token for g in r.shapes.gemms] for r in rows]),
                   np.array([r.tokens for r in rows], dtype=float),
                   np.array([r.shapes.elementwise_bytes_per_token for r in rows]),
                   np.array([r.gemm_s for r in rows]), np.array([r.elementwise_s for r in rows]))


def region(tokens: float) -> str:
    """Where a step of this many tokens sits: decode (< 128: memory-bound GEMMs), ridge
    (128-512: chunked-prefill steps, where memory and compute meet) or prefill (> 512)."""
    return "decode" if tokens < 128 else "ridge" if tokens <= 512 else "prefill"


REGIONS = ("decode", "ridge", "prefill")


def region_weights(tokens: np.ndarray) -> np.ndarray:
    """Residual weights that give each region the same say, however many shapes each has
    (the tables time many more prefill sizes than decode ones)."""
    names = np.array([region(t) for t in tokens])
    w = np.ones(len(tokens))
    for r in REGIONS:
        n = int((names == r).sum())
        if n:
            w[names == r] = np.sqrt(len(tokens) / (len(REGIONS) * n))
    return w


def smooth(a: np.ndarray, b: np.ndarray, k: float) -> np.ndarray:
    m = np.maximum(a, b)
    return m * ((a / m) ** k + (b / m) ** k) ** (1.0 / k)


def layer_prices(x: Sequence[float], d: LayerArrays, bandwidth: float, peak: float,
                 tile: float = GEMM_TILE_TOKENS) -> tuple[np.ndarray, np.ndarray]:
    """(each GEMM's seconds (n, 4), the elementwise kernels' (n,)) at constants x."""
    mem_eff, comp_eff, k, c_gemm, c_layer, elem_eff, row_eff = x
    mem = d.weight / (bandwidth * mem_eff)
    rows = np.where(d.tokens > SMALL_M_ROWS, np.ceil(d.tokens / tile) * tile, d.tokens)  # gemm_rows()
    comp = d.flops * rows[:, None] / (peak * comp_eff)
    return smooth(mem, comp, k) + c_gemm, (c_layer + d.elem_bytes / (bandwidth * row_eff)
                                   + d.elem_bytes * d.tokens / (bandwidth * elem_eff))


def _stderr(res, n_resid: int) -> np.ndarray:
    """Standard errors from the Jacobian at the optimum (residuals taken as independent:
    a lower bound, which is why knobs also widen by the held-out error)."""
    J = res.jac
    dof = max(n_resid - J.shape[1], 1)
    s2 = float(res.fun @ res.fun) / dof
    try:
        cov = np.linalg.pinv(J.T @ J) * s2
    except np.linalg.LinAlgError:
        return np.full(J.shape[1], np.nan)
    return np.sqrt(np.clip(np.diag(cov), 0, None))


def fit_layers(rows: Sequence[LayerTiming], bandwidth: float, peak: float,
               tile: float = GEMM_TILE_TOKENS) -> Fitted:
    """The layer constants on these timings: log error of every GEMM, of the elementwise kernels
    together, and (weighing double: what a step is judged on) of the layer's total."""
    d = LayerArrays.of(rows)
    log_g, log_e = np.log(d.gemm_s), np.log(d.elem_s)
    w = region_weights(d.tokens)
    log_total = np.log(d.gemm_s.sum(axis=1) + d.elem_s)
    scale = np.array([0.1, 0.1, 1.0, 1e-6, 1e-6, 0.1, 1e-3])

    def resid(x):
        g, e = layer_prices(x, d, bandwidth, peak, tile)
        total = np.log(g.sum(axis=1) + e) - log_total
        return np.concatenate([((np.log(g) - log_g) * w[:, None]).ravel(), (np.log(e) - log_e) * w,
                               2 * total * w])

    res = least_squares(resid, LAYER_START, bounds=LAYER_BOUNDS, x_scale=scale, method="trf")
    se = _stderr(res, len(res.fun))
    return Fitted(dict(zip(LAYER_PARAMS, map(float, res.x))), dict(zip(LAYER_PARAMS, map(float, se))),
                  float(np.sqrt(np.mean(res.fun ** 2))))


def best_tile(rows: Sequence[LayerTiming], bandwidth: float, peak: float) -> tuple[float, Fitted]:
    """The GEMM tile (TILE_CHOICES) whose fit prices these timings best (in-sample error:
    the held-out shapes play no part in the choice), and that fit."""
    fits = {t: fit_layers(rows, bandwidth, peak, t) for t in TILE_CHOICES}
    tile = min(fits, key=lambda t: fits[t].rms_log)
    return tile, fits[tile]


class AttentionArrays(NamedTuple):
    seqs: np.ndarray
    kv_bytes: np.ndarray  # bytes read
    pair_flops: np.ndarray
    self_flops: np.ndarray  # of pair_flops: prefill chunks' own pairs
    prefill_tokens: np.ndarray  # times the shape's a_tok width (core/cost/gpu_form.py)
    time_s: np.ndarray

    @classmethod
    def of(cls, rows: Sequence[AttentionTiming]) -> AttentionArrays:
        return cls(np.array([r.num_seqs for r in rows], dtype=float),
                   np.array([r.kv_tokens_read * r.shapes.kv_bytes_per_token for r in rows]),
                   np.array([r.attention_pairs * r.shapes.attn_flops_per_pair for r in rows]),
                   np.array([r.self_pairs * r.shapes.attn_flops_per_pair for r in rows]),
                   np.array([r.prefill_tokens * prefill_token_width(r.shapes.attn_flops_per_pair)
                             for r in rows], dtype=float),
                   np.array([r.time_s for r in rows]))


def attention_prices(x: Sequence[float], d: AttentionArrays, bandwidth: float, peak16: float) -> np.ndarray:
    """core/cost/gpu_form.py's attention terms for one layer."""
    c, a_seq, kv_eff, pair_eff, self_cost, a_tok = x
    pair = 1 / (peak16 * pair_eff)
    return (c + a_seq * d.seqs + d.kv_bytes / (bandwidth * kv_eff) + d.pair_flops * pair
            + d.self_flops * pair * (self_cost - 1) + a_tok * d.prefill_tokens)


def fit_attention(rows: Sequence[AttentionTiming], bandwidth: float, peak16: float) -> Fitted:
    d = AttentionArrays.of(rows)
    log_t = np.log(d.time_s)
    scale = np.array([1e-6, 1e-7, 0.1, 0.1, 1.0, 1e-8])
    res = least_squares(lambda x: np.log(attention_prices(x, d, bandwidth, peak16)) - log_t,
                        ATTN_START, bounds=ATTN_BOUNDS, x_scale=scale, method="trf")
    se = _stderr(res, len(res.fun))
    return Fitted(dict(zip(ATTN_PARAMS, map(float, res.x))), dict(zip(ATTN_PARAMS, map(float, se))),
                  float(np.sqrt(np.mean(res.fun ** 2))))
