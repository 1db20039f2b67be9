# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Native kernel of :meth:`estimator.aggregate.SampleBank.sum_samples` (typed Cython, an optional
extension that ``pip install`` builds beside :mod:`estimator.native_import` where a C compiler
exists: setup.py; found by :func:`estimator.aggregate.native_mc`).

:func:`add_shared_log` is :func:`estimator.aggregate._shared_log_total` followed by the gather of
the drawn outcomes, for all of a network's ``log`` families at once, on typed arrays: the same
sums in another order (``tests/test_fastpath.py`` holds the two to the reference draws). Where it
is not built, the numpy code runs; the results agree to rounding.
"""
from libc.stdlib cimport malloc, free


cdef void family_total(const double[::1] table, const double[::1] center, const double[::1] scale,
                       Py_ssize_t r0, Py_ssize_t r1, double* g, double* mag, double* acc,
                       Py_ssize_t* where, double* us, double* uc) noexcept nogil:
    """``g[j] = sum_k center[k] * factor(scale[k] * table[j])`` over rows ``r0..r1``."""
    cdef Py_ssize_t n = table.shape[0], j, k, d, nd = 0, nneg = 0
    cdef double csum = 0.0, cs = 0.0
    for k in range(r0, r1):  # the distinct scales, their layers' centres added
        csum += center[k]
        cs += center[k] * scale[k]
        for d in range(nd):
            if us[d] == scale[k]:
                uc[d] += center[k]
                break
        else:
            us[nd] = scale[k]
            uc[nd] = center[k]
            nd += 1
    for j in range(n):
        if table[j] < 0:
            where[nneg] = j
            mag[nneg] = -table[j]
            acc[nneg] = 0.0
            nneg += 1
        else:  # above the estimate the factor is linear in the outcome
            g[j] = table[j] * cs + csum
    for d in range(nd):
        for j in range(nneg):
            acc[j] += uc[d] / (1.0 + us[d] * mag[j])
    for j in range(nneg):
        g[where[j]] = acc[j]


def add_shared_log(double[::1] total, list tables, list slots, const double[::1] center,
                   const double[::1] scale, const Py_ssize_t[::1] rows):
    """``total[i] += sum_f g_f[slots[f][i]]``, ``g_f[j] = sum_k center[k] * factor(scale[k] *
    tables[f][j])`` over family ``f``'s rows ``rows[2f]..rows[2f + 1]`` of ``center`` and
    ``scale``: ``factor(a) = 1 + a`` above the estimate (``a >= 0``) and ``1 / (1 - a)`` below it.
    ``slots[f]``: int32 outcome indices, one per sample. Raises before writing on any bad input."""
    cdef Py_ssize_t F = len(tables), m = total.shape[0], f, i, n, off, nall = 0, nmax = 1, kmax = 1
    cdef const double[::1] t
    cdef const int[::1] s
    cdef unsigned int un, bad
    if len(slots) != F or rows.shape[0] != 2 * F:
        raise ValueError(f"{F} tables, {len(slots)} slot rows and {rows.shape[0]} row bounds: need F, F and 2F")
    if scale.shape[0] != center.shape[0]:
        raise ValueError(f"center and scale differ in length ({center.shape[0]} and {scale.shape[0]})")
    for f in range(F):
        if not 0 <= rows[2 * f] < rows[2 * f + 1] <= center.shape[0]:
            raise ValueError(f"family {f}: rows {rows[2 * f]}..{rows[2 * f + 1]} outside 0..{center.shape[0]}")
        n = len(tables[f])
        nall += n
        nmax = max(nmax, n)
        kmax = max(kmax, rows[2 * f + 1] - rows[2 * f])
    cdef double* g = <double*>malloc((nall + 1) * sizeof(double))  # every family's totals, one after another
    cdef double* mag = <double*>malloc(nmax * sizeof(double))  # one family's outcomes below the estimate
    cdef double* acc = <double*>malloc(nmax * sizeof(double))
    cdef Py_ssize_t* where = <Py_ssize_t*>malloc(nmax * sizeof(Py_ssize_t))
    cdef double* us = <double*>malloc(kmax * sizeof(double))
    cdef double* uc = <double*>malloc(kmax * sizeof(double))
    cdef const int** sp = <const int**>malloc((F + 1) * sizeof(int*))
    cdef Py_ssize_t* go = <Py_ssize_t*>malloc((F + 1) * sizeof(Py_ssize_t))
    try:
        if g == NULL or mag == NULL or acc == NULL or where == NULL or us == NULL or uc == NULL or sp == NULL \
                or go == NULL:
            raise MemoryError()
        off = 0
        for f in range(F):  # check and compute (nothing written to total yet)
            t = tables[f]
            s = slots[f]
            n = t.shape[0]
            if s.shape[0] != m:
                raise ValueError(f"family {f}: {s.shape[0]} slots for {m} samples")
            un = <unsigned int>n
            bad = 0
            with nogil:
                for i in range(m):
                    bad |= <unsigned int>s[i] >= un
            if bad:
                i = next(i for i in range(m) if not 0 <= s[i] < n)
                raise IndexError(f"family {f}: slot {s[i]} outside its {n} outcomes")
            sp[f] = &s[0] if m else NULL  # (the arrays stay alive in the caller's lists)
            go[f] = off
            with nogil:
                family_total(t, center, scale, rows[2 * f], rows[2 * f + 1], g + off, mag, acc, where, us, uc)
            off += n
        with nogil:
            for f in range(F):
                for i in range(m):
                    total[i] += g[go[f] + sp[f][i]]
    finally:
        free(g); free(mag); free(acc); free(where); free(us); free(uc); free(sp); free(go)
