/* The normal form's passes over rule sets, in C (included by _words.c, which owns the store).
 *
 * cfgzip_lab.grammar.gnf is the reference: every function here is one of its memoised walks over the
 * rule sets' DAGs, and creates its nodes in the order the Python walk does (children in edge order
 * before their parent, unions in edge order), so that a normal form built in a compiled store has
 * the nodes, under the same ids, of one built in a WordStore (tests/test_compiled.py checks this
 * node for node, and tests/test_gnf_passes.py each pass against its Python walk). The Python walks
 * spent most of a JSON Schema's normal form on tuples made per node visited.
 *
 *   map_symbols(roots, to, memo) -> [node]   gnf._map_symbols: every word with each symbol s in
 *       0 <= s < len(to) replaced by to[s] (edges with to[s] == DROP dropped, other symbols kept),
 *       children mapped first in edge order; edges that meet in one symbol united in edge order.
 *   optional(roots, nullable, memo) -> [node] gnf._remove_epsilon's opt: every word with any subset
 *       of its nullable occurrences (nullable: bytes, 1 per nonterminal) deleted.
 *   closure(nts, roots, m, generating) -> [nt] gnf._closure: the least fixpoint.
 *   reach(roots, start) -> [nt]              gnf._remove_useless's REACHABLE (roots[a]: a's rule set
 *       or -1).
 *   symbols(roots) -> {symbol}               gnf._symbols_named.
 *   word(symbols) -> node                    WordStore.word (the lifting makes one per alternative).
 *   below_sets_of(rows, start, bottom)       gnf.stack_below without families (None past 128 MB).
 * memo: a writable int32 buffer, -1 where unknown, indexed by the nodes walked (a node past its end
 * is walked without one); the caller keeps it between calls of one pass.
 */

#define GNF_DROP INT64_MIN

typedef struct {
    const int64_t *to;
    int64_t m;
    int32_t *memo;
    int64_t mlen;
    const uint8_t *nullable;
} GnfPass;

static int cmp_edge_sym(const void *x, const void *y) {
    int64_t a = ((const int64_t *)x)[0], b = ((const int64_t *)y)[0];
    if (a != b) return a < b ? -1 : 1;
    int64_t i = ((const int64_t *)x)[2], j = ((const int64_t *)y)[2];  /* stable: edge order */
    return i < j ? -1 : i > j;
}

static int64_t gnf_map(Words *S, GnfPass *P, int64_t node, int depth) {
    if (node < P->mlen && P->memo[node] >= 0) return P->memo[node];
    if (node <= W_EPSILON) return node;
    if (depth > MAX_DEPTH) return E_DEPTH;
    int64_t e0 = S->estart[node], e1 = S->estart[node + 1];
    int accepts = S->acc[node];
    int64_t base = S->stop;
    int sorted = 1;
    for (int64_t i = e0; i < e1; i++) {
        int64_t s = S->esym[i], c = S->ekid[i], ns = s;
        if (s >= 0 && s < P->m) {
            ns = P->to[s];
            if (ns == GNF_DROP) continue;
        }
        int64_t rc = gnf_map(S, P, c, depth + 1);
        if (rc < 0) {
            S->stop = base;
            return rc;
        }
        if (rc == W_EMPTY) continue;
        if (S->stop > base && S->ssym[S->stop - 1] >= ns) sorted = 0;
        if (push_edge(S, ns, rc) < 0) {
            S->stop = base;
            return E_NOMEM;
        }
    }
    int64_t r;
    if (sorted) {
        r = make_scratch(S, accepts, base);
    } else {
        /* Edges that meet in one symbol: group them (sort (symbol, position)), then unite each group's
         * children in EDGE order across groups, as the Python walk does (unions create nodes, so their
         * order is the ids'), and push the groups in symbol order. */
        int64_t cnt = S->stop - base;
        int64_t *tmp = malloc((size_t)cnt * 5 * sizeof(int64_t));
        if (!tmp) {
            S->stop = base;
            return E_NOMEM;
        }
        int64_t *group_of = tmp + 3 * cnt, *acc = tmp + 4 * cnt;
        for (int64_t k = 0; k < cnt; k++) {
            tmp[3 * k] = S->ssym[base + k];
            tmp[3 * k + 1] = S->skid[base + k];
            tmp[3 * k + 2] = k;
        }
        qsort(tmp, (size_t)cnt, 3 * sizeof(int64_t), cmp_edge_sym);
        int64_t groups = 0;
        for (int64_t k = 0; k < cnt; k++) {
            if (k == 0 || tmp[3 * k] != tmp[3 * (k - 1)]) acc[groups++] = W_EMPTY;
            group_of[tmp[3 * k + 2]] = groups - 1;
        }
        for (int64_t k = 0; k < cnt; k++) { /* edge order: the scratch still holds the edges */
            int64_t g = group_of[k];
            int64_t kid = w_union(S, acc[g], S->skid[base + k], depth + 1);
            if (kid < 0) {
                free(tmp);
                S->stop = base;
                return kid;
            }
            acc[g] = kid;
        }
        int64_t *syms = malloc((size_t)(groups ? groups : 1) * sizeof(int64_t));
        if (!syms) {
            free(tmp);
            S->stop = base;
            return E_NOMEM;
        }
        for (int64_t k = 0, g = 0; k < cnt; k++)
            if (k == 0 || tmp[3 * k] != tmp[3 * (k - 1)]) syms[g++] = tmp[3 * k];
        S->stop = base;
        for (int64_t g = 0; g < groups; g++)
            if (push_edge(S, syms[g], acc[g]) < 0) {
                free(syms);
                free(tmp);
                S->stop = base;
                return E_NOMEM;
            }
        free(syms);
        free(tmp); /* (acc lives in tmp) */
        r = make_scratch(S, accepts, base);
    }
    if (r < 0) return r;
    if (node < P->mlen) P->memo[node] = (int32_t)r;
    return r;
}

static int64_t gnf_opt(Words *S, GnfPass *P, int64_t node, int depth) {
    if (node < P->mlen && P->memo[node] >= 0) return P->memo[node];
    if (node <= W_EPSILON) return node;
    if (depth > MAX_DEPTH) return E_DEPTH;
    int64_t e0 = S->estart[node], e1 = S->estart[node + 1];
    int accepts = S->acc[node];
    int64_t base = S->stop;
    for (int64_t i = e0; i < e1; i++) {
        int64_t rc = gnf_opt(S, P, S->ekid[i], depth + 1);
        if (rc < 0) {
            S->stop = base;
            return rc;
        }
        if (push_edge(S, S->esym[i], rc) < 0) {
            S->stop = base;
            return E_NOMEM;
        }
    }
    int64_t r = make_scratch(S, accepts, base);
    if (r < 0) return r;
    for (int64_t i = e0; i < e1; i++) {
        int64_t s = S->esym[i];
        if (s >= 0 && s < P->m && P->nullable[s]) {
            int64_t rc = gnf_opt(S, P, S->ekid[i], depth + 1);
            if (rc < 0) return rc;
            r = w_union(S, r, rc, depth + 1);
            if (r < 0) return r;
        }
    }
    if (node < P->mlen) P->memo[node] = (int32_t)r;
    return r;
}

/* Node ids of a Python iterable, checked. */
/* mode 0: node ids; 1: node ids or -1; 2: any integers (nonterminal ids) */
static int64_t *gnf_node_list(Words *S, PyObject *seq, Py_ssize_t *count, int mode) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of nodes");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int64_t *out = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!out) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if ((v == -1 && PyErr_Occurred()) || (mode == 0 && check_node(S, v) < 0) ||
            (mode == 1 && v != -1 && check_node(S, v) < 0)) {
            free(out);
            Py_DECREF(fast);
            return NULL;
        }
        out[i] = v;
    }
    Py_DECREF(fast);
    *count = n;
    return out;
}

static PyObject *gnf_run(Words *S, PyObject *roots, GnfPass *P, int optional) {
    Py_ssize_t n;
    int64_t *nodes = gnf_node_list(S, roots, &n, 0);
    if (!nodes) return NULL;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        int64_t r = optional ? gnf_opt(S, P, nodes[i], 0) : gnf_map(S, P, nodes[i], 0);
        if (r < 0) {
            Py_CLEAR(out);
            raise_code(S, r);
            break;
        }
        PyObject *x = PyLong_FromLongLong(r);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, x);
    }
    free(nodes);
    return out;
}

static int gnf_memo(Py_buffer *memo, GnfPass *P) {
    if (memo->itemsize != 4 || memo->len % 4) {
        PyErr_SetString(PyExc_ValueError, "gnf pass: the memo must be an int32 buffer");
        return -1;
    }
    P->memo = memo->buf;
    P->mlen = memo->len / 4;
    return 0;
}

static PyObject *words_map_symbols(Words *S, PyObject *args) {
    PyObject *roots;
    Py_buffer to, memo;
    if (!PyArg_ParseTuple(args, "Oy*w*", &roots, &to, &memo)) return NULL;
    PyObject *out = NULL;
    GnfPass P = {0};
    if (to.len % 8) {
        PyErr_SetString(PyExc_ValueError, "map_symbols: the map must be an int64 buffer");
    } else if (gnf_memo(&memo, &P) == 0) {
        P.to = to.buf;
        P.m = to.len / 8;
        out = gnf_run(S, roots, &P, 0);
    }
    PyBuffer_Release(&to);
    PyBuffer_Release(&memo);
    return out;
}

static PyObject *words_optional(Words *S, PyObject *args) {
    PyObject *roots;
    Py_buffer nullable, memo;
    if (!PyArg_ParseTuple(args, "Oy*w*", &roots, &nullable, &memo)) return NULL;
    PyObject *out = NULL;
    GnfPass P = {0};
    if (gnf_memo(&memo, &P) == 0) {
        P.nullable = nullable.buf;
        P.m = nullable.len;
        out = gnf_run(S, roots, &P, 1);
    }
    PyBuffer_Release(&nullable);
    PyBuffer_Release(&memo);
    return out;
}

/* has-a-word search of gnf._closure: state 1 holds (kept across rounds), 2 + round fails this round */
static int gnf_has_word(Words *S, int64_t node, uint32_t *state, uint32_t round, const uint8_t *found, int64_t m,
                        int generating, int depth) {
    if (state[node] == 1) return 1;
    if (state[node] == round) return 0;
    if (depth > MAX_DEPTH) return E_DEPTH;
    int got = S->acc[node];
    for (int64_t i = S->estart[node]; !got && i < S->estart[node + 1]; i++) {
        int64_t s = S->esym[i];
        int counts = (s >= 0 && s < m && found[s]) || (generating && (s < 0 || s >= ((int64_t)1 << 48)));
        if (!counts) continue;
        int r = gnf_has_word(S, S->ekid[i], state, round, found, m, generating, depth + 1);
        if (r < 0) return r;
        got = r;
    }
    state[node] = got ? 1 : round;
    return got;
}

static PyObject *words_closure(Words *S, PyObject *args) {
    PyObject *nts_obj, *roots_obj;
    long long m;
    int generating;
    if (!PyArg_ParseTuple(args, "OOLp", &nts_obj, &roots_obj, &m, &generating)) return NULL;
    Py_ssize_t n, n2;
    int64_t *nts = NULL, *roots = NULL;
    uint8_t *found = NULL;
    uint32_t *state = NULL;
    PyObject *out = NULL;
    nts = gnf_node_list(S, nts_obj, &n, 2); /* (nonterminal ids, checked below) */
    if (!nts) return NULL;
    roots = gnf_node_list(S, roots_obj, &n2, 0);
    if (!roots) goto done;
    if (n != n2 || m < 0) {
        PyErr_SetString(PyExc_ValueError, "closure: nonterminals and roots differ in number");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (nts[i] < 0 || nts[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "closure: a nonterminal past m");
            goto done;
        }
    found = calloc((size_t)m + 1, 1);
    state = calloc((size_t)S->n + 1, sizeof(uint32_t));
    if (!found || !state) {
        PyErr_NoMemory();
        goto done;
    }
    state[W_EPSILON] = 1;
    for (uint32_t round = 2;; round++) {
        int changed = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (found[nts[i]]) continue;
            int r = gnf_has_word(S, roots[i], state, round, found, m, generating, 0);
            if (r < 0) {
                raise_code(S, r);
                goto done;
            }
            if (r) {
                found[nts[i]] = 1;
                changed = 1;
            }
        }
        if (!changed) break;
    }
    out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        if (!found[nts[i]]) continue;
        PyObject *x = PyLong_FromLongLong(nts[i]);
        if (!x || PyList_Append(out, x) < 0) Py_CLEAR(out);
        Py_XDECREF(x);
    }
done:
    free(nts);
    free(roots);
    free(found);
    free(state);
    return out;
}

static PyObject *words_reach(Words *S, PyObject *args) {
    PyObject *roots_obj;
    long long start;
    if (!PyArg_ParseTuple(args, "OL", &roots_obj, &start)) return NULL;
    Py_ssize_t m;
    int64_t *roots = gnf_node_list(S, roots_obj, &m, 1);
    if (!roots) return NULL;
    PyObject *out = NULL;
    uint8_t *reached = calloc((size_t)m + 1, 1);
    uint64_t *seen = calloc((size_t)(S->n / 64 + 1), sizeof(uint64_t));
    int64_t *frontier = malloc((size_t)(m + 1) * sizeof(int64_t)), ftop = 0;
    int64_t *stack = NULL, cap = 0, top = 0;
    if (!reached || !seen || !frontier) {
        PyErr_NoMemory();
        goto done;
    }
    if (start < 0 || start >= m || roots[start] < 0) {
        PyErr_SetString(PyExc_ValueError, "reach: the start has no rule set");
        goto done;
    }
    reached[start] = 1;
    frontier[ftop++] = start;
    while (ftop) {
        int64_t a = frontier[--ftop];
        if (roots[a] < 0) continue;
        if (grow((void **)&stack, &cap, top + 1, sizeof(int64_t)) < 0) goto nomem;
        stack[top++] = roots[a];
        while (top) {
            int64_t node = stack[--top];
            if ((seen[node >> 6] >> (node & 63)) & 1) continue;
            seen[node >> 6] |= (uint64_t)1 << (node & 63);
            int64_t e0 = S->estart[node], cnt = n_edges(S, node);
            if (grow((void **)&stack, &cap, top + cnt, sizeof(int64_t)) < 0) goto nomem;
            for (int64_t i = e0; i < e0 + cnt; i++) {
                int64_t s = S->esym[i];
                if (s >= 0 && s < m && !reached[s]) {
                    reached[s] = 1;
                    frontier[ftop++] = s;
                }
                stack[top++] = S->ekid[i];
            }
        }
    }
    out = PyList_New(0);
    for (int64_t a = 0; out && a < m; a++) {
        if (!reached[a]) continue;
        PyObject *x = PyLong_FromLongLong(a);
        if (!x || PyList_Append(out, x) < 0) Py_CLEAR(out);
        Py_XDECREF(x);
    }
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(roots);
    free(reached);
    free(seen);
    free(frontier);
    free(stack);
    return out;
}

static PyObject *words_symbols(Words *S, PyObject *roots_obj) {
    Py_ssize_t n;
    int64_t *roots = gnf_node_list(S, roots_obj, &n, 0);
    if (!roots) return NULL;
    PyObject *out = NULL;
    uint64_t *seen = calloc((size_t)(S->n / 64 + 1), sizeof(uint64_t));
    int64_t *stack = NULL, cap = 0, top = 0;
    if (!seen || grow((void **)&stack, &cap, n + 1, sizeof(int64_t)) < 0) goto nomem;
    for (Py_ssize_t i = 0; i < n; i++) stack[top++] = roots[i];
    out = PySet_New(NULL);
    while (out && top) {
        int64_t node = stack[--top];
        if ((seen[node >> 6] >> (node & 63)) & 1) continue;
        seen[node >> 6] |= (uint64_t)1 << (node & 63);
        int64_t e0 = S->estart[node], cnt = n_edges(S, node);
        if (grow((void **)&stack, &cap, top + cnt, sizeof(int64_t)) < 0) goto nomem;
        for (int64_t i = e0; i < e0 + cnt; i++) {
            PyObject *x = PyLong_FromLongLong(S->esym[i]);
            if (!x || PySet_Add(out, x) < 0) Py_CLEAR(out);
            Py_XDECREF(x);
            stack[top++] = S->ekid[i];
        }
    }
    goto done;
nomem:
    Py_CLEAR(out);
    PyErr_NoMemory();
done:
    free(roots);
    free(seen);
    free(stack);
    return out;
}

/* word(symbols) -> node: WordStore.word, the singleton set {symbols} (made from its last symbol on). */
static PyObject *words_word(Words *S, PyObject *symbols) {
    PyObject *fast = PySequence_Fast(symbols, "word: expected a sequence of symbols");
    if (!fast) return NULL;
    int64_t node = W_EPSILON;
    for (Py_ssize_t i = PySequence_Fast_GET_SIZE(fast) - 1; i >= 0; i--) {
        long long sym = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (sym == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return NULL;
        }
        node = make1(S, sym, node);
        if (node < 0) {
            Py_DECREF(fast);
            return raise_code(S, node);
        }
    }
    Py_DECREF(fast);
    return PyLong_FromLongLong(node);
}

/* below_sets_of(rows, start, bottom) -> list of sets, or None past its memory bound: gnf.stack_below
 * for a table without families (rows[a]: the tails of a's row), `bottom` standing for BOTTOM. The same
 * fixpoint over bitsets: below[Bi] holds B(i+1) for every word's neighbours, and below[a] flows into
 * below[b] for every b ending some word of a's tails. Reads the store only. */
static PyObject *words_below_sets_of(Words *S, PyObject *args) {
    PyObject *rows_obj, *bottom;
    long long start;
    if (!PyArg_ParseTuple(args, "O!LO", &PyList_Type, &rows_obj, &start, &bottom)) return NULL;
    int64_t n = PyList_GET_SIZE(rows_obj);
    if (start < 0 || start >= n) {
        PyErr_SetString(PyExc_ValueError, "below_sets_of: start out of range");
        return NULL;
    }
    int64_t W = (n + 1 + 63) / 64, R = 0;
    PyObject *out = NULL;
    uint64_t *below = NULL, *lasts = NULL, *ends = NULL;
    int32_t *dense = NULL, *order = NULL;
    int64_t *stack = NULL, cap = 0, top = 0;
    int64_t **rows = calloc((size_t)n + 1, sizeof(int64_t *));
    Py_ssize_t *lens = calloc((size_t)n + 1, sizeof(Py_ssize_t));
    if (!rows || !lens) goto nomem;
    for (int64_t a = 0; a < n; a++) {
        rows[a] = gnf_node_list(S, PyList_GET_ITEM(rows_obj, a), &lens[a], 0);
        if (!rows[a]) goto done;
    }
    /* the tails' nodes, numbered in post-order (children first) */
    dense = malloc((size_t)S->n * sizeof(int32_t));
    order = malloc((size_t)S->n * sizeof(int32_t));
    if (!dense || !order) goto nomem;
    memset(dense, 0xFF, (size_t)S->n * sizeof(int32_t)); /* -1: not numbered yet */
    for (int64_t a = 0; a < n; a++)
        for (Py_ssize_t k = 0; k < lens[a]; k++) {
            if (dense[rows[a][k]] >= 0) continue;
            if (grow((void **)&stack, &cap, top + 1, sizeof(int64_t)) < 0) goto nomem;
            stack[top++] = rows[a][k];
            while (top) { /* a node is numbered once all its children are (a DAG: this ends) */
                int64_t node = stack[top - 1], e0 = S->estart[node], e1 = S->estart[node + 1];
                if (dense[node] >= 0) {
                    top--;
                    continue;
                }
                int pending = 0;
                if (grow((void **)&stack, &cap, top + (e1 - e0), sizeof(int64_t)) < 0) goto nomem;
                for (int64_t i = e0; i < e1; i++) {
                    int64_t sym = S->esym[i], c = S->ekid[i];
                    if (sym < 0 || sym >= n) {
                        PyErr_SetString(PyExc_ValueError, "below_sets_of: a tail symbol is no nonterminal");
                        goto done;
                    }
                    if (dense[c] < 0) {
                        stack[top++] = c;
                        pending = 1;
                    }
                }
                if (pending) continue;
                top--;
                dense[node] = (int32_t)R;
                order[R++] = (int32_t)node;
            }
        }
    if ((double)R * (double)W > 16e6 || (double)n * (double)W > 16e6) { /* past ~128 MB: the Python walk */
        Py_INCREF(Py_None);
        out = Py_None;
        goto done;
    }
    below = calloc((size_t)n * W + 1, sizeof(uint64_t));
    lasts = calloc((size_t)(R ? R : 1) * W, sizeof(uint64_t));
    ends = calloc((size_t)n * W + 1, sizeof(uint64_t));
    if (!below || !lasts || !ends) goto nomem;
    below[start * W + n / 64] |= (uint64_t)1 << (n % 64);
    for (int64_t r = 0; r < R; r++) { /* children come before parents in `order` */
        int64_t node = order[r];
        uint64_t *mine = lasts + r * W;
        for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
            int64_t sym = S->esym[i], c = S->ekid[i];
            if (S->acc[c]) mine[sym >> 6] |= (uint64_t)1 << (sym & 63);
            if (dense[c] >= 0) {
                const uint64_t *theirs = lasts + (int64_t)dense[c] * W;
                for (int64_t w = 0; w < W; w++) mine[w] |= theirs[w];
            }
            for (int64_t j = S->estart[c]; j < S->estart[c + 1]; j++) {
                int64_t next = S->esym[j];
                below[sym * W + (next >> 6)] |= (uint64_t)1 << (next & 63);
            }
        }
    }
    for (int64_t a = 0; a < n; a++)
        for (Py_ssize_t k = 0; k < lens[a]; k++) {
            const uint64_t *theirs = lasts + (int64_t)dense[rows[a][k]] * W;
            for (int64_t w = 0; w < W; w++) ends[a * W + w] |= theirs[w];
        }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int64_t a = 0; a < n; a++)
            for (int64_t v = 0; v < W; v++)
                for (uint64_t bits = ends[a * W + v]; bits; bits &= bits - 1) {
                int64_t b = v * 64 + __builtin_ctzll(bits);
                for (int64_t w = 0; w < W; w++) {
                    uint64_t more = below[a * W + w] & ~below[b * W + w];
                    if (more) {
                        below[b * W + w] |= more;
                        changed = 1;
                    }
                }
            }
    }
    out = PyList_New(n);
    for (int64_t a = 0; out && a < n; a++) {
        PyObject *set = PySet_New(NULL);
        if (!set) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, a, set);
        for (int64_t b = 0; b <= n; b++) {
            if (!((below[a * W + (b >> 6)] >> (b & 63)) & 1)) continue;
            PyObject *x = b == n ? Py_NewRef(bottom) : PyLong_FromLongLong(b);
            if (!x || PySet_Add(set, x) < 0) {
                Py_XDECREF(x);
                Py_CLEAR(out);
                break;
            }
            Py_DECREF(x);
        }
    }
    goto done;
nomem:
    PyErr_NoMemory();
done:
    if (rows)
        for (int64_t a = 0; a < n; a++) free(rows[a]);
    free(rows);
    free(lens);
    free(dense);
    free(order);
    free(stack);
    free(below);
    free(lasts);
    free(ends);
    return out;
}

#define GNF_PASS_METHODS                                                                                       \
    {"map_symbols", (PyCFunction)words_map_symbols, METH_VARARGS, "the normal form's symbol maps (_gnf_passes.h)"}, \
        {"optional", (PyCFunction)words_optional, METH_VARARGS, "epsilon-removal's opt (_gnf_passes.h)"},          \
        {"closure", (PyCFunction)words_closure, METH_VARARGS, "GENERATING / NULLABLE (_gnf_passes.h)"},            \
        {"reach", (PyCFunction)words_reach, METH_VARARGS, "REACHABLE nonterminals (_gnf_passes.h)"},               \
        {"symbols", (PyCFunction)words_symbols, METH_O, "every symbol below some roots (_gnf_passes.h)"},        \
        {"word", (PyCFunction)words_word, METH_O, "WordStore.word: the set holding one word (_gnf_passes.h)"},     \
        {"below_sets_of", (PyCFunction)words_below_sets_of, METH_VARARGS, "gnf.stack_below (_gnf_passes.h)"},
