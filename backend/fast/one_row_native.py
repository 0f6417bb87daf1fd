"""The one-row decode's work between its GEMMs as three small C functions (RMSNorm;
rotary + K/V write + attention read through the block table in place; SiLU-mul), and a
dense model's whole step (`step`: those and its matrix-vector products; one_row_step.py),
compiled once per process with the system C compiler and called through ctypes.

Why not torch ops: on a CPU each GEMM of a one-row step streams megabytes of weights
through the caches, and the next small torch op then runs cold: measured on this
project's 2-core Xeon, an RMSNorm of 768 floats took 8 us hot and 75-95 us right after a
GEMM (its dispatcher and kernel code evicted), a multiply 4 us hot and 27 us cold. A
batchlab-small step has 49 GEMMs and ~30 small ops between each pair; a C function
touches a few cache lines of code where a torch op touches the dispatcher's
(docs/results/2026-12-06-backend-engine.md).

float32 only. None where no compiler is found or the build fails: the caller then runs
the same step with torch ops (backend/fast/one_row.py)."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import tempfile
from pathlib import Path

from batchlab.core import atomic

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* out = x * rsqrt(mean(x^2) + eps) * w, accumulated in double */
void rms_norm(const float *x, const float *w, float *out, int n, float eps) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(s / n) + eps);
    for (int i = 0; i < n; i++) out[i] = (x[i] * r) * w[i];
}

/* gate_up [2n] -> out [n] = silu(gate) * up */
void silu_mul(const float *gu, float *out, int n) {
    for (int i = 0; i < n; i++) {
        float g = gu[i];
        out[i] = (g / (1.0f + expf(-g))) * gu[n + i];
    }
}

/* qkv [(nh + 2 kvh) * d]: rotary on q and k in place (sin carries rotate_half's sign),
   k and v stored at `slot` of this layer's pool [2][kvh][nb * bs][d], then each q head
   attends keys [lo, ctx) read through `table` (block ids of key 0, bs, 2 bs, ...). */
void attend(float *qkv, float *pool, long slot, const int64_t *table, long lo, long ctx,
            const float *cos_, const float *sin_, int nh, int kvh, int d, int bs, long nb,
            float *scores, float *out) {
    int half = d / 2;
    for (int h = 0; h < nh + kvh; h++) {
        float *x = qkv + (long)h * d;
        for (int j = 0; j < half; j++) {
            float a = x[j], b = x[j + half];
            x[j] = a * cos_[j] + b * sin_[j];
            x[j + half] = b * cos_[j + half] + a * sin_[j + half];
        }
    }
    long plane = (long)kvh * nb * bs * d;
    for (int h = 0; h < kvh; h++) {
        float *kd = pool + ((long)h * nb * bs + slot) * d, *vd = kd + plane;
        const float *ks = qkv + (long)(nh + h) * d, *vs = qkv + (long)(nh + kvh + h) * d;
        for (int j = 0; j < d; j++) { kd[j] = ks[j]; vd[j] = vs[j]; }
    }
    float scale = 1.0f / sqrtf((float)d);
    int g = nh / kvh;
    long n = ctx - lo;
    for (int h = 0; h < nh; h++) {
        const float *q = qkv + (long)h * d;
        const float *kbase = pool + (long)(h / g) * nb * bs * d;
        float m = -INFINITY;
        for (long t = 0; t < n; t++) {
            long key = lo + t;
            const float *k = kbase + (table[key / bs] * bs + key % bs) * d;
            float s = 0.0f;
            #pragma omp simd reduction(+:s)
            for (int j = 0; j < d; j++) s += q[j] * k[j];
            s *= scale;
            scores[t] = s;
            if (s > m) m = s;
        }
        float sum = 0.0f;
        for (long t = 0; t < n; t++) { scores[t] = expf(scores[t] - m); sum += scores[t]; }
        float *o = out + (long)h * d;
        for (int j = 0; j < d; j++) o[j] = 0.0f;
        for (long t = 0; t < n; t++) {
            long key = lo + t;
            const float *v = kbase + plane + (table[key / bs] * bs + key % bs) * d;
            float p = scores[t] / sum;
            #pragma omp simd
            for (int j = 0; j < d; j++) o[j] += p * v[j];
        }
    }
}

/* y = W x (+ b) (+ res): W row-major [out][in], x small enough to stay in L1; y may be
   res (a residual add in place). Four rows at a time: four streams of weights in flight. */
static inline float finish(float s, const float *b, const float *res, long o) {
    if (b) s += b[o];
    return res ? s + res[o] : s;
}

static void gemv(const float *W, const float *b, const float *x, const float *res, float *y,
                 long out, long in) {
    long o = 0;
#ifdef __AVX512F__
    /* eight rows at a time, 16 floats a load: 10-15% less CPU than the loop below here */
    for (; in % 16 == 0 && o + 8 <= out; o += 8) {
        const float *w = W + o * in;
        __m512 a[8];
        for (int r = 0; r < 8; r++) a[r] = _mm512_setzero_ps();
        for (long j = 0; j < in; j += 16) {
            __m512 xv = _mm512_loadu_ps(x + j);
            for (int r = 0; r < 8; r++) a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(w + r * in + j), xv, a[r]);
        }
        for (int r = 0; r < 8; r++) y[o + r] = finish(_mm512_reduce_add_ps(a[r]), b, res, o + r);
    }
#endif
    for (; o + 4 <= out; o += 4) {
        const float *w0 = W + o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        #pragma omp simd reduction(+:s0,s1,s2,s3)
        for (long j = 0; j < in; j++) {
            float xj = x[j];
            s0 += w0[j] * xj; s1 += w1[j] * xj; s2 += w2[j] * xj; s3 += w3[j] * xj;
        }
        y[o] = finish(s0, b, res, o); y[o + 1] = finish(s1, b, res, o + 1);
        y[o + 2] = finish(s2, b, res, o + 2); y[o + 3] = finish(s3, b, res, o + 3);
    }
    for (; o < out; o++) {
        const float *w = W + o * in;
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (long j = 0; j < in; j++) s += w[j] * x[j];
        y[o] = finish(s, b, res, o);
    }
}

/* Per layer, int64 slots: weight and bias pointers (0: no bias), window (0: full). */
enum { LN1, QKV_W, QKV_B, O_W, O_B, LN2, GU_W, GU_B, DOWN_W, DOWN_B, WINDOW, PER_LAYER };
#define F32(v) ((const float *)(intptr_t)(v))

/* A whole one-row decode step of a dense model: embedding row `token` through every layer
   (K/V written at `position`'s slot of `table`, the sequence's blocks from its first),
   the final norm and the LM head into logits [vocab]. dims: hidden, heads, kv heads,
   head dim, intermediate, vocab, layers, block size, pool blocks. work: the floats
   step_work() counts. */
void step(long token, const float *embed, const int64_t *layers, const int64_t *dims, float eps,
          float *pool, const int64_t *table, long position, const float *cos_, const float *sin_,
          const float *norm, const float *lm_w, float *work, float *logits) {
    long hid = dims[0], nh = dims[1], kvh = dims[2], d = dims[3], inter = dims[4];
    long vocab = dims[5], nl = dims[6], bs = dims[7], nb = dims[8];
    long nqkv = (nh + 2 * kvh) * d, ctx = position + 1;
    float *x = work, *h = x + hid, *qkv = h + hid, *attn = qkv + nqkv, *gu = attn + nh * d;
    float *y = gu + 2 * inter, *scores = y + inter;
    long slot = table[position / bs] * bs + position % bs, layer_floats = 2 * kvh * nb * bs * d;
    for (long i = 0; i < hid; i++) x[i] = embed[token * hid + i];
    for (long l = 0; l < nl; l++) {
        const int64_t *w = layers + l * PER_LAYER;
        rms_norm(x, F32(w[LN1]), h, (int)hid, eps);
        gemv(F32(w[QKV_W]), F32(w[QKV_B]), h, 0, qkv, nqkv, hid);
        long lo = w[WINDOW] > 0 && ctx > w[WINDOW] ? ctx - w[WINDOW] : 0;
        attend(qkv, pool + l * layer_floats, slot, table, lo, ctx, cos_ + position * d,
               sin_ + position * d, (int)nh, (int)kvh, (int)d, (int)bs, nb, scores, attn);
        gemv(F32(w[O_W]), F32(w[O_B]), attn, x, x, hid, nh * d);
        rms_norm(x, F32(w[LN2]), h, (int)hid, eps);
        gemv(F32(w[GU_W]), F32(w[GU_B]), h, 0, gu, 2 * inter, hid);
        silu_mul(gu, y, (int)inter);
        gemv(F32(w[DOWN_W]), F32(w[DOWN_B]), y, x, x, hid, inter);
    }
    rms_norm(x, norm, h, (int)hid, eps);
    gemv(lm_w, 0, h, 0, logits, vocab, hid);
}
"""
FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-shared", "-fPIC"]
_P, _I, _L, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_float
_lib: ctypes.CDLL | None = None
_tried = False


def native_lib() -> ctypes.CDLL | None:
    """The compiled functions (built on first use in this process), or None."""
    global _lib, _tried
    if _tried:
        return _lib
    _tried = True
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    d = Path(tempfile.mkdtemp(prefix="batchlab-one-row-"))  # -march=native: this machine's own
    src, so = d / "one_row.c", d / "one_row.so"
    atomic.write_text(src, SOURCE)  # a private folder, but no writer goes around the helper
    try:
        subprocess.run([cc, *FLAGS, str(src), "-o", str(so), "-lm"], check=True, capture_output=True,
                       timeout=120)
        lib = ctypes.CDLL(str(so))
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        shutil.rmtree(d, ignore_errors=True)  # a loaded library stays mapped; leave no files
    lib.rms_norm.argtypes = [_P, _P, _P, _I, _F]
    lib.silu_mul.argtypes = [_P, _P, _I]
    lib.attend.argtypes = [_P, _P, _L, _P, _L, _L, _P, _P, _I, _I, _I, _I, _L, _P, _P]
    lib.step.argtypes = [_L, _P, _P, _P, _F, _P, _P, _L, _P, _P, _P, _P, _P, _P]
    for f in (lib.rms_norm, lib.silu_mul, lib.attend, lib.step):
        f.restype = None
    _lib = lib
    return lib
