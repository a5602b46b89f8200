/* A normal form's nodes as arrays, and a store read from them (cfgzip_lab.grammar.gnf_arrays)
 *
 * subgraph(roots) -> (accepts, indptr, symbols, children, root_ids): bytes of uint8[m], int32[m + 1],
 *   int64[E], int32[E], int32[len(roots)]: the nodes below `roots` (int64; EMPTY and EPSILON left out),
 *   renumbered from 2 in the order gnf_arrays._store_to_arrays gives them (the reference: an iterative
 *   post-order from each root in turn, a node's unnumbered children pushed in edge order, so taken last
 *   first; children before parents), and each root's new id.
 * load_arrays(accepts, indptr, symbols, children) on a fresh store (EMPTY and EPSILON only): those nodes
 *   interned as ids 2, 3, ... (ValueError naming what is wrong: an edge to a later node or to EMPTY,
 *   symbols out of order, or a node twice). Both skip the Python tuples of every node (a JSON Schema's
 *   normal form: ~0.5 ms of a cold start; sql_select ~6 ms). */
#include "words.h"

PyObject *words_subgraph(Words *S, PyObject *args) {
    Py_buffer roots_b;
    if (!PyArg_ParseTuple(args, "y*", &roots_b)) return NULL;
    PyObject *result = NULL;
    int32_t *new_id = NULL, *order = NULL;
    int64_t *stack = NULL, cap = 0, top = 0, m = 0, edges = 0;
    int64_t nroots = roots_b.len / 8;
    const int64_t *roots = roots_b.buf;
    if (roots_b.len % 8) {
        PyErr_SetString(PyExc_ValueError, "subgraph: roots must be int64");
        goto done;
    }
    new_id = malloc((size_t)S->n * sizeof(int32_t));
    order = malloc((size_t)S->n * sizeof(int32_t));
    if (!new_id || !order) goto nomem;
    memset(new_id, 0xFF, (size_t)S->n * sizeof(int32_t));
    new_id[W_EMPTY] = W_EMPTY;
    new_id[W_EPSILON] = W_EPSILON;
    for (int64_t r = 0; r < nroots; r++) {
        if (roots[r] < 0 || roots[r] >= S->n) {
            PyErr_SetString(PyExc_ValueError, "subgraph: a root is not in the store");
            goto done;
        }
        if (new_id[roots[r]] >= 0) continue;
        if (grow((void **)&stack, &cap, top + 1, sizeof(int64_t)) < 0) goto nomem;
        stack[top++] = roots[r] << 1;
        while (top) {
            int64_t e = stack[--top], node = e >> 1;
            if (new_id[node] >= 0) continue;
            if (e & 1) {
                new_id[node] = (int32_t)(m + 2);
                order[m++] = (int32_t)node;
                edges += n_edges(S, node);
                continue;
            }
            if (grow((void **)&stack, &cap, top + 1 + n_edges(S, node), sizeof(int64_t)) < 0) goto nomem;
            stack[top++] = (node << 1) | 1;
            for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++)
                if (new_id[S->ekid[i]] < 0) stack[top++] = (int64_t)S->ekid[i] << 1;
        }
    }
    {
        PyObject *acc_o = PyBytes_FromStringAndSize(NULL, m), *ip_o = PyBytes_FromStringAndSize(NULL, (m + 1) * 4);
        PyObject *sym_o = PyBytes_FromStringAndSize(NULL, edges * 8), *kid_o = PyBytes_FromStringAndSize(NULL, edges * 4);
        PyObject *ids_o = PyBytes_FromStringAndSize(NULL, nroots * 4);
        if (acc_o && ip_o && sym_o && kid_o && ids_o) {
            uint8_t *acc = (uint8_t *)PyBytes_AS_STRING(acc_o);
            int32_t *ip = (int32_t *)PyBytes_AS_STRING(ip_o), *kid = (int32_t *)PyBytes_AS_STRING(kid_o);
            int32_t *ids = (int32_t *)PyBytes_AS_STRING(ids_o);
            int64_t *sym = (int64_t *)PyBytes_AS_STRING(sym_o), at = 0;
            ip[0] = 0;
            for (int64_t j = 0; j < m; j++) {
                int64_t node = order[j];
                acc[j] = S->acc[node];
                for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++, at++) {
                    sym[at] = S->esym[i];
                    kid[at] = new_id[S->ekid[i]];
                }
                ip[j + 1] = (int32_t)at;
            }
            for (int64_t r = 0; r < nroots; r++) ids[r] = new_id[roots[r]];
            result = PyTuple_Pack(5, acc_o, ip_o, sym_o, kid_o, ids_o);
        }
        Py_XDECREF(acc_o);
        Py_XDECREF(ip_o);
        Py_XDECREF(sym_o);
        Py_XDECREF(kid_o);
        Py_XDECREF(ids_o);
    }
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(new_id);
    free(order);
    free(stack);
    PyBuffer_Release(&roots_b);
    return result;
}

PyObject *words_load_arrays(Words *S, PyObject *args) {
    Py_buffer acc_b, ip_b, sym_b, kid_b;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &acc_b, &ip_b, &sym_b, &kid_b)) return NULL;
    PyObject *result = NULL;
    int64_t m = acc_b.len, nedges = sym_b.len / 8;
    const uint8_t *acc = acc_b.buf;
    const int32_t *ip = ip_b.buf, *kid = kid_b.buf;
    const int64_t *sym = sym_b.buf;
    if (S->n != 2 || S->has_grammar) {
        PyErr_SetString(PyExc_ValueError, "load_arrays: the store is not a fresh one");
        goto done;
    }
    if (ip_b.len != (m + 1) * 4 || sym_b.len % 8 || kid_b.len != nedges * 4 || ip[0] != 0 || ip[m] != nedges) {
        PyErr_SetString(PyExc_ValueError, "load_arrays: the edge lists do not match the node count");
        goto done;
    }
    if (reserve(S, m + 2, nedges) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (int64_t j = 0; j < m; j++) {
        int64_t base = S->stop, id = j + 2;
        if (ip[j + 1] < ip[j]) {
            PyErr_SetString(PyExc_ValueError, "load_arrays: the edge lists do not match the node count");
            goto done;
        }
        for (int64_t i = ip[j]; i < ip[j + 1]; i++) {
            if (kid[i] < W_EPSILON || kid[i] >= id) {
                S->stop = base;
                PyErr_SetString(PyExc_ValueError, "load_arrays: an edge to a later node or to the empty set");
                goto done;
            }
            if (i > ip[j] && sym[i] <= sym[i - 1]) {
                S->stop = base;
                PyErr_SetString(PyExc_ValueError, "load_arrays: a node whose edges are not sorted by symbol");
                goto done;
            }
            if (push_edge(S, sym[i], kid[i]) < 0) {
                S->stop = base;
                PyErr_NoMemory();
                goto done;
            }
        }
        int64_t got = make_scratch(S, acc[j] != 0, base);
        if (got < 0) {
            raise_code(S, got);
            goto done;
        }
        if (got != id) {
            PyErr_SetString(PyExc_ValueError, "load_arrays: the store holds the same node twice");
            goto done;
        }
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&acc_b);
    PyBuffer_Release(&ip_b);
    PyBuffer_Release(&sym_b);
    PyBuffer_Release(&kid_b);
    return result;
}
