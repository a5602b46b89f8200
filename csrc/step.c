/* The native engine's accept step (cfgzip_lab.native.walk.StateWalker.advance and the matcher's token
 * dispatch, the reference): see step.h. */
#include "step.h"

void advancer_dealloc(Advancer *A) {
    Py_XDECREF(A->S);
    Py_XDECREF(A->tokens);
    Py_XDECREF(A->budget_exc);
    if (A->class_of) PyBuffer_Release(&A->class_buf);
    if (A->ids) {
        PyBuffer_Release(&A->ids_buf);
        PyBuffer_Release(&A->classes_buf);
    }
    free(A->class_kind);
    memo_free(&A->memo);
    Py_TYPE(A)->tp_free((PyObject *)A);
}

/* Advancer(words, token_bytes, class_of int32[V], class_kind uint8[K], atom_table bytes[256],
 *          token_budget, request_budget, memo_entries, budget_exc, ids=None, classes=None)
 * class_of None: the sparse map ids (int32, ascending) and classes (int32), every other id class 0
 * (TokenClasses.sparse_map: a small grammar's, whose dense map is never made) */
int advancer_init(Advancer *A, PyObject *args, PyObject *kwds) {
    (void)kwds;
    Words *S;
    PyObject *tokens, *exc, *cls_obj, *ids_obj = Py_None, *classes_obj = Py_None;
    Py_buffer cls = {0}, kinds, atoms, ids = {0}, classes = {0};
    long long token_budget, request_budget, memo_entries;
    if (!PyArg_ParseTuple(args, "O!O!Oy*y*LLLO|OO", &WordsType, &S, &PyList_Type, &tokens, &cls_obj, &kinds, &atoms,
                          &token_budget, &request_budget, &memo_entries, &exc, &ids_obj, &classes_obj))
        return -1;
    int ret = -1;
    int64_t V = PyList_GET_SIZE(tokens), K = kinds.len;
    if (cls_obj == Py_None) {
        if (PyObject_GetBuffer(ids_obj, &ids, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(classes_obj, &classes, PyBUF_SIMPLE) < 0)
            goto done;
        if (ids.len % 4 || ids.len != classes.len) {
            PyErr_SetString(PyExc_ValueError, "Advancer: a sparse map's ids and classes do not pair up");
            goto done;
        }
        const int32_t *id = ids.buf;
        for (Py_ssize_t i = 0; i < ids.len / 4; i++)
            if (id[i] < 0 || id[i] >= V || (i && id[i] <= id[i - 1])) {
                PyErr_SetString(PyExc_ValueError, "Advancer: a sparse map's ids are not ascending ids of the vocabulary");
                goto done;
            }
    } else if (PyObject_GetBuffer(cls_obj, &cls, PyBUF_SIMPLE) < 0) {
        goto done;
    }
    if (A->S || (cls.obj && cls.len != V * 4) || atoms.len != 256 || !S->has_grammar) {
        PyErr_SetString(PyExc_ValueError, "Advancer: class_of, token_bytes and the atom table do not fit");
        goto done;
    }
    A->class_kind = malloc((size_t)(K ? K : 1));
    if (!A->class_kind) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(A->class_kind, kinds.buf, (size_t)K);
    /* class_of is not scanned here: every accept checks the one id it reads (advancer_accept), which
     * also refuses an id written after this; a scan of Llama-3's 128k ids was ~0.05 ms a grammar */
    for (int b = 0; b < 256; b++)
        if (((const uint8_t *)atoms.buf)[b] >= S->natoms) {
            PyErr_SetString(PyExc_ValueError, "Advancer: the atom table names a byte class the grammar lacks");
            goto done;
        }
    memcpy(A->atom_of, atoms.buf, 256);
    A->S = (Words *)Py_NewRef((PyObject *)S);
    A->tokens = Py_NewRef(tokens);
    A->budget_exc = Py_NewRef(exc);
    if (cls.obj) {
        A->class_buf = cls;  /* kept: released in advancer_dealloc */
        A->class_of = (int32_t *)cls.buf;
        cls.obj = NULL;      /* so that `done` does not release it */
    } else {
        A->ids_buf = ids;
        A->classes_buf = classes;
        A->ids = ids.buf;
        A->classes = classes.buf;
        A->nids = ids.len / 4;
        ids.obj = classes.obj = NULL;
    }
    A->V = V;
    A->K = K;
    A->token_budget = token_budget;
    A->request_budget = request_budget;
    A->memo_entries = memo_entries;
    ret = 0;
done:
    if (cls.obj) PyBuffer_Release(&cls);
    if (ids.obj) PyBuffer_Release(&ids);
    if (classes.obj) PyBuffer_Release(&classes);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&atoms);
    return ret;
}

/* A token's class in a sparse map: its entry's (binary search over the ascending ids), else 0. */
static inline int32_t sparse_class(const Advancer *A, int64_t token) {
    int64_t lo = 0, hi = A->nids;
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (A->ids[mid] < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < A->nids && A->ids[lo] == token ? A->classes[lo] : 0;
}

/* The accept step: the state after the token (nodes created into *created), or ADVANCE_ERROR with an
 * exception set. Read by accept(state, token, spent) -> (state after the token, nodes created), and by
 * accept_state(state, token, spent) -> the state after (nodes created then in last_created: an int, where
 * the pair is a tuple, a collected object, so a step that returns one may start Python's collector).
 * The state after: EMPTY (0) when the grammar does not allow the token (or it is blocked, or no id),
 * -1 when it is a stop token the state may end on (the matcher's _STOPPED). A NORMAL token's
 * successor is memoised by (state, class): equal displacements lead to the same canonical node.
 * Raises budget_exc past the per-token or the request budget (nothing changed then). */
#define ADVANCE_ERROR INT64_MIN

static int64_t advance(Advancer *A, PyObject *const *args, Py_ssize_t nargs, int64_t *created) {
    *created = 0;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "accept(state, token, spent)");
        return ADVANCE_ERROR;
    }
    long long state = PyLong_AsLongLong(args[0]), token = PyLong_AsLongLong(args[1]);
    long long spent = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) return ADVANCE_ERROR;
    Words *S = A->S;
    if (check_node(S, state) < 0) return ADVANCE_ERROR;
    if (token < 0 || token >= A->V) return W_EMPTY;
    int32_t k = A->class_of ? A->class_of[token] : sparse_class(A, token);
    if (k < 0 || k >= A->K) {  /* the array was written after the Advancer checked it */
        PyErr_SetString(PyExc_ValueError, "Advancer: class_of names a class outside class_kind");
        return ADVANCE_ERROR;
    }
    uint8_t kind = A->class_kind[k];
    if (kind == 1) return S->acc[state] ? -1 : W_EMPTY;
    if (kind != 0) return W_EMPTY;
    uint64_t key = (uint64_t)state * (uint64_t)A->K + (uint64_t)k;
    int32_t got = memo_get(&A->memo, key);
    if (got >= 0) {
        A->hits++;
        return got;
    }
    A->advances++;
    int64_t budget = A->token_budget < A->request_budget - spent ? A->token_budget : A->request_budget - spent;
    if (budget <= 0) {
        PyErr_Format(A->budget_exc, "the request created more than %lld state nodes", (long long)A->request_budget);
        return ADVANCE_ERROR;
    }
    PyObject *b = PyList_GET_ITEM(A->tokens, token);
    if (!PyBytes_Check(b)) {
        PyErr_SetString(PyExc_TypeError, "Advancer: a token's bytes are not bytes");
        return ADVANCE_ERROR;
    }
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(b);
    Py_ssize_t len = PyBytes_GET_SIZE(b);
    int64_t before = S->created, saved = S->limit, r = state;
    S->limit = before + budget;
    for (Py_ssize_t i = 0; i < len && r != W_EMPTY; i++) {
        r = w_step(S, r, A->atom_of[data[i]]);
        if (r < 0) break;
    }
    S->limit = saved;
    if (r < 0) {
        if (r == E_BUDGET)
            PyErr_Format(A->budget_exc, "a token would create more than %lld state nodes", (long long)budget);
        else if (r == E_DEPTH || r == E_SYMBOL)
            PyErr_SetString(A->budget_exc, "a token would nest the state deeper than the compiled store allows");
        else
            PyErr_NoMemory();
        return ADVANCE_ERROR;
    }
    if (A->memo.used >= A->memo_entries) { /* dropped whole when full: it only holds finished results */
        memo_free(&A->memo);
        A->drops++;
    }
    if (memo_put(&A->memo, key, (int32_t)r) < 0) {
        PyErr_NoMemory();
        return ADVANCE_ERROR;
    }
    *created = S->created - before;
    return r;
}

PyObject *advancer_accept(Advancer *A, PyObject *const *args, Py_ssize_t nargs) {
    int64_t created, r = advance(A, args, nargs, &created);
    return r == ADVANCE_ERROR ? NULL : Py_BuildValue("LL", (long long)r, (long long)created);
}

PyObject *advancer_accept_state(Advancer *A, PyObject *const *args, Py_ssize_t nargs) {
    int64_t created, r = advance(A, args, nargs, &created);
    if (r == ADVANCE_ERROR) return NULL;
    A->last_created = created;
    return PyLong_FromLongLong((long long)r);
}



PyObject *advancer_get_last_created(Advancer *A, void *closure) {
    (void)closure;
    return PyLong_FromLongLong((long long)A->last_created);
}

PyObject *advancer_stats(Advancer *A, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("{sLsLsL}", "advance_memo_hits", (long long)A->hits, "advances", (long long)A->advances,
                         "memo_drops", (long long)A->drops);
}

