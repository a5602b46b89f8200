/* The vocabulary as a trie over bytes, per vocabulary and grammar-independent (cfgzip_lab.vocab_trie is
 * its Python side): what classing walks (classing.c) and numbers (assemble.c). */
#include "vocab_trie.h"

void vtrie_dealloc(VocabTrie *T) {
    if (T->held)
        for (int64_t i = 0; i < T->ntok; i++) Py_XDECREF(T->held[i]);
    free(T->held);
    free(T->kinds);
    free(T->cptr);
    free(T->ckid);
    free(T->cbyte);
    free(T->tptr);
    free(T->ttok);
    free(T->len);
    free(T->send);
    free(T->below);
    free(T->parent);
    free(T->pbyte);
    free(T->eligible_of);
    free(T->by_length);
    free(T->trank);
    free(T->stop_ids);
    scan_cache_free(T->scans);
    Py_TYPE(T)->tp_free((PyObject *)T);
}

static PyObject **sort_tok;
static int cmp_tokens(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    Py_ssize_t la = PyBytes_GET_SIZE(sort_tok[a]), lb = PyBytes_GET_SIZE(sort_tok[b]);
    int c = memcmp(PyBytes_AS_STRING(sort_tok[a]), PyBytes_AS_STRING(sort_tok[b]), (size_t)(la < lb ? la : lb));
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Bucket key of a token by its first two bytes (0: none), so that only equal buckets are compared. */
static inline int32_t bucket2(PyObject *b) {
    Py_ssize_t l = PyBytes_GET_SIZE(b);
    const uint8_t *s = (const uint8_t *)PyBytes_AS_STRING(b);
    return (l > 0 ? s[0] + 1 : 0) * 257 + (l > 1 ? s[1] + 1 : 0);
}

/* The per-vocabulary half of the numbering (see VocabTrie): built once with the trie. */
static int vtrie_numbering_init(VocabTrie *T) {
    int64_t v = T->ntok;
    T->eligible_of = calloc((size_t)(v ? v : 1), 1);
    T->by_length = malloc((size_t)(T->eligible ? T->eligible : 1) * sizeof(int32_t));
    int64_t *start = calloc((size_t)T->maxdepth + 2, sizeof(int64_t));
    if (!T->eligible_of || !T->by_length || !start) {
        free(start);
        return -1;
    }
    T->nstops = 0;
    T->nnormal = 0;
    T->nfixed_blocked = 0;
    T->fixed_blocked_min = -1;
    T->stop_rep = -1;
    int32_t stop_len = INT32_MAX;
    for (int64_t t = 0; t < v; t++) {
        int32_t l = T->len[t];
        T->nnormal += T->kinds[t] == T->normal;
        if (l > 0 && T->kinds[t] == T->normal) {
            T->eligible_of[t] = 1;
            start[l + 1]++;
        } else if (T->kinds[t] == T->stop) {
            T->nstops++;
            if (l < stop_len) {
                stop_len = l;
                T->stop_rep = t;
            }
        } else {
            T->nfixed_blocked++;
            if (T->fixed_blocked_min < 0) T->fixed_blocked_min = t;
        }
    }
    for (int64_t l = 0; l <= T->maxdepth; l++) start[l + 1] += start[l];
    for (int64_t t = 0; t < v; t++)
        if (T->eligible_of[t]) T->by_length[start[T->len[t]]++] = (int32_t)t;
    free(start);
    T->trank = malloc((size_t)(T->eligible ? T->eligible : 1) * sizeof(int32_t));
    int32_t *rank_of = malloc((size_t)(v ? v : 1) * sizeof(int32_t));
    T->stop_ids = malloc((size_t)(T->nstops ? T->nstops : 1) * sizeof(int32_t));
    if (!T->trank || !rank_of || !T->stop_ids) {
        free(rank_of);
        return -1;
    }
    for (int64_t i = 0; i < T->eligible; i++) rank_of[T->by_length[i]] = (int32_t)i;
    for (int64_t k = 0; k < T->eligible; k++) T->trank[k] = rank_of[T->ttok[k]];
    free(rank_of);
    for (int64_t t = 0, k = 0; t < v; t++)
        if (!T->eligible_of[t] && T->kinds[t] == T->stop) T->stop_ids[k++] = (int32_t)t;
    return 0;
}

/* The trie's arrays from its nodes' parents and bytes (nn nodes in preorder) and the m sorted tokens' nodes:
 * children (CSR, bytes ascending), each node's tokens, subtree ends and the bytes below each node; -1
 * without memory. */
static int vtrie_arrays(VocabTrie *T, const int32_t *parent, const uint8_t *pbyte, const int32_t *tok_node,
                        const int32_t *sorted, int64_t nn, int64_t m) {
    T->nnodes = nn;
    T->cptr = calloc((size_t)nn + 1, sizeof(int32_t));
    T->ckid = malloc((size_t)nn * sizeof(int32_t));
    T->cbyte = malloc((size_t)nn);
    T->tptr = calloc((size_t)nn + 1, sizeof(int32_t));
    T->ttok = malloc((size_t)(m ? m : 1) * sizeof(int32_t));
    if (!T->cptr || !T->ckid || !T->cbyte || !T->tptr || !T->ttok) return -1;
    for (int64_t t = 1; t < nn; t++) T->cptr[parent[t] + 1]++;
    for (int64_t t = 0; t < nn; t++) T->cptr[t + 1] += T->cptr[t];
    /* preorder: a node's children are created in byte order, after it, so filling in creation order works */
    {
        int32_t *fill = malloc((size_t)nn * sizeof(int32_t));
        if (!fill) return -1;
        memcpy(fill, T->cptr, (size_t)nn * sizeof(int32_t));
        for (int64_t t = 1; t < nn; t++) {
            int32_t q = parent[t];
            T->ckid[fill[q]] = (int32_t)t;
            T->cbyte[fill[q]] = pbyte[t];
            fill[q]++;
        }
        free(fill);
    }
    for (int64_t k = 0; k < m; k++) T->tptr[tok_node[k] + 1]++;
    for (int64_t t = 0; t < nn; t++) T->tptr[t + 1] += T->tptr[t];
    /* tok_node is non-decreasing in sorted order (preorder numbering): tokens land in order */
    for (int64_t k = 0; k < m; k++) T->ttok[k] = sorted[k];
    /* Subtree ends and the bytes below each node, children before parents (reverse preorder). */
    T->send = malloc((size_t)nn * sizeof(int32_t));
    T->below = calloc((size_t)nn * 4, sizeof(uint64_t));
    if (!T->send || !T->below) return -1;
    for (int64_t t = nn - 1; t >= 0; t--) {
        int32_t end = (int32_t)t + 1;
        uint64_t *mask = T->below + 4 * t;
        for (int32_t c = T->cptr[t]; c < T->cptr[t + 1]; c++) {
            int32_t kid = T->ckid[c];
            const uint64_t *km = T->below + 4 * kid;
            for (int w = 0; w < 4; w++) mask[w] |= km[w];
            mask[T->cbyte[c] >> 6] |= 1ULL << (T->cbyte[c] & 63);
            if (T->send[kid] > end) end = T->send[kid];
        }
        T->send[t] = end;
    }
    return 0;
}

/* VocabTrie(token_bytes, kinds, normal=0, stop=1): the trie of the NORMAL, non-empty tokens' bytes.
 * Built by sorting the tokens (counting sort on their first two bytes, then qsort inside each bucket)
 * and inserting them in order: nodes come out in preorder, children in byte order. */
int vtrie_init(VocabTrie *T, PyObject *args, PyObject *kwds) {
    (void)kwds;
    PyObject *tokens;
    Py_buffer kinds;
    int normal = 0, stop = 1;
    if (!PyArg_ParseTuple(args, "O!y*|ii", &PyList_Type, &tokens, &kinds, &normal, &stop)) return -1;
    if (T->held) {
        PyErr_SetString(PyExc_RuntimeError, "VocabTrie: already built");
        PyBuffer_Release(&kinds);
        return -1;
    }
    int ret = -1;
    Py_ssize_t v = PyList_GET_SIZE(tokens);
    int32_t *order = NULL, *sorted = NULL, *stack = NULL, *parent = NULL, *tok_node = NULL, *count = NULL;
    uint8_t *pbyte = NULL;
    if (kinds.len != v) {
        PyErr_SetString(PyExc_ValueError, "VocabTrie: kinds must have one uint8 per token");
        goto done;
    }
    T->ntok = v;
    T->normal = normal;
    T->stop = stop;
    T->len = malloc((size_t)(v ? v : 1) * sizeof(int32_t));
    T->held = calloc((size_t)(v ? v : 1), sizeof(PyObject *));
    T->kinds = malloc((size_t)(v ? v : 1));
    order = malloc((size_t)(v ? v : 1) * sizeof(int32_t));
    sorted = malloc((size_t)(v ? v : 1) * sizeof(int32_t));
    count = calloc(257 * 257 + 1, sizeof(int32_t));
    if (!T->len || !T->held || !T->kinds || !order || !sorted || !count) goto nomem;
    memcpy(T->kinds, kinds.buf, (size_t)v);
    int64_t total = 0, maxlen = 0, m = 0;
    for (Py_ssize_t i = 0; i < v; i++) {
        PyObject *b = PyList_GET_ITEM(tokens, i);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "VocabTrie: every token must be bytes");
            goto done;
        }
        T->held[i] = Py_NewRef(b);
        Py_ssize_t l = PyBytes_GET_SIZE(b);
        if (l > INT32_MAX / 2) {
            PyErr_SetString(PyExc_ValueError, "VocabTrie: a token is too long");
            goto done;
        }
        T->len[i] = (int32_t)l;
        if (l > 0 && T->kinds[i] == normal) {
            total += l;
            order[m++] = (int32_t)i;
            count[bucket2(b) + 1]++;
            if (l > maxlen) maxlen = l;
        }
    }
    T->eligible = m;
    T->maxdepth = maxlen;
    for (int k = 0; k < 257 * 257; k++) count[k + 1] += count[k];
    for (int64_t k = 0; k < m; k++) sorted[count[bucket2(T->held[order[k]])]++] = order[k];
    sort_tok = T->held;
    for (int64_t lo = 0; lo < m;) { /* count[k] is now the end of bucket k */
        int32_t key = bucket2(T->held[sorted[lo]]);
        int64_t hi = count[key];
        if (hi - lo > 1) qsort(sorted + lo, (size_t)(hi - lo), sizeof(int32_t), cmp_tokens);
        lo = hi;
    }
    int64_t cap = total + 1;
    parent = malloc((size_t)cap * sizeof(int32_t));
    pbyte = malloc((size_t)cap);
    tok_node = malloc((size_t)(m ? m : 1) * sizeof(int32_t));
    stack = malloc((size_t)(maxlen + 1) * sizeof(int32_t));
    if (!parent || !pbyte || !tok_node || !stack) goto nomem;
    int64_t nn = 1;
    parent[0] = -1;
    pbyte[0] = 0;
    stack[0] = 0;
    const uint8_t *p = NULL;
    int64_t lp = 0;
    for (int64_t k = 0; k < m; k++) {
        int32_t i = sorted[k];
        const uint8_t *s = (const uint8_t *)PyBytes_AS_STRING(T->held[i]);
        int64_t l = T->len[i], common = 0, lim = l < lp ? l : lp;
        while (common < lim && s[common] == p[common]) common++;
        for (int64_t d = common; d < l; d++) {
            parent[nn] = stack[d];
            pbyte[nn] = s[d];
            stack[d + 1] = (int32_t)nn;
            nn++;
        }
        tok_node[k] = stack[l];
        p = s;
        lp = l;
    }
    if (vtrie_arrays(T, parent, pbyte, tok_node, sorted, nn, m) < 0) goto nomem;
    if (vtrie_numbering_init(T) < 0) goto nomem;
    T->parent = parent;
    T->pbyte = pbyte;
    parent = NULL;
    pbyte = NULL;
    ret = 0;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(order);
    free(sorted);
    free(count);
    free(stack);
    free(parent);
    free(pbyte);
    free(tok_node);
    PyBuffer_Release(&kinds);
    return ret;
}

/* same(token_bytes, kinds): whether this trie was built from these tokens and kinds (the same bytes
 * objects: one compare of the pointer arrays, ~0.06 ms for Llama-3; equal bytes in other objects count
 * too, compared one by one). */
PyObject *vtrie_same(VocabTrie *T, PyObject *args) {
    PyObject *tokens;
    Py_buffer kinds;
    if (!PyArg_ParseTuple(args, "O!y*", &PyList_Type, &tokens, &kinds)) return NULL;
    int same = T->held && PyList_GET_SIZE(tokens) == T->ntok && kinds.len == T->ntok &&
               memcmp(kinds.buf, T->kinds, (size_t)T->ntok) == 0;
    /* the usual case, the very token objects it was built from: one compare of the pointer arrays */
    int64_t i0 = 0;
    if (same && T->ntok && memcmp(((PyListObject *)tokens)->ob_item, T->held, (size_t)T->ntok * sizeof(PyObject *)) == 0)
        i0 = T->ntok;
    for (int64_t i = i0; same && i < T->ntok; i++) {
        PyObject *b = PyList_GET_ITEM(tokens, i), *h = T->held[i];
        if (b == h) continue;
        same = PyBytes_Check(b) && PyBytes_GET_SIZE(b) == PyBytes_GET_SIZE(h) &&
               memcmp(PyBytes_AS_STRING(b), PyBytes_AS_STRING(h), (size_t)PyBytes_GET_SIZE(h)) == 0;
    }
    PyBuffer_Release(&kinds);
    return PyBool_FromLong(same);
}

PyObject *vtrie_info(VocabTrie *T, PyObject *unused) {
    (void)unused;
    int64_t kept, reused, refused, bytes; /* the scan cache (classing.c): entries kept, applied, found not to hold */
    scan_cache_info(T->scans, &kept, &reused, &refused, &bytes);
    return Py_BuildValue("{sLsLsLsLsLsLsLsLsLsL}", "tokens", (long long)T->ntok, "eligible", (long long)T->eligible,
                         "nodes", (long long)T->nnodes, "longest", (long long)T->maxdepth, "normal",
                         (long long)T->nnormal, "stop", (long long)T->nstops, "scans_kept", (long long)kept,
                         "scans_reused", (long long)reused, "scans_refused", (long long)refused, "scans_bytes", (long long)bytes);
}
