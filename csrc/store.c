/* The compiled word store as Python sees it (cfgzip_lab.native.compiled wraps it; the reference is
 * cfgzip_lab.grammar.words.WordStore): errors, construction from a WordStore's nodes, symbols converted at
 * its edges, and the WordStore API (make, union, concat, step, run, edges, child, reachable, count, ...). */
#include "words.h"

/* ---- Python-facing errors ---- */

PyObject *raise_code(Words *S, int64_t code) {
    if (code == E_BUDGET) {
        PyErr_SetObject(S->budget_exc ? S->budget_exc : PyExc_RuntimeError, PyLong_FromLongLong(S->created));
    } else if (code == E_DEPTH) {
        PyErr_SetString(Unsupported, "word store: recursion deeper than the compiled store allows");
    } else if (code == E_SYMBOL) {
        PyErr_SetString(Unsupported, "word store: a symbol the compiled step does not know on top of a word");
    } else if (code == E_NOMEM) {
        PyErr_NoMemory();
    } else if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_RuntimeError, "word store: error %lld", (long long)code);
    }
    return NULL;
}

int check_node(Words *S, long long node) {
    if (node < 0 || node >= S->n) {
        PyErr_Format(PyExc_IndexError, "word store: no node %lld", node);
        return -1;
    }
    return 0;
}

/* ---- construction ---- */
void words_dealloc(Words *S) {
    free(S->cval);
    free(S->cstate);
    free(S->estart);
    free(S->acc);
    free(S->nhash);
    free(S->esym);
    free(S->ekid);
    free(S->itab);
    free(S->ssym);
    free(S->skid);
    memo_free(&S->um);
    memo_free(&S->cm);
    memo_free(&S->sm);
    free(S->ostk);
    free(S->gat);
    free(S->nm_ops);
    free(S->nm_len);
    free(S->nm_val);
    free(S->nm_tab);
    free(S->nm_off);
    free(S->nm_hash);
    free(S->table);
    free(S->tops_ptr);
    free(S->tops_a);
    free(S->tops_t);
    free(S->below);
    free(S->tops_bits);
    free(S->below_nzptr);
    free(S->below_nz);
    free(S->tops_nzptr);
    free(S->tops_nz);
    free(S->cand);
    free(S->fcand);
    free(S->fam_item);
    free(S->fam_min);
    free(S->fam_max);
    free(S->fam_last);
    free(S->fam_rowptr);
    free(S->fam_rowatoms);
    memo_free(&S->rowm);
    Py_XDECREF(S->budget_exc);
    Py_TYPE(S)->tp_free((PyObject *)S);
}

/* A Python symbol as this store holds it (packed IN / REL, see above); -1 with an exception set. */
static int sym_from_py(const Words *S, PyObject *obj, int64_t *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (!overflow) {
        if (v >= WIDE_IN) goto wide;
        *out = v;
        return 0;
    }
    if (overflow < 0) goto wide;
    unsigned long long low = PyLong_AsUnsignedLongLongMask(obj);
    if (low == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    PyObject *shift = PyLong_FromLong(64), *top = shift ? PyNumber_Rshift(obj, shift) : NULL;
    Py_XDECREF(shift);
    if (!top) return -1;
    unsigned long long high = PyLong_AsUnsignedLongLong(top);
    Py_DECREF(top);
    if (high == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto wide;
    }
    /* INPUT_BASE = 2^100: high = 2^36 + f; RELATIVE_BASE = 2^120: high = 2^56 + (f << 32) + j */
    int64_t f, j = 0, lo = (int64_t)(low >> 32), hi = (int64_t)(low & 0xFFFFFFFFULL), rel;
    if (high >= (1ULL << 56)) {
        rel = 1;
        f = (int64_t)((high - (1ULL << 56)) >> 32);
        j = (int64_t)((high - (1ULL << 56)) & 0xFFFFFFFFULL);
    } else if (high >= (1ULL << 36)) {
        rel = 0;
        f = (int64_t)(high - (1ULL << 36));
    } else {
        goto wide;
    }
    int64_t room = INT64_C(1) << S->cbits;
    if (!S->cbits || f >= (INT64_C(1) << S->fbits) || j >= room || lo >= room || hi >= room) goto wide;
    *out = rel ? rel_sym_of(S, f, j, lo, hi) : in_sym_of(S, f, lo, hi);
    return 0;
wide:
    PyErr_SetString(PyExc_ValueError, "word store: a symbol past what this store holds (counted-repetition "
                                      "symbols need the grammar's families, Words.grammar or widths=)");
    return -1;
}

/* A stored symbol as the Python reference writes it (cfgzip_lab.grammar.counted). */
static PyObject *sym_to_py(const Words *S, int64_t sym) {
    if (sym < WIDE_IN) return PyLong_FromLongLong(sym);
    int64_t f, j, lo, hi;
    split_wide(S, sym, &f, &j, &lo, &hi);
    unsigned long long high = sym >= WIDE_REL ? (1ULL << 56) + ((unsigned long long)f << 32) + (unsigned long long)j
                                              : (1ULL << 36) + (unsigned long long)f;
    unsigned long long low = ((unsigned long long)lo << 32) | (unsigned long long)hi;
    PyObject *h = PyLong_FromUnsignedLongLong(high), *shift = PyLong_FromLong(64), *l = PyLong_FromUnsignedLongLong(low);
    PyObject *up = h && shift ? PyNumber_Lshift(h, shift) : NULL, *r = up && l ? PyNumber_Or(up, l) : NULL;
    Py_XDECREF(h);
    Py_XDECREF(shift);
    Py_XDECREF(l);
    Py_XDECREF(up);
    return r;
}

/* Read one Python node (accepts, ((sym, child), ...)) onto the scratch; returns accepts or -1. */
static int scratch_python_node(Words *S, PyObject *accepts, PyObject *edges) {
    int acc = PyObject_IsTrue(accepts);
    if (acc < 0) return -1;
    PyObject *seq = PySequence_Fast(edges, "word store: edges must be a sequence of (symbol, child) pairs");
    if (!seq) return -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    long long prev = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) {
            PyErr_SetString(PyExc_TypeError, "word store: an edge must be a (symbol, child) tuple");
            goto fail;
        }
        int64_t sym;
        if (sym_from_py(S, PyTuple_GET_ITEM(e, 0), &sym) < 0) goto fail;
        long long kid = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 1));
        if (PyErr_Occurred()) goto fail;
        if (kid <= W_EMPTY || kid >= S->n || (i > 0 && sym <= prev)) {
            PyErr_SetString(PyExc_ValueError,
                            "word store: edges must be sorted by symbol with existing, non-empty children");
            goto fail;
        }
        prev = sym;
        if (push_edge(S, sym, kid) < 0) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    Py_DECREF(seq);
    return acc;
fail:
    Py_DECREF(seq);
    return -1;
}

int words_init(Words *S, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"nodes", "created", "budget_exc", "widths", NULL};
    PyObject *nodes, *exc = Py_None;
    long long created = 0;
    int fbits = 0, cbits = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|LO(ii)", kwlist, &nodes, &created, &exc, &fbits, &cbits))
        return -1;
    if (S->n) {
        PyErr_SetString(PyExc_RuntimeError, "word store: already initialised");
        return -1;
    }
    /* widths=(fbits, cbits): the symbol widths of the grammar's families (compiled.symbol_widths), for a
     * store seeded with nodes that hold counted-repetition symbols already */
    if (fbits < 0 || cbits < 0 || (cbits > 0) != (fbits > 0) || fbits + 3 * cbits > WIDE_BITS) {
        PyErr_SetString(PyExc_ValueError, "word store: widths past the 61 bits of a packed symbol");
        return -1;
    }
    S->fbits = fbits;
    S->cbits = cbits;
    Py_XSETREF(S->budget_exc, exc == Py_None ? NULL : Py_NewRef(exc));
    S->limit = NO_LIMIT;
    if (reserve(S, 1024, 4096) < 0) goto nomem;
    S->estart[0] = 0;
    if (itab_resize(S, 2048) < 0) goto nomem;
    PyObject *seq = PySequence_Fast(nodes, "word store: nodes must be a sequence");
    if (!seq) return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *node = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(node) || PyTuple_GET_SIZE(node) != 2) {
            PyErr_SetString(PyExc_TypeError, "word store: a node must be an (accepts, edges) tuple");
            Py_DECREF(seq);
            return -1;
        }
        int64_t base = S->stop;
        /* the first two nodes are EMPTY and EPSILON, with no children to check against */
        int acc = scratch_python_node(S, PyTuple_GET_ITEM(node, 0), PyTuple_GET_ITEM(node, 1));
        if (acc < 0) {
            Py_DECREF(seq);
            return -1;
        }
        if ((i == 0 && (acc || S->stop != base)) || (i == 1 && (!acc || S->stop != base))) {
            PyErr_SetString(PyExc_ValueError, "word store: nodes 0 and 1 must be EMPTY and EPSILON");
            Py_DECREF(seq);
            return -1;
        }
        int64_t id = make_scratch(S, acc, base);
        if (id < 0) {
            Py_DECREF(seq);
            raise_code(S, id);
            return -1;
        }
        if (id != i) {
            PyErr_Format(PyExc_ValueError, "word store: node %zd repeats node %lld (not a canonical store)", i,
                         (long long)id);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    if (S->n < 2) {
        int64_t base = S->stop;
        if (S->n == 0 && make_scratch(S, 0, base) != 0) goto nomem;
        if (S->n == 1 && make_scratch(S, 1, base) != 1) goto nomem;
    }
    S->created = created;
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}
/* ---- the WordStore API ---- */
PyObject *words_make(Words *S, PyObject *args) {
    PyObject *accepts, *edges;
    if (!PyArg_ParseTuple(args, "OO", &accepts, &edges)) return NULL;
    int64_t base = S->stop;
    int acc = scratch_python_node(S, accepts, edges);
    if (acc < 0) {
        S->stop = base;
        return NULL;
    }
    int64_t r = make_scratch(S, acc, base);
    return r < 0 ? raise_code(S, r) : PyLong_FromLongLong(r);
}

PyObject *words_union(Words *S, PyObject *args) {
    long long a, b;
    if (!PyArg_ParseTuple(args, "LL", &a, &b) || check_node(S, a) < 0 || check_node(S, b) < 0) return NULL;
    int64_t r = w_union(S, a, b, 0);
    return r < 0 ? raise_code(S, r) : PyLong_FromLongLong(r);
}

/* union_many(nodes): WordStore.union_many, the union of an iterable of nodes at once;
 * union_concats(terms): WordStore.union_concats, the union of the concatenations a . b of (a, b) pairs */
static PyObject *union_terms_py(Words *S, PyObject *arg, int pairs) {
    PyObject *seq = PySequence_Fast(arg, "word store: an iterable of nodes or (node, node) pairs");
    if (!seq) return NULL;
    int64_t obase = S->otop;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        long long a, b = W_EPSILON;
        int ok = pairs ? PyArg_ParseTuple(item, "LL", &a, &b) : ((a = PyLong_AsLongLong(item)) != -1 || !PyErr_Occurred());
        if (!ok || check_node(S, a) < 0 || check_node(S, b) < 0 || ostk_push(S, a, b) < 0) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            S->otop = obase;
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    int64_t r = w_union_n(S, obase, 0);
    return r < 0 ? raise_code(S, r) : PyLong_FromLongLong(r);
}

PyObject *words_union_many(Words *S, PyObject *arg) { return union_terms_py(S, arg, 0); }
PyObject *words_union_concats(Words *S, PyObject *arg) { return union_terms_py(S, arg, 1); }

PyObject *words_concat(Words *S, PyObject *args) {
    long long a, b;
    if (!PyArg_ParseTuple(args, "LL", &a, &b) || check_node(S, a) < 0 || check_node(S, b) < 0) return NULL;
    int64_t r = w_concat(S, a, b, 0);
    return r < 0 ? raise_code(S, r) : PyLong_FromLongLong(r);
}

PyObject *words_step(Words *S, PyObject *args) {
    long long node, atom;
    if (!PyArg_ParseTuple(args, "LL", &node, &atom) || need_grammar(S) < 0 || check_node(S, node) < 0) return NULL;
    if (atom < 0 || atom >= S->natoms) {
        PyErr_Format(PyExc_ValueError, "word store: no byte class %lld", atom);
        return NULL;
    }
    int64_t r = w_step(S, node, atom);
    return r < 0 ? raise_code(S, r) : PyLong_FromLongLong(r);
}

/* run(node, atoms, budget) -> (node, created): step by step through `atoms` (bytes of byte classes),
 * stopping at EMPTY; at most `budget` new nodes (-1: no budget), else the budget exception. */
PyObject *words_run(Words *S, PyObject *args) {
    long long node, budget = -1;
    Py_buffer atoms;
    if (!PyArg_ParseTuple(args, "Ly*|L", &node, &atoms, &budget)) return NULL;
    PyObject *result = NULL;
    if (need_grammar(S) < 0 || check_node(S, node) < 0) goto done;
    const uint8_t *a = atoms.buf;
    int64_t before = S->created, saved = S->limit;
    if (budget >= 0) S->limit = before + budget;
    int64_t r = node;
    for (Py_ssize_t i = 0; i < atoms.len && r != W_EMPTY; i++) {
        if (a[i] >= S->natoms) {
            S->limit = saved;
            PyErr_Format(PyExc_ValueError, "word store: no byte class %d", a[i]);
            goto done;
        }
        r = w_step(S, r, a[i]);
        if (r < 0) break;
    }
    S->limit = budget >= 0 ? NO_LIMIT : saved;
    if (r < 0) {
        raise_code(S, r);
        goto done;
    }
    result = Py_BuildValue("LL", (long long)r, (long long)(S->created - before));
done:
    PyBuffer_Release(&atoms);
    return result;
}

static PyObject *edges_tuple(Words *S, int64_t node) {
    int64_t m = n_edges(S, node), s = S->estart[node];
    PyObject *t = PyTuple_New(m);
    if (!t) return NULL;
    for (int64_t i = 0; i < m; i++) {
        int64_t sym = S->esym[s + i];
        PyObject *e;
        if (sym < WIDE_IN) {
            e = Py_BuildValue("Li", (long long)sym, S->ekid[s + i]);
        } else {
            PyObject *py = sym_to_py(S, sym);
            e = py ? Py_BuildValue("Ni", py, S->ekid[s + i]) : NULL;
        }
        if (!e) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, e);
    }
    return t;
}

PyObject *words_edges(Words *S, PyObject *arg) {
    long long node = PyLong_AsLongLong(arg);
    if ((node == -1 && PyErr_Occurred()) || check_node(S, node) < 0) return NULL;
    return edges_tuple(S, node);
}

PyObject *words_accepts(Words *S, PyObject *arg) {
    long long node = PyLong_AsLongLong(arg);
    if ((node == -1 && PyErr_Occurred()) || check_node(S, node) < 0) return NULL;
    return PyBool_FromLong(S->acc[node]);
}

PyObject *words_child(Words *S, PyObject *args) {
    long long node;
    int64_t sym;
    PyObject *pysym;
    if (!PyArg_ParseTuple(args, "LO", &node, &pysym) || check_node(S, node) < 0) return NULL;
    if (sym_from_py(S, pysym, &sym) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError)) return NULL;
        PyErr_Clear(); /* a symbol this store cannot hold is on no edge of it */
        return PyLong_FromLong(W_EMPTY);
    }
    for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++)
        if (S->esym[i] == sym) return PyLong_FromLong(S->ekid[i]);
    return PyLong_FromLong(W_EMPTY);
}

/* reachable(roots) -> set: WordStore.reachable (every node below the roots, EMPTY and EPSILON left
 * out), one bit per node instead of a Python set per visit. */
PyObject *words_reachable(Words *S, PyObject *roots) {
    PyObject *it = PyObject_GetIter(roots);
    if (!it) return NULL;
    uint64_t *seen = calloc((size_t)(S->n / 64 + 1), sizeof(uint64_t));
    int64_t *stack = NULL, cap = 0, top = 0;
    PyObject *out = NULL, *item;
    if (!seen) {
        Py_DECREF(it);
        return PyErr_NoMemory();
    }
    while ((item = PyIter_Next(it))) {
        long long r = PyLong_AsLongLong(item);
        Py_DECREF(item);
        if (r == -1 && PyErr_Occurred()) goto done;
        if (r <= W_EPSILON) continue;
        if (check_node(S, r) < 0) goto done;
        if (grow((void **)&stack, &cap, top + 1, sizeof(int64_t)) < 0) goto nomem;
        stack[top++] = r;
    }
    if (PyErr_Occurred()) goto done;
    out = PySet_New(NULL);
    if (!out) goto done;
    while (top) {
        int64_t n = stack[--top];
        if ((seen[n >> 6] >> (n & 63)) & 1) continue;
        seen[n >> 6] |= (uint64_t)1 << (n & 63);
        PyObject *x = PyLong_FromLongLong(n);
        if (!x || PySet_Add(out, x) < 0) {
            Py_XDECREF(x);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(x);
        int64_t m = n_edges(S, n), e0 = S->estart[n];
        if (grow((void **)&stack, &cap, top + m, sizeof(int64_t)) < 0) goto nomem;
        for (int64_t i = 0; i < m; i++) {
            int64_t c = S->ekid[e0 + i];
            if (c > W_EPSILON && !((seen[c >> 6] >> (c & 63)) & 1)) stack[top++] = c;
        }
    }
    goto done;
nomem:
    Py_CLEAR(out);
    PyErr_NoMemory();
done:
    Py_DECREF(it);
    free(seen);
    free(stack);
    return out;
}

/* count(node) -> int, or None past 64 bits (the wrapper then counts with Python's ints):
 * WordStore.count, the number of words in the set, memoised per node (nodes never change). */
PyObject *words_count(Words *S, PyObject *arg) {
    long long node = PyLong_AsLongLong(arg);
    if ((node == -1 && PyErr_Occurred()) || check_node(S, node) < 0) return NULL;
    if (S->ccount_cap < S->n) {
        int64_t cap = S->n * 2 + 64;
        uint64_t *v = realloc(S->cval, (size_t)cap * sizeof(uint64_t));
        if (!v) return PyErr_NoMemory();
        S->cval = v;
        uint8_t *st = realloc(S->cstate, (size_t)cap);
        if (!st) return PyErr_NoMemory();
        memset(st + S->ccount_cap, 0, (size_t)(cap - S->ccount_cap));
        S->cstate = st;
        S->ccount_cap = cap;
    }
    uint64_t *val = S->cval;
    uint8_t *state = S->cstate;
    if (!state[node]) {
        /* post-order without recursion: a node is pushed, then its uncounted children; it is counted
         * when it comes back to the top with all of them done */
        int64_t *stack = NULL, cap = 0, top = 0;
        if (grow((void **)&stack, &cap, 1, sizeof(int64_t)) < 0) return PyErr_NoMemory();
        stack[top++] = node;
        while (top) {
            int64_t n = stack[top - 1];
            if (state[n]) {
                top--;
                continue;
            }
            int64_t m = n_edges(S, n), e0 = S->estart[n], pending = 0;
            for (int64_t i = 0; i < m; i++)
                if (!state[S->ekid[e0 + i]]) pending++;
            if (pending) {
                if (grow((void **)&stack, &cap, top + pending, sizeof(int64_t)) < 0) {
                    free(stack);
                    return PyErr_NoMemory();
                }
                for (int64_t i = m - 1; i >= 0; i--)
                    if (!state[S->ekid[e0 + i]]) stack[top++] = S->ekid[e0 + i];
                continue;
            }
            uint64_t total = S->acc[n];
            int over = 0;
            for (int64_t i = 0; i < m && !over; i++) {
                int32_t c = S->ekid[e0 + i];
                if (state[c] == 2 || __builtin_add_overflow(total, val[c], &total)) over = 1;
            }
            state[n] = over ? 2 : 1;
            val[n] = over ? 0 : total;
            top--;
        }
        free(stack);
    }
    if (state[node] == 2) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(val[node]);
}

Py_ssize_t words_len(Words *S) { return (Py_ssize_t)S->n; }

PyObject *words_item(Words *S, Py_ssize_t i) {
    if (i < 0 || i >= S->n) {
        PyErr_SetString(PyExc_IndexError, "word store: node index out of range");
        return NULL;
    }
    PyObject *edges = edges_tuple(S, i);
    if (!edges) return NULL;
    PyObject *r = PyTuple_Pack(2, S->acc[i] ? Py_True : Py_False, edges);
    Py_DECREF(edges);
    return r;
}

PyObject *words_get_created(Words *S, void *c) {
    (void)c;
    return PyLong_FromLongLong(S->created);
}

PyObject *words_get_limit(Words *S, void *c) {
    (void)c;
    return S->limit == NO_LIMIT ? PyFloat_FromDouble(Py_HUGE_VAL) : PyLong_FromLongLong(S->limit);
}

int words_set_limit(Words *S, PyObject *v, void *c) {
    (void)c;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete limit");
        return -1;
    }
    if (PyFloat_Check(v)) {
        double d = PyFloat_AS_DOUBLE(v);
        S->limit = d >= 9.2e18 ? NO_LIMIT : (int64_t)d;
        return 0;
    }
    long long l = PyLong_AsLongLong(v);
    if (l == -1 && PyErr_Occurred()) return -1;
    S->limit = l;
    return 0;
}

PyObject *words_stats(Words *S, PyObject *unused) {
    (void)unused;
    size_t bytes = (size_t)S->ncap * (8 + 1 + 8) + (size_t)S->ecap * 12 + (S->imask + 1) * 4 +
                   (S->um.mask + 1 + S->cm.mask + 1 + S->sm.mask + 1) * 12 + (size_t)S->nm_cap * 24 +
                   (size_t)S->nm_opcap * 8 + (S->nm_tab ? (S->nm_mask + 1) * 4 : 0) + (size_t)S->ocap * 8 +
                   (size_t)S->gcap * sizeof(struct gedge);
    return Py_BuildValue("{sLsLsLsLsLsLsLsLsn}", "nodes", (long long)S->n, "edges", (long long)S->ne, "union_memo",
                         (long long)S->um.used, "union_n_memo", (long long)S->nm_n, "concat_memo",
                         (long long)S->cm.used, "step_memo", (long long)S->sm.used, "steps", (long long)S->steps,
                         "step_memo_hits", (long long)S->step_hits, "bytes", (Py_ssize_t)bytes);
}
