/* batchlab.core.run_clock compiled: core/run_clock.py is the reference (and what runs
 * under BATCHLAB_PURE=1 or where this was not built); this is the same class, its
 * durations and times kept as C doubles, so that a run of decode steps costs no Python
 * float a step. Every sum and product is the one the Python code makes, in its order,
 * in IEEE double: built with -ffp-contract=off (setup.py), so that no a * b + c is fused
 * into one rounding (tests/test_run_clock.py compares the two, bit for bit). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>

#define FIRST_CAP 60 /* steps: a lone reply's run (~56) without growing, in pymalloc's sizes */

typedef struct {
    PyObject_HEAD
    double *t;        /* t[0] the start, t[j] the end of step j: steps + 1 of them */
    double *d;        /* d[j - 1] the duration of step j */
    Py_ssize_t steps;
    Py_ssize_t cap;   /* steps the buffers hold */
} RunClock;

static PyTypeObject RunClockType;

static int reserve(RunClock *self, Py_ssize_t more) {
    Py_ssize_t need = self->steps + more, cap = self->cap;
    if (need <= cap)
        return 0;
    while (cap < need)
        cap *= 2;
    double *t = PyMem_Realloc(self->t, (size_t)(cap + 1) * sizeof(double));
    if (t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->t = t;
    double *d = PyMem_Realloc(self->d, (size_t)cap * sizeof(double));
    if (d == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->d = d;
    self->cap = cap;
    return 0;
}

static PyObject *make(PyTypeObject *type, double t0) {
    RunClock *self = (RunClock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->t = PyMem_Malloc((FIRST_CAP + 1) * sizeof(double));
    self->d = PyMem_Malloc(FIRST_CAP * sizeof(double));
    if (self->t == NULL || self->d == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->cap = FIRST_CAP;
    self->steps = 0;
    self->t[0] = t0;
    return (PyObject *)self;
}

static int as_double(PyObject *o, double *out) {
    if (PyFloat_CheckExact(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        return 0;
    }
    *out = PyFloat_AsDouble(o); /* an int as Python's float(int): correctly rounded */
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *clock_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    double t0;
    if (n != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "RunClock(t0): one argument, the run's start");
        return NULL;
    }
    if (as_double(args[0], &t0) < 0)
        return NULL;
    return make((PyTypeObject *)type, t0);
}

static PyObject *clock_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    double t0;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "RunClock(t0): one argument, the run's start");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "d:RunClock", &t0))
        return NULL;
    return make(type, t0);
}

static void clock_dealloc(RunClock *self) {
    PyMem_Free(self->t);
    PyMem_Free(self->d);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t clock_len(RunClock *self) { return self->steps; }

/* One step of duration dj: the clock moves on as stepping moves it, t + dj. */
static inline void push(RunClock *self, double dj) {
    Py_ssize_t j = self->steps;
    self->d[j] = dj;
    self->t[j + 1] = self->t[j] + dj;
    self->steps = j + 1;
}

static PyObject *clock_add(RunClock *self, PyObject *arg) {
    double dj;
    if (as_double(arg, &dj) < 0 || reserve(self, 1) < 0)
        return NULL;
    push(self, dj);
    Py_RETURN_NONE;
}

static PyObject *clock_extend(RunClock *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "RunClock.extend: a list of durations");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if (reserve(self, n) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        double dj;
        if (as_double(items[i], &dj) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        push(self, dj);
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static int as_index(PyObject *o, long long *out) {
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* line(fixed, kv_coef, pair_coef, kv0, n, m): m steps of fixed + (kv_coef * kv +
 * pair_coef * kv), kv = kv0 + j n (j = 0..m-1): the decode stretch of a price linear in
 * its KV read (core/cost/form.py line_times, core/cost/gpu_step.py). */
static PyObject *clock_line(RunClock *self, PyObject *const *args, Py_ssize_t nargs) {
    double fixed, kv_coef, pair_coef;
    long long kv0, n, m;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "RunClock.line(fixed, kv_coef, pair_coef, kv0, n, m)");
        return NULL;
    }
    if (as_double(args[0], &fixed) < 0 || as_double(args[1], &kv_coef) < 0
        || as_double(args[2], &pair_coef) < 0 || as_index(args[3], &kv0) < 0
        || as_index(args[4], &n) < 0 || as_index(args[5], &m) < 0)
        return NULL;
    if (m <= 0)
        Py_RETURN_NONE;
    /* KV reads are counts; kv0 + (m - 1) n must fit a long long (Python's ints have no
     * bound, but no run reads 2^63 tokens). */
    if (kv0 < 0 || n < 0 || (n > 0 && m - 1 > (LLONG_MAX - kv0) / n)) {
        PyErr_SetString(PyExc_OverflowError, "RunClock.line: KV reads negative or past 2**63");
        return NULL;
    }
    if (reserve(self, (Py_ssize_t)m) < 0)
        return NULL;
    long long kv = kv0;
    for (long long j = 0; j < m; j++, kv += n) {
        double x = (double)kv;
        double a = kv_coef * x;
        double b = pair_coef * x;
        push(self, fixed + (a + b));
    }
    Py_RETURN_NONE;
}

/* o as an index from 0 to limit. */
static int bounded(PyObject *o, Py_ssize_t limit, Py_ssize_t *out) {
    Py_ssize_t j = PyLong_AsSsize_t(o);
    if (j == -1 && PyErr_Occurred())
        return -1;
    if (j < 0 || j > limit) {
        PyErr_SetString(PyExc_IndexError, "RunClock: no such time");
        return -1;
    }
    *out = j;
    return 0;
}

static PyObject *clock_time(RunClock *self, PyObject *arg) {
    Py_ssize_t j;
    if (bounded(arg, self->steps, &j) < 0)
        return NULL;
    return PyFloat_FromDouble(self->t[j]);
}

/* bisect(x, hi): bisect.bisect_left(times, x, 0, hi). */
static PyObject *clock_bisect(RunClock *self, PyObject *const *args, Py_ssize_t nargs) {
    double x;
    Py_ssize_t hi;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "RunClock.bisect(x, hi)");
        return NULL;
    }
    if (as_double(args[0], &x) < 0 || bounded(args[1], self->steps, &hi) < 0)
        return NULL;
    Py_ssize_t lo = 0;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (self->t[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return PyLong_FromSsize_t(lo);
}

/* (lo, hi) from 0 to limit; hi below lo: hi = lo (nothing). */
static int span(PyObject *const *args, Py_ssize_t nargs, const char *what, Py_ssize_t limit,
                Py_ssize_t *lo, Py_ssize_t *hi) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "RunClock.%s(lo, hi)", what);
        return -1;
    }
    if (bounded(args[0], limit, lo) < 0 || bounded(args[1], limit, hi) < 0)
        return -1;
    if (*hi < *lo)
        *hi = *lo;
    return 0;
}

static PyObject *floats(const double *x, Py_ssize_t n) {
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PyFloat_FromDouble(x[i]);
        if (f == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, f);
    }
    return out;
}

/* times(lo, hi): times lo..hi - 1 (hi at most the steps + 1), a list. */
static PyObject *clock_times(RunClock *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t lo, hi;
    if (span(args, nargs, "times", self->steps + 1, &lo, &hi) < 0)
        return NULL;
    return floats(self->t + lo, hi - lo);
}

static PyObject *clock_durations(RunClock *self, PyObject *unused) {
    return floats(self->d, self->steps);
}

/* gaps(lo, hi): times[j + 1] - times[j] for j = lo..hi - 1, as the bytes of doubles
 * (array("d").frombytes). hi at most the steps. */
static PyObject *clock_gaps(RunClock *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t lo, hi;
    if (span(args, nargs, "gaps", self->steps, &lo, &hi) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (hi - lo) * (Py_ssize_t)sizeof(double));
    if (out == NULL)
        return NULL;
    double *g = (double *)PyBytes_AS_STRING(out);
    for (Py_ssize_t j = lo; j < hi; j++)
        g[j - lo] = self->t[j + 1] - self->t[j];
    return out;
}

static PyMethodDef clock_methods[] = {
    {"add", (PyCFunction)clock_add, METH_O, "One step of duration d."},
    {"extend", (PyCFunction)clock_extend, METH_O, "Steps of these durations, in order."},
    {"line", (PyCFunction)(void (*)(void))clock_line, METH_FASTCALL,
     "m steps of fixed + (kv_coef * kv + pair_coef * kv), kv = kv0 + j n."},
    {"time", (PyCFunction)clock_time, METH_O, "times[j]: the start (0) or the end of step j."},
    {"bisect", (PyCFunction)(void (*)(void))clock_bisect, METH_FASTCALL,
     "bisect_left(times, x, 0, hi)."},
    {"times", (PyCFunction)(void (*)(void))clock_times, METH_FASTCALL, "times[lo:hi], a list."},
    {"durations", (PyCFunction)clock_durations, METH_NOARGS, "Every step's duration, a list."},
    {"gaps", (PyCFunction)(void (*)(void))clock_gaps, METH_FASTCALL,
     "times[j + 1] - times[j], j = lo..hi - 1, as bytes of doubles."},
    {NULL, NULL, 0, NULL}};

static PySequenceMethods clock_as_sequence = {.sq_length = (lenfunc)clock_len};

static PyTypeObject RunClockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "batchlab.core.run_clock.RunClock",
    .tp_basicsize = sizeof(RunClock),
    .tp_dealloc = (destructor)clock_dealloc,
    .tp_as_sequence = &clock_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A fast-forward run's step durations and times (core/run_clock.py).",
    .tp_methods = clock_methods,
    .tp_new = clock_new,
    .tp_vectorcall = clock_vectorcall,
};

static struct PyModuleDef run_clock_module = {
    PyModuleDef_HEAD_INIT, "batchlab.core.run_clock",
    "A fast-forward run's clock in C doubles (core/run_clock.py is the reference).", -1, NULL};

PyMODINIT_FUNC PyInit_run_clock(void) {
    if (PyType_Ready(&RunClockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&run_clock_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RunClockType);
    if (PyModule_AddObject(m, "RunClock", (PyObject *)&RunClockType) < 0) {
        Py_DECREF(&RunClockType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
