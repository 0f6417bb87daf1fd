"""The one-row decode's work between its GEMMs as three small C functions (RMSNorm;
rotary + K/V write + attention read through the block table in place; SiLU-mul),
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

SOURCE = r"""
#include <math.h>
#include <stdint.h>

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
    src.write_text(SOURCE)
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
    for f in (lib.rms_norm, lib.silu_mul, lib.attend):
        f.restype = None
    _lib = lib
    return lib
