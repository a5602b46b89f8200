/* The native engine's expansion kernel: a class set -> XGrammar's packed int32 vocabulary row.
 *
 * Optional (cfgzip_lab.native.rows uses its numpy path when this module is absent, and the tests
 * compare the two bit for bit). Built by `pip install -e .` / the wheel build (pyproject.toml,
 * tool.setuptools ext-modules, optional = true): a machine without a C compiler still installs.
 *
 * The same split as cfgzip_lab.kernels.cpu, without numpy's per-call costs and its 128k-byte
 * scratch row: the large classes are packed four at a time into tables of all 16 unions of their
 * rows (one OR of W words per group of four, none for a group with no class in the set), and the
 * small classes set (or clear, whichever touches fewer words) their bits directly in the packed row,
 * one precomputed (word, bits) pair per class and word.
 * Measured with Llama-3 (bython, 3,015 classes, 9,180 small-class tokens): see rows.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int in_set(const uint8_t *set, Py_ssize_t set_len, int32_t c) {
    Py_ssize_t byte = c >> 3;
    return byte < set_len && ((set[byte] >> (c & 7)) & 1);
}

/* expand_row(class_set, groups, tables, indptr, pair_words, pair_bits, small_all, out)
 *   class_set   bytes: the class set, little endian (bit k = class k)
 *   groups      int32[G * 4]: the large classes of each group (a group may repeat its last class)
 *   tables      int32[G * 16 * W]: row (g, code) = OR of the rows of the members whose bit is in code
 *   indptr      int32[K + 1]: class k's (word, bits) pairs are pair_words/pair_bits[indptr[k]:indptr[k+1]]
 *               (empty for the classes in the tables)
 *   pair_words  int32[P], pair_bits int32[P]: the words of the packed row a small class's tokens sit in,
 *               and the OR of their bits in that word
 *   small_all   int32[W]: the bits of every small class's tokens
 *   out         writable int32[W]: overwritten with the packed vocabulary row
 * Small classes: when most of their pairs are in the set, start from small_all and clear the bits of
 * the classes not in it (a token is in one class only, so no table row holds those bits); otherwise
 * set the bits of the classes in it.
 */
static PyObject *expand_row(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer set, groups, tables, indptr, words_b, bits_b, all_b, out;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*", &set, &groups, &tables, &indptr, &words_b, &bits_b, &all_b, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t words = out.len / 4, ngroups = groups.len / 16, nclasses = indptr.len / 4 - 1;
    const int32_t *ip = (const int32_t *)indptr.buf;
    if (tables.len != ngroups * 16 * words * 4 || all_b.len != out.len || words_b.len != bits_b.len || nclasses < 0 ||
        ip[nclasses] != words_b.len / 4 || set.len * 8 < nclasses) {
        PyErr_SetString(PyExc_ValueError, "expand_row: the tables do not fit each other or the output row");
        goto done;
    }
    const uint8_t *s = (const uint8_t *)set.buf;
    const int32_t *g = (const int32_t *)groups.buf, *t = (const int32_t *)tables.buf;
    const int32_t *pw = (const int32_t *)words_b.buf, *pb = (const int32_t *)bits_b.buf;
    const int32_t *all = (const int32_t *)all_b.buf;
    int32_t *restrict row = (int32_t *)out.buf;
    Py_ssize_t set_len = set.len;
    int filled = 0;
    for (Py_ssize_t k = 0; k < ngroups; k++) {
        int code = in_set(s, set_len, g[4 * k]) | in_set(s, set_len, g[4 * k + 1]) << 1 |
                   in_set(s, set_len, g[4 * k + 2]) << 2 | in_set(s, set_len, g[4 * k + 3]) << 3;
        if (!code) continue;
        const int32_t *restrict src = t + ((size_t)k * 16 + code) * words;
        if (!filled) {
            memcpy(row, src, (size_t)words * 4);
            filled = 1;
        } else {
            for (Py_ssize_t w = 0; w < words; w++) row[w] |= src[w];
        }
    }
    if (!filled) memset(row, 0, (size_t)words * 4);
    Py_ssize_t in_pairs = 0, total = ip[nclasses];
    for (Py_ssize_t k = 0; k < nclasses; k++)
        if ((s[k >> 3] >> (k & 7)) & 1) in_pairs += ip[k + 1] - ip[k];
    int complement = 2 * in_pairs > total;
    if (complement)
        for (Py_ssize_t w = 0; w < words; w++) row[w] |= all[w];
    for (Py_ssize_t byte = 0; byte * 8 < nclasses; byte++) {
        unsigned v = complement ? (uint8_t)~s[byte] : s[byte];
        while (v) {
            Py_ssize_t k = byte * 8 + __builtin_ctz(v);
            v &= v - 1;
            if (k >= nclasses) break;
            Py_ssize_t end = ip[k + 1];
            if (complement)
                for (Py_ssize_t i = ip[k]; i < end; i++) row[pw[i]] &= ~pb[i];
            else
                for (Py_ssize_t i = ip[k]; i < end; i++) row[pw[i]] |= pb[i];
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&set);
    PyBuffer_Release(&groups);
    PyBuffer_Release(&tables);
    PyBuffer_Release(&indptr);
    PyBuffer_Release(&words_b);
    PyBuffer_Release(&bits_b);
    PyBuffer_Release(&all_b);
    PyBuffer_Release(&out);
    return result;
}

/* ---- the walk's byte step over the word store (cfgzip_lab.grammar.words), the same nodes as Python's ----
 *
 * run_atoms(ctx, state, atoms) runs a token's atoms from a parser state (words of GNF nonterminals,
 * top first) exactly as StateWalker._make_step's Python step does, on the store's own Python
 * structures: nodes (list of (accepts, ((symbol, child), ...)) tuples), the interning dict, and the
 * union, concat and step memo dicts, so every node it creates is the one Python would create (same
 * key, same id) and every memo it fills is one Python reads. ctx is the tuple
 *   (nodes, index, union_memo, concat_memo, step_memo, table, n, num_atoms, store, BudgetExceeded, slow_step)
 * where table[A] is {atom: tail node}, store.created / store.limit are the node budget (read at the start,
 * written back at the end; BudgetExceeded(created) past the limit, memos holding finished results only),
 * and slow_step(node, atom) is Displacer.step for a node with SEP words (never a parser state).
 */
typedef struct {
    PyObject *nodes, *index, *umemo, *cmemo, *smemo, *table, *store, *budget_exc, *slow_step;
    long n, num_atoms;
    long long created;
    double limit;
} Walk;

#define W_EMPTY 0
#define W_EPSILON 1

static int node_parts(Walk *w, long node, int *accepts, PyObject **edges) {
    PyObject *t = PyList_GET_ITEM(w->nodes, node); /* borrowed; ids come from the store */
    *accepts = PyTuple_GET_ITEM(t, 0) == Py_True;
    *edges = PyTuple_GET_ITEM(t, 1);
    return 0;
}

static long edge_sym(PyObject *e) { return PyLong_AsLong(PyTuple_GET_ITEM(e, 0)); }
static long edge_child(PyObject *e) { return PyLong_AsLong(PyTuple_GET_ITEM(e, 1)); }

/* memo lookup by (a, b); -1 absent, -2 error */
static long memo_get2(PyObject *memo, long a, long b) {
    PyObject *key = Py_BuildValue("(ll)", a, b);
    if (!key) return -2;
    PyObject *got = PyDict_GetItemWithError(memo, key);
    Py_DECREF(key);
    if (!got) return PyErr_Occurred() ? -2 : -1;
    return PyLong_AsLong(got);
}

static int memo_set2(PyObject *memo, long a, long b, long value) {
    PyObject *key = Py_BuildValue("(ll)", a, b), *v = PyLong_FromLong(value);
    int rc = (key && v) ? PyDict_SetItem(memo, key, v) : -1;
    Py_XDECREF(key);
    Py_XDECREF(v);
    return rc;
}

/* intern (accepts, edges); steals edges; -1 on error */
static long w_make(Walk *w, int accepts, PyObject *edges) {
    if (!edges) return -1;
    PyObject *key = PyTuple_Pack(2, accepts ? Py_True : Py_False, edges);
    Py_DECREF(edges);
    if (!key) return -1;
    PyObject *got = PyDict_GetItemWithError(w->index, key);
    if (got) {
        Py_DECREF(key);
        return PyLong_AsLong(got);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    long node = (long)PyList_GET_SIZE(w->nodes);
    PyObject *id = PyLong_FromLong(node);
    if (!id || PyList_Append(w->nodes, key) < 0 || PyDict_SetItem(w->index, key, id) < 0) {
        Py_XDECREF(id);
        Py_DECREF(key);
        return -1;
    }
    Py_DECREF(id);
    Py_DECREF(key);
    w->created += 1;
    if ((double)w->created > w->limit) {
        PyObject *arg = PyLong_FromLongLong(w->created);
        if (arg) {
            PyErr_SetObject(w->budget_exc, arg);
            Py_DECREF(arg);
        }
        return -1;
    }
    return node;
}

static PyObject *edge_pair(long sym, long child) { return Py_BuildValue("(ll)", sym, child); }

static long w_union(Walk *w, long a, long b) {
    if (a == b || b == W_EMPTY) return a;
    if (a == W_EMPTY) return b;
    if (a > b) {
        long t = a;
        a = b;
        b = t;
    }
    long got = memo_get2(w->umemo, a, b);
    if (got != -1) return got == -2 ? -1 : got;
    int acc_a, acc_b;
    PyObject *ea, *eb;
    node_parts(w, a, &acc_a, &ea);
    node_parts(w, b, &acc_b, &eb);
    Py_ssize_t na = PyTuple_GET_SIZE(ea), nb = PyTuple_GET_SIZE(eb), i = 0, j = 0, k = 0;
    PyObject *merged = PyTuple_New(na + nb);
    if (!merged) return -1;
    while (i < na && j < nb) {
        PyObject *x = PyTuple_GET_ITEM(ea, i), *y = PyTuple_GET_ITEM(eb, j), *e;
        long sa = edge_sym(x), sb = edge_sym(y);
        if (sa == sb) {
            long c = w_union(w, edge_child(x), edge_child(y));
            if (c < 0 || !(e = edge_pair(sa, c))) {
                Py_DECREF(merged);
                return -1;
            }
            i++, j++;
        } else if (sa < sb) {
            e = x;
            Py_INCREF(e);
            i++;
        } else {
            e = y;
            Py_INCREF(e);
            j++;
        }
        PyTuple_SET_ITEM(merged, k++, e);
    }
    for (; i < na; i++, k++) {
        PyObject *e = PyTuple_GET_ITEM(ea, i);
        Py_INCREF(e);
        PyTuple_SET_ITEM(merged, k, e);
    }
    for (; j < nb; j++, k++) {
        PyObject *e = PyTuple_GET_ITEM(eb, j);
        Py_INCREF(e);
        PyTuple_SET_ITEM(merged, k, e);
    }
    if (k < na + nb && _PyTuple_Resize(&merged, k) < 0) return -1;
    got = w_make(w, acc_a || acc_b, merged);
    if (got < 0 || memo_set2(w->umemo, a, b, got) < 0) return -1;
    return got;
}

static long w_concat(Walk *w, long a, long b) {
    if (a == W_EMPTY || b == W_EMPTY) return W_EMPTY;
    if (a == W_EPSILON) return b;
    if (b == W_EPSILON) return a;
    long got = memo_get2(w->cmemo, a, b);
    if (got != -1) return got == -2 ? -1 : got;
    int accepts;
    PyObject *edges;
    node_parts(w, a, &accepts, &edges);
    Py_ssize_t ne = PyTuple_GET_SIZE(edges);
    PyObject *out = PyTuple_New(ne);
    if (!out) return -1;
    for (Py_ssize_t i = 0; i < ne; i++) {
        PyObject *e = PyTuple_GET_ITEM(edges, i), *pair;
        long c = w_concat(w, edge_child(e), b);
        if (c < 0 || !(pair = edge_pair(edge_sym(e), c))) {
            Py_DECREF(out);
            return -1;
        }
        PyTuple_SET_ITEM(out, i, pair);
    }
    got = w_make(w, 0, out);
    if (got >= 0 && accepts) got = w_union(w, got, b);
    if (got < 0 || memo_set2(w->cmemo, a, b, got) < 0) return -1;
    return got;
}

static long w_slow_step(Walk *w, long node, long atom) {
    PyObject *now = PyLong_FromLongLong(w->created);
    int rc = now ? PyObject_SetAttrString(w->store, "created", now) : -1;
    Py_XDECREF(now);
    if (rc < 0) return -1;
    PyObject *r = PyObject_CallFunction(w->slow_step, "ll", node, atom);
    if (!r) return -1;
    long got = PyLong_AsLong(r);
    Py_DECREF(r);
    PyObject *c = PyObject_GetAttrString(w->store, "created");
    if (!c) return -1;
    w->created = PyLong_AsLongLong(c);
    Py_DECREF(c);
    return got;
}

static long w_step(Walk *w, long node, long atom) {
    PyObject *key = PyLong_FromLong(node * w->num_atoms + atom);
    if (!key) return -1;
    PyObject *hit = PyDict_GetItemWithError(w->smemo, key);
    if (hit) {
        Py_DECREF(key);
        return PyLong_AsLong(hit);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    int accepts;
    PyObject *edges;
    node_parts(w, node, &accepts, &edges);
    Py_ssize_t ne = PyTuple_GET_SIZE(edges);
    PyObject *atom_key = PyLong_FromLong(atom);
    long result = W_EMPTY;
    for (Py_ssize_t i = 0; i < ne && result >= 0; i++) {
        PyObject *e = PyTuple_GET_ITEM(edges, i);
        long sym = edge_sym(e), rest = edge_child(e);
        if (sym >= w->n) { /* a SEP word: not a parser state */
            Py_DECREF(atom_key);
            Py_DECREF(key);
            return w_slow_step(w, node, atom);
        }
        PyObject *tail_obj = PyDict_GetItemWithError(PyList_GET_ITEM(w->table, sym), atom_key);
        if (!tail_obj) {
            if (PyErr_Occurred()) result = -1;
            continue;
        }
        long got = w_concat(w, PyLong_AsLong(tail_obj), rest);
        result = got < 0 ? -1 : (result == W_EMPTY ? got : w_union(w, result, got));
    }
    Py_DECREF(atom_key);
    if (result >= 0) {
        PyObject *v = PyLong_FromLong(result);
        if (!v || PyDict_SetItem(w->smemo, key, v) < 0) result = -1;
        Py_XDECREF(v);
    }
    Py_DECREF(key);
    return result;
}

static PyObject *run_atoms(PyObject *self, PyObject *args) {
    (void)self;
    Walk w;
    PyObject *ctx, *limit_obj, *created_obj;
    long state;
    Py_buffer atoms;
    if (!PyArg_ParseTuple(args, "O!ly*", &PyTuple_Type, &ctx, &state, &atoms)) return NULL;
    if (PyTuple_GET_SIZE(ctx) != 11) {
        PyBuffer_Release(&atoms);
        PyErr_SetString(PyExc_ValueError, "run_atoms: ctx must be an 11-tuple (see _kernel.c)");
        return NULL;
    }
    w.nodes = PyTuple_GET_ITEM(ctx, 0), w.index = PyTuple_GET_ITEM(ctx, 1), w.umemo = PyTuple_GET_ITEM(ctx, 2);
    w.cmemo = PyTuple_GET_ITEM(ctx, 3), w.smemo = PyTuple_GET_ITEM(ctx, 4), w.table = PyTuple_GET_ITEM(ctx, 5);
    w.n = PyLong_AsLong(PyTuple_GET_ITEM(ctx, 6)), w.num_atoms = PyLong_AsLong(PyTuple_GET_ITEM(ctx, 7));
    w.store = PyTuple_GET_ITEM(ctx, 8), w.budget_exc = PyTuple_GET_ITEM(ctx, 9), w.slow_step = PyTuple_GET_ITEM(ctx, 10);
    if (!PyList_Check(w.nodes) || !PyDict_Check(w.index) || !PyDict_Check(w.umemo) || !PyDict_Check(w.cmemo) ||
        !PyDict_Check(w.smemo) || !PyList_Check(w.table) || PyErr_Occurred()) {
        PyBuffer_Release(&atoms);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "run_atoms: ctx holds the wrong types");
        return NULL;
    }
    created_obj = PyObject_GetAttrString(w.store, "created");
    limit_obj = created_obj ? PyObject_GetAttrString(w.store, "limit") : NULL;
    if (!limit_obj) {
        Py_XDECREF(created_obj);
        PyBuffer_Release(&atoms);
        return NULL;
    }
    w.created = PyLong_AsLongLong(created_obj);
    w.limit = PyFloat_AsDouble(limit_obj);
    Py_DECREF(created_obj);
    Py_DECREF(limit_obj);
    const uint8_t *a = (const uint8_t *)atoms.buf;
    for (Py_ssize_t i = 0; i < atoms.len && state > W_EMPTY; i++) state = w_step(&w, state, a[i]);
    PyBuffer_Release(&atoms);
    /* the store's count of interned nodes, error or not (the nodes are in the store either way) */
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *c = PyLong_FromLongLong(w.created);
    int rc = c ? PyObject_SetAttrString(w.store, "created", c) : -1;
    Py_XDECREF(c);
    if (exc_type) {
        if (rc < 0) PyErr_Clear();
        PyErr_Restore(exc_type, exc_value, exc_tb);
        return NULL;
    }
    if (rc < 0) return NULL;
    return PyLong_FromLong(state);
}

static PyMethodDef methods[] = {
    {"expand_row", expand_row, METH_VARARGS, "class set bytes -> packed int32 vocabulary row (see _kernel.c)"},
    {"run_atoms", run_atoms, METH_VARARGS, "a token's atoms run from a parser state in the word store (see _kernel.c)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernel", "The native engine's compiled expansion kernel.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
