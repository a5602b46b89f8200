/* Fixpoints over the byte CFG's own Python objects (cfgzip_lab.grammar.cfg.CFG: rules, a dict of name -> list of
 * productions, each a tuple of names (str) and byte sets; counted, a dict of name -> Counted), before its normal
 * form. The Python functions are the reference (tests/test_cfg_passes.py compares them on corpora):
 *
 *   cfg_productive(rules, counted, byteset_type) -> set   dead_ends.productive_nonterminals
 *   cfg_reachable(rules, counted, start) -> set            gnf._reachable_rules
 *   cfg_byte_bits(rules, byteset_type) -> dict             cfg.CFG.byte_sets (bits -> the first such byte set)
 *   cfg_every_symbol_productive(rules, counted, productive, byteset_type) -> bool
 *                                                          dead_ends._every_symbol_productive
 *
 * The first two are least fixpoints, so the sets are the Python ones whatever the order of the walk; the last two
 * scan every symbol once. They were a JSON
 * Schema's per-symbol Python loops on the way to its first mask (~0.1 ms each on a median MaskBench schema).
 */
#include "methods.h"

/* The productions of `alts` (a sequence of tuples), one fast sequence each; NULL with the exception set. */
static PyObject *productions_of(PyObject *alts) {
    return PySequence_Fast(alts, "a rule's productions");
}

/* cfg_productive's state: the rules by index, and per production its owner and the occurrences it waits for. */
typedef struct {
    PyObject *index;            /* name -> rule index */
    int64_t *owner, *missing;   /* per production */
    int64_t *occ_rule, *occ_prod; /* per nonterminal occurrence: the rule it waits for, its production */
    int64_t np, no, cap_p, cap_o;
    int64_t *ready, nready;     /* rule indices to mark (a stack; may repeat) */
} Prod;

static int prod_grow(int64_t **a, int64_t *cap, int64_t need, int64_t **b) {
    if (need <= *cap) return 0;
    int64_t n = *cap ? *cap * 2 : 64;
    while (n < need) n *= 2;
    int64_t *x = realloc(*a, n * sizeof(int64_t)), *y = x ? realloc(*b, n * sizeof(int64_t)) : NULL;
    if (x) *a = x;
    if (y) *b = y;
    if (!x || !y) return -1;
    *cap = n;
    return 0;
}

/* One production of rule r: ready now (no nonterminal), never (an empty byte set, or a name with no rule), or
 * waiting for its nonterminal occurrences. 0, or -1 with the exception set. */
static int prod_add(Prod *P, int64_t r, PyObject *rhs_obj, PyObject *byteset_type) {
    PyObject *rhs = PySequence_Fast(rhs_obj, "a production");
    if (!rhs) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rhs);
    int64_t base = P->no, need = 0;
    int never = 0;
    if (prod_grow(&P->occ_rule, &P->cap_o, P->no + n, &P->occ_prod) < 0) goto nomem;
    for (Py_ssize_t k = 0; !never && k < n; k++) {
        PyObject *s = PySequence_Fast_GET_ITEM(rhs, k);
        if ((PyObject *)Py_TYPE(s) == byteset_type) {
            PyObject *bits = PyObject_GetAttrString(s, "bits");
            int truth = bits ? PyObject_IsTrue(bits) : -1;
            Py_XDECREF(bits);
            if (truth < 0) goto fail;
            never = !truth; /* the empty class: never */
            continue;
        }
        PyObject *i = PyDict_GetItemWithError(P->index, s);
        if (!i && PyErr_Occurred()) goto fail;
        never = !i; /* a name with no rule never derives anything */
        if (i) {
            P->occ_rule[P->no] = PyLong_AsLongLong(i);
            P->occ_prod[P->no++] = P->np;
            need++;
        }
    }
    Py_DECREF(rhs);
    if (never) {
        P->no = base;
        return 0;
    }
    if (need == 0) {
        P->no = base;
        P->ready[P->nready++] = r;
        return 0;
    }
    if (prod_grow(&P->owner, &P->cap_p, P->np + 1, &P->missing) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    P->owner[P->np] = r;
    P->missing[P->np++] = need;
    return 0;
nomem:
    PyErr_NoMemory();
fail:
    Py_DECREF(rhs);
    return -1;
}

/* A counted rule r: ready when its min is 0, else one production waiting for its item (never: an item with no rule). */
static int prod_counted(Prod *P, int64_t r, PyObject *c) {
    PyObject *low = PyObject_GetAttrString(c, "min");
    int zero = low ? PyObject_Not(low) : -1;
    Py_XDECREF(low);
    if (zero) {
        if (zero > 0) P->ready[P->nready++] = r;
        return zero < 0 ? -1 : 0;
    }
    PyObject *item = PyObject_GetAttrString(c, "item");
    PyObject *i = item ? PyDict_GetItemWithError(P->index, item) : NULL;
    Py_XDECREF(item);
    if (!i) return PyErr_Occurred() ? -1 : 0;
    if (prod_grow(&P->occ_rule, &P->cap_o, P->no + 1, &P->occ_prod) < 0 ||
        prod_grow(&P->owner, &P->cap_p, P->np + 1, &P->missing) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    P->occ_rule[P->no] = PyLong_AsLongLong(i);
    P->occ_prod[P->no++] = P->np;
    P->owner[P->np] = r;
    P->missing[P->np++] = 1;
    return 0;
}

/* Every rule's productions registered (prod_add / prod_counted); ready holds room for one entry per production. */
static int prod_read(Prod *P, PyObject *rules, PyObject *counted, PyObject *byteset_type, int64_t *ready_cap) {
    Py_ssize_t pos = 0;
    PyObject *name, *alts;
    for (int64_t r = 0; PyDict_Next(rules, &pos, &name, &alts); r++) {
        PyObject *c = PyDict_GetItemWithError(counted, name);
        if (!c && PyErr_Occurred()) return -1;
        PyObject *prods = c ? NULL : PySequence_Fast(alts, "a rule's productions");
        if (!c && !prods) return -1;
        Py_ssize_t n = c ? 1 : PySequence_Fast_GET_SIZE(prods);
        if (P->nready + n > *ready_cap) {
            int64_t cap = (P->nready + n) * 2, *x = realloc(P->ready, cap * sizeof(int64_t));
            if (!x) {
                Py_XDECREF(prods);
                PyErr_NoMemory();
                return -1;
            }
            P->ready = x;
            *ready_cap = cap;
        }
        int bad = c ? prod_counted(P, r, c) < 0 : 0;
        for (Py_ssize_t i = 0; !bad && !c && i < n; i++)
            bad = prod_add(P, r, PySequence_Fast_GET_ITEM(prods, i), byteset_type) < 0;
        Py_XDECREF(prods);
        if (bad) return -1;
    }
    return 0;
}

/* The least fixpoint by a worklist, as dead_ends.productive_nonterminals: each production waits for its
 * nonterminal occurrences (waiting lists in CSR by the rule waited for), and a rule found productive releases
 * the productions it occurs in. Returns the productive names. */
PyObject *cfg_productive(PyObject *self, PyObject *args) {
    PyObject *rules, *counted, *byteset_type, *out = NULL, *names = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyDict_Type, &rules, &PyDict_Type, &counted, &byteset_type)) return NULL;
    Prod P = {0};
    int64_t ready_cap = 0, nr = PyDict_GET_SIZE(rules), *start = NULL, *waits = NULL;
    char *done = NULL;
    P.index = PyDict_New();
    names = PyList_New(0);
    Py_ssize_t pos = 0;
    PyObject *name, *alts;
    for (int64_t r = 0; P.index && names && PyDict_Next(rules, &pos, &name, &alts); r++) {
        PyObject *i = PyLong_FromLongLong(r);
        int bad = !i || PyDict_SetItem(P.index, name, i) < 0 || PyList_Append(names, name) < 0;
        Py_XDECREF(i);
        if (bad) goto done;
    }
    if (!P.index || !names || prod_read(&P, rules, counted, byteset_type, &ready_cap) < 0) goto done;
    start = calloc(nr + 1, sizeof(int64_t));
    waits = malloc((P.no ? P.no : 1) * sizeof(int64_t));
    done = calloc(nr ? nr : 1, 1);
    if (!start || !waits || !done) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t o = 0; o < P.no; o++) start[P.occ_rule[o] + 1]++;
    for (int64_t r = 0; r < nr; r++) start[r + 1] += start[r];
    for (int64_t o = 0; o < P.no; o++) waits[start[P.occ_rule[o]]++] = P.occ_prod[o];
    for (int64_t r = nr; r > 0; r--) start[r] = start[r - 1]; /* (the fill moved each start to the next one's) */
    start[0] = 0;
    while (P.nready) {
        int64_t r = P.ready[--P.nready];
        if (done[r]) continue;
        done[r] = 1;
        for (int64_t w = start[r]; w < start[r + 1]; w++) {
            int64_t p = waits[w];
            if (--P.missing[p] == 0 && !done[P.owner[p]]) {
                if (P.nready >= ready_cap) { /* (room for every production was made; a release adds one each) */
                    int64_t cap = ready_cap * 2 + 16, *x = realloc(P.ready, cap * sizeof(int64_t));
                    if (!x) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    P.ready = x;
                    ready_cap = cap;
                }
                P.ready[P.nready++] = P.owner[p];
            }
        }
    }
    out = PySet_New(NULL);
    for (int64_t r = 0; out && r < nr; r++)
        if (done[r] && PySet_Add(out, PyList_GET_ITEM(names, r)) < 0) Py_CLEAR(out);
done:
    Py_XDECREF(P.index);
    Py_XDECREF(names);
    free(P.owner), free(P.missing), free(P.occ_rule), free(P.occ_prod), free(P.ready);
    free(start), free(waits), free(done);
    return out;
}

/* Push the names of `alts`'s productions (exact str) not in live onto todo, adding them to live. */
static int reach_rule(PyObject *alts, PyObject *live, PyObject *todo) {
    PyObject *prods = productions_of(alts);
    if (!prods) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(prods); i++) {
        PyObject *rhs = PySequence_Fast(PySequence_Fast_GET_ITEM(prods, i), "a production");
        if (!rhs) goto fail;
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(rhs); k++) {
            PyObject *s = PySequence_Fast_GET_ITEM(rhs, k);
            if (!PyUnicode_CheckExact(s)) continue;
            int seen = PySet_Contains(live, s);
            if (seen < 0 || (!seen && (PySet_Add(live, s) < 0 || PyList_Append(todo, s) < 0))) {
                Py_DECREF(rhs);
                goto fail;
            }
        }
        Py_DECREF(rhs);
    }
    Py_DECREF(prods);
    return 0;
fail:
    Py_DECREF(prods);
    return -1;
}

/* The names reachable from start through productions and counted items (start included). */
PyObject *cfg_reachable(PyObject *self, PyObject *args) {
    PyObject *rules, *counted, *start;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyDict_Type, &rules, &PyDict_Type, &counted, &start)) return NULL;
    PyObject *live = PySet_New(NULL), *todo = PyList_New(0);
    if (!live || !todo || PySet_Add(live, start) < 0 || PyList_Append(todo, start) < 0) goto fail;
    while (PyList_GET_SIZE(todo)) {
        Py_ssize_t last = PyList_GET_SIZE(todo) - 1;
        PyObject *name = PyList_GET_ITEM(todo, last);
        Py_INCREF(name);
        if (PyList_SetSlice(todo, last, last + 1, NULL) < 0) {
            Py_DECREF(name);
            goto fail;
        }
        PyObject *c = PyDict_GetItemWithError(counted, name), *alts = NULL;
        int bad = !c && PyErr_Occurred();
        if (c && !bad) {
            PyObject *item = PyObject_GetAttrString(c, "item");
            int seen = item ? PySet_Contains(live, item) : -1;
            bad = seen < 0 || (!seen && (PySet_Add(live, item) < 0 || PyList_Append(todo, item) < 0));
            Py_XDECREF(item);
        }
        if (!bad) {
            alts = PyDict_GetItemWithError(rules, name);
            bad = (!alts && PyErr_Occurred()) || (alts && reach_rule(alts, live, todo) < 0);
        }
        Py_DECREF(name);
        if (bad) goto fail;
    }
    Py_DECREF(todo);
    return live;
fail:
    Py_XDECREF(live);
    Py_XDECREF(todo);
    return NULL;
}

/* ---- scans of every symbol ---- */

/* Calls each(symbol, arg) on every symbol of every production of rules (a dict of name -> productions) until it
 * returns nonzero: that value (1 stop, -1 error), or 0 when every symbol was seen. */
static int each_symbol(PyObject *rules, int (*each)(PyObject *, void *), void *arg) {
    Py_ssize_t pos = 0;
    PyObject *name, *alts;
    while (PyDict_Next(rules, &pos, &name, &alts)) {
        PyObject *prods = productions_of(alts);
        if (!prods) return -1;
        int got = 0;
        for (Py_ssize_t i = 0; !got && i < PySequence_Fast_GET_SIZE(prods); i++) {
            PyObject *rhs = PySequence_Fast(PySequence_Fast_GET_ITEM(prods, i), "a production");
            if (!rhs) got = -1;
            for (Py_ssize_t k = 0; !got && rhs && k < PySequence_Fast_GET_SIZE(rhs); k++)
                got = each(PySequence_Fast_GET_ITEM(rhs, k), arg);
            Py_XDECREF(rhs);
        }
        Py_DECREF(prods);
        if (got) return got;
    }
    return 0;
}

typedef struct {
    PyObject *byteset_type, *found, *bits_name, *productive;
} Scan;

/* cfg_byte_bits' step: a byte set's bits to its first object. */
static int keep_bits(PyObject *s, void *arg) {
    Scan *S = arg;
    int is = PyObject_IsInstance(s, S->byteset_type);
    if (is <= 0) return is;
    PyObject *bits = PyObject_GetAttr(s, S->bits_name);
    int bad = !bits || PyDict_SetDefault(S->found, bits, s) == NULL;
    Py_XDECREF(bits);
    return bad ? -1 : 0;
}

/* CFG.byte_sets' walk: {bits: the first byte set with those bits} over every production's symbols. */
PyObject *cfg_byte_bits(PyObject *self, PyObject *args) {
    (void)self;
    Scan S = {0};
    PyObject *rules;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &rules, &S.byteset_type)) return NULL;
    S.found = PyDict_New();
    S.bits_name = PyUnicode_InternFromString("bits");
    if (!S.found || !S.bits_name || each_symbol(rules, keep_bits, &S) < 0) Py_CLEAR(S.found);
    Py_XDECREF(S.bits_name);
    return S.found;
}

/* cfg_every_symbol_productive's step: 1 (stop) at an empty byte set or a name not productive. */
static int not_productive(PyObject *s, void *arg) {
    Scan *S = arg;
    if ((PyObject *)Py_TYPE(s) == S->byteset_type) {
        PyObject *bits = PyObject_GetAttr(s, S->bits_name);
        int truth = bits ? PyObject_IsTrue(bits) : -1;
        Py_XDECREF(bits);
        return truth < 0 ? -1 : !truth;
    }
    int in = PySet_Contains(S->productive, s);
    return in < 0 ? -1 : !in;
}

/* dead_ends._every_symbol_productive: whether every symbol of every production is a non-empty byte set or a
 * productive name, and every counted repetition's item productive (True / False). */
PyObject *cfg_every_symbol_productive(PyObject *self, PyObject *args) {
    (void)self;
    Scan S = {0};
    PyObject *rules, *counted, *name, *c;
    if (!PyArg_ParseTuple(args, "O!O!O!O", &PyDict_Type, &rules, &PyDict_Type, &counted, &PySet_Type, &S.productive,
                          &S.byteset_type))
        return NULL;
    S.bits_name = PyUnicode_InternFromString("bits");
    int got = S.bits_name ? each_symbol(rules, not_productive, &S) : -1;
    Py_XDECREF(S.bits_name);
    for (Py_ssize_t pos = 0; !got && PyDict_Next(counted, &pos, &name, &c);) {
        PyObject *item = PyObject_GetAttrString(c, "item");
        int in = item ? PySet_Contains(S.productive, item) : -1;
        Py_XDECREF(item);
        got = in < 0 ? -1 : !in;
    }
    if (got < 0) return NULL;
    return PyBool_FromLong(!got);
}
