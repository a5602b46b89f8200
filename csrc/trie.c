/* A parser state's class mask: the product walk of its word DAG with the sigma_in trie (the native
 * engine's mask, cfgzip_lab.native.walk; the Python product walk is the reference).
 *
 *   trie_new / trie_mask  the trie as arrays; the class set of a state in a Python store's node list
 *   Words.trie_mask       the same walk over a compiled store (one walk, two readers: Dag below)
 *   trie_arrays           the arrays trie_new takes, from the index's own (SigmaInIndex.kernel_arrays
 *                         is the reference)
 */
#include "native_rows.h"
#include "words.h"

/* The sigma_in trie as arrays (see trie_new below). */
typedef struct {
    Py_buffer ptr, syms, kids, dense_idx, dense, list_ptr, list_cls;
    Py_buffer fptr, fedges; /* counted repetitions' IN(f, lo, hi) edges (empty buffers where none), see trie_new */
    Py_ssize_t nodes, words;
    int64_t family_base, c_mask; /* F_c = family_base + (f << c_bits) + c: c = v & c_mask, f = v >> c_bits */
    int c_bits;
} Trie;

/* whether trie node nt has an edge to follow (a child or an IN(f, lo, hi) edge): the Python walk's row.deep */
static inline int trie_deep(const Trie *t, Py_ssize_t nt) {
    const int32_t *ptr = (const int32_t *)t->ptr.buf, *fptr = (const int32_t *)t->fptr.buf;
    return ptr[nt + 1] > ptr[nt] || (fptr && fptr[nt + 1] > fptr[nt]);
}

/* OR the class set of trie node nt into out (uint64[t->words]). */
static inline void trie_or_classes(const Trie *t, Py_ssize_t nt, uint64_t *restrict out) {
    const int32_t *di = (const int32_t *)t->dense_idx.buf;
    if (di[nt] >= 0) { /* words read once: out may not alias the trie, so the OR is vectorised */
        const Py_ssize_t words = t->words;
        const uint64_t *restrict row = (const uint64_t *)t->dense.buf + (size_t)di[nt] * words;
        for (Py_ssize_t w = 0; w < words; w++) out[w] |= row[w];
    } else {
        const int32_t *lp = (const int32_t *)t->list_ptr.buf, *lc = (const int32_t *)t->list_cls.buf;
        for (Py_ssize_t k = lp[nt]; k < lp[nt + 1]; k++) out[lc[k] >> 6] |= (uint64_t)1 << (lc[k] & 63);
    }
}

/* ---- the class mask of a parser state: the product walk of its word DAG with the sigma_in trie ----
 *
 * trie_new(ptr, syms, kids, dense_idx, dense, list_ptr, list_cls, words[, fptr, fedges, family_base, c_bits])
 * keeps the trie as arrays (cfgzip_lab.native.walk builds them from the SigmaInIndex): node t's children are
 * syms/kids[ptr[t]:ptr[t+1]], sorted by symbol; its class set is the dense row dense[dense_idx[t] * words : ...]
 * (uint64) when dense_idx[t] >= 0, else the classes list_cls[list_ptr[t]:list_ptr[t+1]]. A counted-repetition
 * trie also has IN(f, lo, hi) edges: node t's are fedges[4 * fptr[t] : 4 * fptr[t+1]] (int64 rows family, lo,
 * hi, child), and a DAG symbol F_c >= family_base (family f, count c) follows each of them whose family is f
 * and whose interval holds c (the Python walk's families rows).
 * trie_mask(trie, nodes, state, out) ORs into out (uint64[words], zeroed first) the class sets of every
 * trie node that a word of `state` spells from the root: the store's nodes (a list of (accepts, ((symbol,
 * child), ...)) tuples, edges sorted by symbol) are read, never written. The DAG is deterministic and the
 * trie a tree, so each (DAG node, trie node) pair is reached by one path only: no memo, no visited set. With
 * IN(f, lo, hi) edges it is not (F_1 and F_2 may lead to one child, and one interval holds both), so that walk
 * keeps the pairs it has entered (Seen below) and enters each once, as the Python walk's memo does.
 */
/* Release a trie's buffers and the trie itself (the capsule's destructor, or a failed trie_new). */
static void trie_release(Trie *t) {
    PyBuffer_Release(&t->ptr);
    PyBuffer_Release(&t->syms);
    PyBuffer_Release(&t->kids);
    PyBuffer_Release(&t->dense_idx);
    PyBuffer_Release(&t->dense);
    PyBuffer_Release(&t->list_ptr);
    PyBuffer_Release(&t->list_cls);
    PyBuffer_Release(&t->fptr);
    PyBuffer_Release(&t->fedges);
    PyMem_Free(t);
}

static void trie_free(PyObject *capsule) {
    Trie *t = (Trie *)PyCapsule_GetPointer(capsule, "cfgzip_trie");
    if (t) trie_release(t);
}

/* whether the IN(f, lo, hi) edges (none: fptr not given) fit the trie: fptr int32[nodes + 1] in order, fedges
 * int64[fptr[nodes] * 4] of (family, lo, hi, child) with 0 <= lo <= hi and a child inside the trie, and a
 * member encoding F_c = family_base + (f << c_bits) + c with family_base > 0 and 0 < c_bits < 63. */
static int trie_families_fit(Trie *t) {
    if (!t->fptr.buf) return !t->fedges.buf;
    const int32_t *fp = (const int32_t *)t->fptr.buf;
    const int64_t *fe = (const int64_t *)t->fedges.buf;
    if (t->fptr.len != (t->nodes + 1) * 4 || fp[0] != 0 || t->family_base <= 0 || t->c_bits <= 0 || t->c_bits >= 63)
        return 0;
    for (Py_ssize_t i = 0; i < t->nodes; i++)
        if (fp[i] > fp[i + 1]) return 0;
    if (t->fedges.len != (Py_ssize_t)fp[t->nodes] * 32) return 0;
    for (Py_ssize_t k = 0; k < fp[t->nodes]; k++) {
        const int64_t *e = fe + 4 * k;
        if (e[0] < 0 || e[1] < 0 || e[1] > e[2] || e[3] <= 0 || e[3] >= t->nodes) return 0;
    }
    t->c_mask = ((int64_t)1 << t->c_bits) - 1;
    return 1;
}

PyObject *trie_new(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t words;
    Trie *t = PyMem_Calloc(1, sizeof(Trie));
    if (!t) return PyErr_NoMemory();
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*n|y*y*Li", &t->ptr, &t->syms, &t->kids, &t->dense_idx, &t->dense,
                          &t->list_ptr, &t->list_cls, &words, &t->fptr, &t->fedges, &t->family_base, &t->c_bits)) {
        PyMem_Free(t);
        return NULL;
    }
    t->words = words;
    t->nodes = t->ptr.len / 4 - 1;
    const int32_t *ptr = (const int32_t *)t->ptr.buf, *lp = (const int32_t *)t->list_ptr.buf;
    const int32_t *kids = (const int32_t *)t->kids.buf, *di = (const int32_t *)t->dense_idx.buf;
    const int32_t *lc = (const int32_t *)t->list_cls.buf;
    Py_ssize_t ne = t->syms.len / 4, nd = words > 0 ? t->dense.len / 8 / words : 0, nl = t->list_cls.len / 4;
    int ok = t->nodes >= 1 && words > 0 && t->kids.len == t->syms.len && t->dense_idx.len == t->nodes * 4 &&
             t->list_ptr.len == t->ptr.len && ptr[0] == 0 && ptr[t->nodes] == ne && lp[0] == 0 && lp[t->nodes] == nl &&
             t->dense.len == nd * words * 8;
    for (Py_ssize_t i = 0; ok && i < t->nodes; i++)
        ok = ptr[i] <= ptr[i + 1] && lp[i] <= lp[i + 1] && di[i] < nd;
    for (Py_ssize_t i = 0; ok && i < ne; i++) ok = kids[i] > 0 && kids[i] < t->nodes;
    for (Py_ssize_t i = 0; ok && i < nl; i++) ok = lc[i] >= 0 && lc[i] < words * 64;
    ok = ok && trie_families_fit(t);
    PyObject *capsule = ok ? PyCapsule_New(t, "cfgzip_trie", trie_free) : NULL;
    if (!capsule) {
        if (!ok) PyErr_SetString(PyExc_ValueError, "trie_new: the trie arrays do not fit each other");
        trie_release(t);
    }
    return capsule;
}

/* trie_arrays(edges, indptr, classes, nodes, dense_classes, words) -> (ptr, syms, kids, dense_idx, rows,
 * list_ptr, list_cls) as bytes, the arrays trie_new takes, from a SigmaInIndex's own arrays in one pass
 * each (cfgzip_lab.native.index.SigmaInIndex.kernel_arrays is the reference, equal array for array;
 * its numpy passes and the bool matrix of the dense rows took 4 ms of sql_select's engine):
 *   edges    int32[E * 3]: (parent, symbol, child), sorted by parent then symbol (None if they are not:
 *            the caller sorts them in numpy)
 *   indptr   int64[nodes + 1], classes int32[F]: node t's classes, classes[indptr[t]:indptr[t+1]]
 * A node with dense_classes classes or more gets a dense row of `words` uint64 (bit k: class k). */
PyObject *trie_arrays(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer eb, ib, cb;
    Py_ssize_t nodes, dense_classes, words;
    if (!PyArg_ParseTuple(args, "y*y*y*nnn", &eb, &ib, &cb, &nodes, &dense_classes, &words)) return NULL;
    PyObject *result = NULL, *out[7] = {NULL};
    const int32_t *e = (const int32_t *)eb.buf, *cls = (const int32_t *)cb.buf;
    const int64_t *ip = (const int64_t *)ib.buf;
    Py_ssize_t ne = eb.len / 12, nc = cb.len / 4;
    if (eb.len % 12 || ib.len != (nodes + 1) * 8 || cb.len % 4 || nodes < 1 || words < 1 || ip[0] != 0 ||
        ip[nodes] != nc) {
        PyErr_SetString(PyExc_ValueError, "trie_arrays: the index arrays do not fit each other");
        goto done;
    }
    for (Py_ssize_t i = 0; i < ne; i++) {
        int32_t p = e[3 * i], k = e[3 * i + 2];
        if (p < 0 || p >= nodes || k <= 0 || k >= nodes) {
            PyErr_SetString(PyExc_ValueError, "trie_arrays: an edge names a node the index does not have");
            goto done;
        }
        if (i && (p < e[3 * i - 3] || (p == e[3 * i - 3] && e[3 * i + 1] < e[3 * i - 2]))) {
            result = Py_NewRef(Py_None); /* not sorted */
            goto done;
        }
    }
    Py_ssize_t ndense = 0, nlist = 0;
    for (Py_ssize_t t = 0; t < nodes; t++) {
        int64_t c = ip[t + 1] - ip[t];
        if (c < 0) {
            PyErr_SetString(PyExc_ValueError, "trie_arrays: the class lists are not in order");
            goto done;
        }
        if (c >= dense_classes) ndense++;
        else nlist += c;
    }
    for (Py_ssize_t i = 0; i < nc; i++)
        if (cls[i] < 0 || cls[i] >= words * 64) {
            PyErr_SetString(PyExc_ValueError, "trie_arrays: a class past the rows' words");
            goto done;
        }
    char *d[7];
    Py_ssize_t sizes[7] = {(nodes + 1) * 4, ne * 4, ne * 4, nodes * 4, ndense * words * 8, (nodes + 1) * 4, nlist * 4};
    for (int a = 0; a < 7; a++) {
        out[a] = PyBytes_FromStringAndSize(NULL, sizes[a]);
        if (!out[a]) goto done;
        d[a] = PyBytes_AS_STRING(out[a]);
    }
    int32_t *ptr = (int32_t *)d[0], *syms = (int32_t *)d[1], *kids = (int32_t *)d[2], *di = (int32_t *)d[3];
    uint64_t *rows = (uint64_t *)d[4];
    int32_t *lptr = (int32_t *)d[5], *lcls = (int32_t *)d[6];
    memset(ptr, 0, (size_t)sizes[0]);
    memset(rows, 0, (size_t)sizes[4]);
    for (Py_ssize_t i = 0; i < ne; i++) {
        ptr[e[3 * i] + 1]++;
        syms[i] = e[3 * i + 1];
        kids[i] = e[3 * i + 2];
    }
    for (Py_ssize_t t = 0; t < nodes; t++) ptr[t + 1] += ptr[t];
    Py_ssize_t nd = 0, nl = 0;
    lptr[0] = 0;
    for (Py_ssize_t t = 0; t < nodes; t++) {
        if (ip[t + 1] - ip[t] >= dense_classes) {
            uint64_t *row = rows + (size_t)nd * words;
            for (int64_t j = ip[t]; j < ip[t + 1]; j++) row[cls[j] >> 6] |= (uint64_t)1 << (cls[j] & 63);
            di[t] = (int32_t)nd++;
        } else {
            di[t] = -1;
            for (int64_t j = ip[t]; j < ip[t + 1]; j++) lcls[nl++] = cls[j];
        }
        lptr[t + 1] = (int32_t)nl;
    }
    result = PyTuple_New(7);
    if (result)
        for (int a = 0; a < 7; a++) {
            PyTuple_SET_ITEM(result, a, out[a]);
            out[a] = NULL;
        }
done:
    for (int a = 0; a < 7; a++) Py_XDECREF(out[a]);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&ib);
    PyBuffer_Release(&cb);
    return result;
}

/* The word DAG a state's mask walks: the compiled store's arrays (S), or a Python WordStore's node list
 * (nodes: (accepts, ((symbol, child), ...)) tuples, edges sorted by symbol), read, never written. The
 * walk below is written once for both; only these two readers tell them apart. */
typedef struct {
    const Words *S;
    PyObject *nodes;
} Dag;

static int bad_store(void) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "trie_mask: not a word store node list");
    return -1;
}

/* node's edge count, and for a node list its edge tuple; -1 with TypeError where the list is not a store's */
static inline int dag_open(const Dag *d, int64_t node, Py_ssize_t *n, PyObject **edges) {
    if (d->S) {
        *n = (Py_ssize_t)n_edges(d->S, node);
        return 0;
    }
    if (node < 0 || node >= PyList_GET_SIZE(d->nodes)) return bad_store();
    PyObject *entry = PyList_GET_ITEM(d->nodes, node);
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) return bad_store();
    *edges = PyTuple_GET_ITEM(entry, 1);
    if (!PyTuple_Check(*edges)) return bad_store();
    *n = PyTuple_GET_SIZE(*edges);
    return 0;
}

/* edge i of node: its symbol, or (child != NULL) its child */
static inline int dag_edge(const Dag *d, int64_t node, PyObject *edges, Py_ssize_t i, int64_t *sym, int64_t *child) {
    if (d->S) {
        int64_t e = d->S->estart[node] + i;
        if (child) *child = d->S->ekid[e];
        else *sym = d->S->esym[e];
        return 0;
    }
    PyObject *e = PyTuple_GET_ITEM(edges, i);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) return bad_store();
    long v = PyLong_AsLong(PyTuple_GET_ITEM(e, child ? 1 : 0));
    if (v == -1 && PyErr_Occurred()) return -1;
    *(child ? child : sym) = v;
    return 0;
}

/* The (DAG node, trie node) pairs a walk over IN(f, lo, hi) edges has entered: open addressing on
 * node << 32 | trie node, plus one (0: an empty slot), doubled at half full. */
typedef struct {
    uint64_t *keys;
    size_t cap, n;
} Seen;

/* 1 where (node, nt) is new (now kept), 0 where it was entered before, -1 with MemoryError */
static int seen_add(Seen *s, int64_t node, Py_ssize_t nt) {
    if (node < 0 || node >= ((int64_t)1 << 32)) return 1; /* never from a store's ids; walked, not kept */
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        uint64_t *keys = PyMem_Calloc(cap, sizeof(uint64_t));
        if (!keys) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i]) {
                size_t h = (size_t)(s->keys[i] * 0x9E3779B97F4A7C15ull) & (cap - 1);
                while (keys[h]) h = (h + 1) & (cap - 1);
                keys[h] = s->keys[i];
            }
        PyMem_Free(s->keys);
        s->keys = keys;
        s->cap = cap;
    }
    uint64_t key = (((uint64_t)node << 32) | (uint64_t)nt) + 1;
    size_t h = (size_t)(key * 0x9E3779B97F4A7C15ull) & (s->cap - 1);
    for (; s->keys[h]; h = (h + 1) & (s->cap - 1))
        if (s->keys[h] == key) return 0;
    s->keys[h] = key;
    s->n++;
    return 1;
}

static int trie_walk(const Trie *t, const Dag *d, int64_t node, Py_ssize_t tn, uint64_t *out, Seen *seen);

/* The DAG edge i of node reaches trie node nt: OR its class set, then walk the edge's child below nt (once
 * per pair where seen is kept). */
static int trie_follow(const Trie *t, const Dag *d, int64_t node, PyObject *edges, Py_ssize_t i, Py_ssize_t nt,
                       uint64_t *out, Seen *seen) {
    int64_t child;
    trie_or_classes(t, nt, out);
    if (!trie_deep(t, nt)) return 0;
    if (dag_edge(d, node, edges, i, NULL, &child) < 0) return -1;
    if (child == W_EPSILON) return 0;
    if (seen) {
        int fresh = seen_add(seen, child, nt);
        if (fresh <= 0) return fresh;
    }
    return trie_walk(t, d, child, nt, out, seen);
}

/* OR into out the class sets of the trie nodes below tn that words of `node` spell. Both sides are sorted
 * by symbol, so one merge pass per (DAG node, trie node) pair; a member F_c (sorted after every
 * nonterminal) follows each IN(f, lo, hi) edge of tn whose family is f and whose interval holds c. */
static int trie_walk(const Trie *t, const Dag *d, int64_t node, Py_ssize_t tn, uint64_t *out, Seen *seen) {
    Py_ssize_t ne;
    PyObject *edges = NULL;
    if (dag_open(d, node, &ne, &edges) < 0) return -1;
    const int32_t *ptr = (const int32_t *)t->ptr.buf, *syms = (const int32_t *)t->syms.buf;
    const int32_t *kids = (const int32_t *)t->kids.buf, *fptr = (const int32_t *)t->fptr.buf;
    const int64_t *fe = (const int64_t *)t->fedges.buf;
    Py_ssize_t j = ptr[tn], jend = ptr[tn + 1];
    Py_ssize_t fa = fptr ? fptr[tn] : 0, fb = fptr ? fptr[tn + 1] : 0;
    for (Py_ssize_t i = 0; i < ne && (j < jend || fa < fb); i++) {
        int64_t sym;
        if (dag_edge(d, node, edges, i, &sym, NULL) < 0) return -1;
        if (fa < fb && sym >= t->family_base) {
            int64_t f = (sym - t->family_base) >> t->c_bits, c = (sym - t->family_base) & t->c_mask;
            for (Py_ssize_t k = fa; k < fb; k++)
                if (fe[4 * k] == f && fe[4 * k + 1] <= c && c <= fe[4 * k + 2] &&
                    trie_follow(t, d, node, edges, i, (Py_ssize_t)fe[4 * k + 3], out, seen) < 0)
                    return -1;
            continue;
        }
        while (j < jend && syms[j] < sym) j++;
        if (j == jend || syms[j] != sym) continue;
        if (trie_follow(t, d, node, edges, i, kids[j], out, seen) < 0) return -1;
    }
    return 0;
}

/* out (uint64[words], zeroed first) = the class set of `state`: the one place both trie_mask functions
 * meet. NULL with an exception set where the capsule is not a trie or out has the wrong size. */
static PyObject *mask_of(PyObject *capsule, const Dag *d, int64_t state, Py_buffer *out) {
    Trie *t = (Trie *)PyCapsule_GetPointer(capsule, "cfgzip_trie");
    PyObject *result = NULL;
    if (t && out->len != t->words * 8) PyErr_SetString(PyExc_ValueError, "trie_mask: out has the wrong size");
    else if (t) {
        Seen seen = {NULL, 0, 0};
        memset(out->buf, 0, (size_t)out->len);
        if (trie_walk(t, d, state, 0, (uint64_t *)out->buf, t->fedges.len ? &seen : NULL) == 0)
            result = Py_NewRef(Py_None);
        PyMem_Free(seen.keys);
    }
    PyBuffer_Release(out);
    return result;
}

/* trie_mask(trie, nodes, state, out): the class set of `state` in a Python WordStore's node list. */
PyObject *trie_mask(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    Dag d = {NULL, NULL};
    Py_ssize_t state;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "OO!nw*", &capsule, &PyList_Type, &d.nodes, &state, &out)) return NULL;
    return mask_of(capsule, &d, state, &out);
}

/* Words.trie_mask(trie, state, out): the class set of `state` in this compiled store. */
PyObject *words_trie_mask(Words *S, PyObject *args) {
    PyObject *capsule;
    long long state;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "OLw*", &capsule, &state, &out)) return NULL;
    if (check_node(S, state) < 0) {
        PyBuffer_Release(&out);
        return NULL;
    }
    Dag d = {S, NULL};
    return mask_of(capsule, &d, state, &out);
}

/* The class set of `state` in the compiled store S into out (words uint64, zeroed first): the walk of
 * Words.trie_mask without its Python arguments, for fill.c (native_rows.h); -1 with the exception set. */
int trie_class_set(PyObject *capsule, Words *S, int64_t state, uint64_t *out, Py_ssize_t words) {
    Trie *t = (Trie *)PyCapsule_GetPointer(capsule, "cfgzip_trie");
    if (!t) return -1;
    if (words != t->words) {
        PyErr_SetString(PyExc_ValueError, "trie_mask: out has the wrong size");
        return -1;
    }
    if (check_node(S, state) < 0) return -1;
    memset(out, 0, (size_t)words * 8);
    Dag d = {S, NULL};
    Seen seen = {NULL, 0, 0}; /* counted repetitions' (node, trie node) pairs, as in mask_of */
    int rc = trie_walk(t, &d, state, 0, out, t->fedges.len ? &seen : NULL);
    PyMem_Free(seen.keys);
    return rc;
}
