/* The sigma_in index (cfgzip_lab.native.index.build_index, the reference)
 *
 * Per class: the set of SEP-rest nodes reachable from its displacement node over output symbols (each
 * rest node's words are reverse(sigma_in)), memoised per node over the whole vocabulary; each listed
 * rest's words once; the distinct sigma_in sorted, inserted into a trie in that order (so numbering is
 * a function of the grammar and classes, not of store ids); per trie node the classes whose rests hold
 * its sigma_in. Output: the arrays SigmaInIndex.to_arrays gives. */
#include "words.h"

/* node id -> int32, -1 where none: the memos below are keyed by store nodes, dense (a store of a few
 * thousand nodes: an array read where a hash table probed, and no rehash as it fills); grown where a node
 * is made while the index is built (a counted family's IN rest). */
typedef struct {
    int32_t *v;
    int64_t n;
} NodeMap;

static inline int32_t nodemap_get(const NodeMap *m, int64_t node) { return node < m->n ? m->v[node] : -1; }

static int nodemap_put(NodeMap *m, int64_t node, int32_t val) {
    if (node >= m->n) {
        int64_t n = m->n * 2 > node + 1 ? m->n * 2 : node + 1024;
        int32_t *v = realloc(m->v, (size_t)n * sizeof(int32_t));
        if (!v) return -1;
        memset(v + m->n, 0xFF, (size_t)(n - m->n) * sizeof(int32_t));
        m->v = v;
        m->n = n;
    }
    m->v[node] = val;
    return 0;
}

/* Sized for the store's nodes now; -1 without memory. */
static int nodemap_init(NodeMap *m, int64_t n) {
    m->n = n > 0 ? n : 1;
    m->v = malloc((size_t)m->n * sizeof(int32_t));
    if (!m->v) return -1;
    memset(m->v, 0xFF, (size_t)m->n * sizeof(int32_t));
    return 0;
}

typedef struct {
    Words *S;
    NodeMap rmemo;       /* node -> set id of its rests */
    int64_t *set_off;    /* set id -> offset in pool */
    int32_t *set_len;
    int64_t nsets, setcap, setcap2;
    int32_t *pool;       /* rests (their compact ids), per set */
    int64_t npool, poolcap;
    NodeMap rid;         /* rest node -> compact id (in order of first sight), so that the arrays over */
    int32_t *rest_node;  /* rests are as long as there are rests, not store nodes (c_like: 8k of 289k) */
    int64_t nrest, restcap;
    int64_t *stamps;     /* compact id -> the last set that took it (dedup without sorting) */
    int64_t stamp_now, nstamps;
    int64_t *sstamps;    /* set id -> the last set that took all of it (a part met twice is read once) */
    int64_t sstampcap;
    int32_t *subs;       /* the parts' set ids of the nodes being made, a stack (read again, not looked up) */
    int64_t nsubs, subcap;
    NodeMap cmemo;       /* node -> index in counts */
    unsigned __int128 *counts;
    int64_t ncounts, countcap;
} Idx;


/* The compact id of a rest node (given one on first sight); < 0: no memory. */
static int64_t rest_id(Idx *X, int64_t node) {
    int32_t got = nodemap_get(&X->rid, node);
    if (got >= 0) return got;
    if (grow((void **)&X->rest_node, &X->restcap, X->nrest + 1, sizeof(int32_t)) < 0) return E_NOMEM;
    if (X->nrest >= X->nstamps) {
        int64_t cap = X->nstamps ? 2 * X->nstamps : 1024;
        int64_t *st = realloc(X->stamps, (size_t)cap * sizeof(int64_t));
        if (!st) return E_NOMEM;
        memset(st + X->nstamps, 0, (size_t)(cap - X->nstamps) * sizeof(int64_t));
        X->stamps = st;
        X->nstamps = cap;
    }
    X->rest_node[X->nrest] = (int32_t)node;
    if (nodemap_put(&X->rid, node, (int32_t)X->nrest) < 0) return E_NOMEM;
    return X->nrest++;
}

static int64_t new_set(Idx *X, int64_t off, int64_t len) {
    if (X->nsets >= X->setcap) {
        int64_t c = X->setcap, c2 = X->setcap;
        if (grow((void **)&X->set_off, &c, X->nsets + 1, sizeof(int64_t)) < 0 ||
            grow((void **)&X->set_len, &c2, X->nsets + 1, sizeof(int32_t)) < 0)
            return E_NOMEM;
        X->setcap = c < c2 ? c : c2;
    }
    if (grow((void **)&X->sstamps, &X->sstampcap, X->nsets + 1, sizeof(int64_t)) < 0) return E_NOMEM;
    X->set_off[X->nsets] = off;
    X->set_len[X->nsets] = (int32_t)len;
    X->sstamps[X->nsets] = 0;
    return X->nsets++;
}

/* index._reversed_inputs: the set (id) of nodes right after a SEP edge reachable over output symbols
 * (plain nonterminals and family members F_c). A relative bottom REL(f, j, lo, hi) stands for
 * F_(x+j) . SEP . IN(f, lo, hi): its rest is the node IN(f, lo, hi) . child, made here in the Python
 * order (edge by edge, as the Python build makes it). */
static int64_t rev_inputs(Idx *X, int64_t node, int depth) {
    Words *S = X->S;
    int32_t got = nodemap_get(&X->rmemo, node);
    if (got >= 0) return got;
    if (depth > MAX_DEPTH) return E_DEPTH;
    int64_t sep = S->sep;
    int64_t parts = 0, single = -1, direct = 0, base = X->nsubs;
    for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
        int64_t sym = S->esym[i];
        if (sym == sep) {
            direct++;
        } else if (below_key(S, sym) >= 0) {
            int64_t sub = rev_inputs(X, S->ekid[i], depth + 1); /* leaves nsubs as it was */
            if (sub < 0) return sub;
            if (grow((void **)&X->subs, &X->subcap, X->nsubs + 1, sizeof(int32_t)) < 0) return E_NOMEM;
            X->subs[X->nsubs++] = (int32_t)sub;
            parts++;
            single = sub;
        } else if (sym >= WIDE_REL && S->nfam) {
            int64_t f, j, lo, hi;
            split_wide(S, sym, &f, &j, &lo, &hi);
            int64_t made = make1(S, in_sym_of(S, f, lo, hi), S->ekid[i]);
            if (made < 0) return made;
            direct++;
        }
    }
    int64_t id;
    if (!direct && parts == 1) {
        id = single;
    } else {
        /* the parts' elements and the direct ones, each once (stamps: no sort) */
        int64_t stamp = ++X->stamp_now, u = 0, at = base;
        for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
            int64_t sym = S->esym[i];
            const int32_t *add;
            int64_t add_len;
            int32_t one;
            if (sym == sep) {
                int64_t r = rest_id(X, S->ekid[i]);
                if (r < 0) return r;
                one = (int32_t)r;
                add = &one;
                add_len = 1;
            } else if (below_key(S, sym) >= 0) {
                int64_t sub = X->subs[at++];
                if (X->sstamps[sub] == stamp) continue; /* every element of it is in already */
                X->sstamps[sub] = stamp;
                add_len = X->set_len[sub];
                /* grow first: the part's elements live in the pool too */
                if (grow((void **)&X->pool, &X->poolcap, X->npool + u + add_len, sizeof(int32_t)) < 0) return E_NOMEM;
                add = X->pool + X->set_off[sub];
            } else if (sym >= WIDE_REL && S->nfam) {
                int64_t f, j, lo, hi;
                split_wide(S, sym, &f, &j, &lo, &hi);
                int64_t made = make1(S, in_sym_of(S, f, lo, hi), S->ekid[i]); /* interned above: no new node */
                if (made < 0) return made;
                if ((made = rest_id(X, made)) < 0) return made;
                one = (int32_t)made;
                add = &one;
                add_len = 1;
            } else {
                continue;
            }
            if (add == &one && grow((void **)&X->pool, &X->poolcap, X->npool + u + 1, sizeof(int32_t)) < 0)
                return E_NOMEM;
            for (int64_t j = 0; j < add_len; j++) {
                int32_t r = add[j];
                if (X->stamps[r] == stamp) continue;
                X->stamps[r] = stamp;
                X->pool[X->npool + u++] = r;
            }
        }
        id = new_set(X, X->npool, u);
        X->npool += u;
        if (id < 0) return id;
    }
    X->nsubs = base;
    if (nodemap_put(&X->rmemo, node, (int32_t)id) < 0) return E_NOMEM;
    return id;
}

#define COUNT_CAP (((unsigned __int128)1) << 126)
/* The number of words of a node (WordStore.count), saturating at COUNT_CAP; -1: no memory. */
static int count_words(Idx *X, int64_t node, unsigned __int128 *out, int depth) {
    Words *S = X->S;
    if (node == W_EMPTY || node == W_EPSILON) {
        *out = node == W_EPSILON;
        return 0;
    }
    int32_t got = nodemap_get(&X->cmemo, node);
    if (got >= 0) {
        *out = X->counts[got];
        return 0;
    }
    if (depth > MAX_DEPTH) return E_DEPTH;
    unsigned __int128 total = S->acc[node];
    for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
        unsigned __int128 sub;
        int r = count_words(X, S->ekid[i], &sub, depth + 1);
        if (r < 0) return r;
        total += sub;
        if (total > COUNT_CAP) total = COUNT_CAP;
    }
    if (grow((void **)&X->counts, &X->countcap, X->ncounts + 1, sizeof(unsigned __int128)) < 0) return E_NOMEM;
    X->counts[X->ncounts] = total;
    if (nodemap_put(&X->cmemo, node, (int32_t)X->ncounts) < 0) return E_NOMEM;
    X->ncounts++;
    *out = total;
    return 0;
}

/* qsort by trie symbol (a parent's kids) */
static const int32_t *sort_syms;
static int cmp_by_sym(const void *x, const void *y) {
    int32_t a = sort_syms[*(const int32_t *)x], b = sort_syms[*(const int32_t *)y];
    return (a > b) - (a < b);
}

int cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The index of v in the sorted, distinct xs[0:n] (v is there). */
static int64_t rank_i64(const int64_t *xs, int64_t n, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (xs[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static PyObject *bytes_of(const void *data, int64_t n, size_t elem) {
    return PyBytes_FromStringAndSize(n ? (const char *)data : "", (Py_ssize_t)(n * (int64_t)elem));
}

static PyObject *int128_to_py(unsigned __int128 v) {
    PyObject *hi = PyLong_FromUnsignedLongLong((unsigned long long)(v >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)v);
    PyObject *sh = PyLong_FromLong(64), *r = NULL;
    if (hi && lo && sh) {
        PyObject *t = PyNumber_Lshift(hi, sh);
        if (t) {
            r = PyNumber_Or(t, lo);
            Py_DECREF(t);
        }
    }
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(sh);
    return r;
}

/* sigma_index(class_nodes, max_words_per_node, max_words)
 *   class_nodes: int64[K], the displacement node of each class to index (< 1: not indexed: not NORMAL,
 *                dead, or left to the walk by the caller)
 * -> ("words", count): more than max_words sigma_in words to list (count: the exact number, capped at 2^126)
 *  | ("ok", edges int32[E*3] bytes, bits_indptr int64[T+1] bytes, bits_classes int32 bytes,
 *     unindexed int32 bytes (classes with a rest of more than max_words_per_node words), stats dict,
 *     family_edges int64[F*5] bytes: the IN(f, lo, hi) edges of counted families, rows (parent, f, lo, hi,
 *     child), SigmaInIndex's native_family_edges)
 * In steps, each a function below over one Build: the classes' rest sets (class_rest_sets), the rests to
 * list and their words (rests_to_list), the counted families' IN symbols (family_symbols), the trie of
 * every listed sigma_in (sigma_trie), the classes of each rest (rest_classes) and of each sigma_in
 * (sigma_rows), the trie numbered in preorder (number_trie), the classes at each trie node
 * (node_classes) and the IN edges set apart (family_edges). Each returns 0, or a negative code:
 * E_NOMEM, E_PYTHON (an exception set), or what rev_inputs / count_words returned. */
typedef struct {
    Words *S;
    Idx X;
    int64_t K;
    const int64_t *cnode;  /* K: each class's displacement node */
    int64_t *cset;         /* K: each class's rest set (an Idx set id), -1: not indexed */
    /* the rests to list: by compact rest id, their row (-1: none) and whether too large to list (big) */
    int32_t *row_of;
    uint8_t *big;
    int32_t *rest_of_row;  /* nrows: each row's rest node */
    int64_t nrows;
    int64_t *ins, nins;    /* the IN(f, lo, hi) symbols below the rests, sorted, each once */
    /* the trie: node t's parent, symbol, depth; tn nodes; ext: (trie node, symbol) -> trie node */
    int32_t *tpar, *tsym, *tdep;
    int64_t tn;
    Memo ext;              /* (trie node, symbol) -> trie node */
    NodeMap tix;           /* a node below the listed rests -> its index in toff / tlen */
    int64_t *toff;         /* a node's trie nodes: tpool[toff[i]:+tlen[i]] */
    int32_t *tlen, *tpool;
    int64_t *wstack;
    int32_t *unindexed;    /* the classes with a rest too large to list */
    int64_t nun;
    int32_t *row_ptr, *row_cls; /* the classes of each row, ascending (CSR) */
    int32_t *sig_ptr, *sig_row; /* the rows of each trie node (CSR by old trie id) */
    int64_t ns, maxlen;    /* distinct sigma_in, the longest */
    int32_t *order, *pcount, *tnode, *old_of, *tstack; /* the preorder numbering */
    int32_t *edges_sorted; /* ne rows (parent, symbol, child), new ids */
    int64_t ne;
    int64_t *indptr;       /* tn + 1: the classes of each new trie node, out_cls[indptr[t]:indptr[t+1]] */
    int32_t *out_cls;
    int64_t nout;
    int64_t *fam_edges, nfe;
} Build;

static void build_free(Build *B) {
    void *arrays[] = {B->cset, B->row_of, B->big, B->rest_of_row, B->ins, B->tpar, B->tsym, B->tdep, B->toff,
                      B->tlen, B->tpool, B->wstack, B->unindexed, B->row_ptr, B->row_cls, B->sig_ptr, B->sig_row,
                      B->order, B->pcount, B->tnode, B->old_of, B->tstack, B->edges_sorted, B->indptr, B->out_cls,
                      B->fam_edges};
    for (size_t a = 0; a < sizeof(arrays) / sizeof(arrays[0]); a++) free(arrays[a]);
    memo_free(&B->ext);
    free(B->tix.v);
    Idx *X = &B->X;
    free(X->rmemo.v);
    free(X->cmemo.v);
    free(X->set_off);
    free(X->set_len);
    free(X->pool);
    free(X->stamps);
    free(X->sstamps);
    free(X->subs);
    free(X->rest_node);
    free(X->rid.v);
    free(X->counts);
}

/* Each class's set of SEP-rest nodes (rev_inputs, memoised over the whole vocabulary). */
static int64_t class_rest_sets(Build *B) {
    B->cset = malloc((size_t)(B->K ? B->K : 1) * sizeof(int64_t));
    if (!B->cset || nodemap_init(&B->X.rmemo, B->S->n) < 0 || nodemap_init(&B->X.rid, B->S->n) < 0 ||
        nodemap_init(&B->X.cmemo, B->S->n) < 0 || nodemap_init(&B->tix, B->S->n) < 0)
        return E_NOMEM;
    for (int64_t k = 0; k < B->K; k++) {
        B->cset[k] = -1;
        if (B->cnode[k] < 1) continue;
        if (B->cnode[k] >= B->S->n) {
            PyErr_SetString(PyExc_ValueError, "sigma_index: a class node is not in the store");
            return E_PYTHON;
        }
        int64_t code = rev_inputs(&B->X, B->cnode[k], 0);
        if (code < 0) return code;
        B->cset[k] = code;
    }
    return 0;
}

/* The distinct rests, in order of first appearance, and their word counts: a rest of more than
 * max_per_node words is big (its classes are left to the walk), every other one a row to list. *to_list:
 * the words listed (capped at COUNT_CAP). */
static int64_t rests_to_list(Build *B, long long max_per_node, unsigned __int128 *to_list) {
    Idx *X = &B->X;
    B->row_of = malloc((size_t)(X->nrest ? X->nrest : 1) * sizeof(int32_t));
    B->big = calloc((size_t)(X->nrest ? X->nrest : 1), 1);
    if (!B->row_of || !B->big) return E_NOMEM;
    memset(B->row_of, 0xFF, (size_t)X->nrest * sizeof(int32_t));
    int64_t rowcap = 0;
    *to_list = 0;
    for (int64_t k = 0; k < B->K; k++) {
        if (B->cset[k] < 0) continue;
        for (int64_t j = 0; j < X->set_len[B->cset[k]]; j++) {
            int32_t r = X->pool[X->set_off[B->cset[k]] + j];
            if (B->row_of[r] != -1 || B->big[r]) continue;
            unsigned __int128 c;
            int64_t code = count_words(X, X->rest_node[r], &c, 0);
            if (code < 0) return code;
            if (c > (unsigned __int128)max_per_node) {
                B->big[r] = 1;
                continue;
            }
            *to_list += c;
            if (*to_list > COUNT_CAP) *to_list = COUNT_CAP;
            if (grow((void **)&B->rest_of_row, &rowcap, B->nrows + 1, sizeof(int32_t)) < 0) return E_NOMEM;
            B->row_of[r] = (int32_t)B->nrows;
            B->rest_of_row[B->nrows++] = X->rest_node[r];
        }
    }
    return 0;
}

/* Counted families: the IN(f, lo, hi) symbols the rests hold, sorted and each once; in a sigma_in IN is
 * the symbol nt + its rank, so that sigma_in sort as the Python build sorts them (every plain A before
 * every IN, the INs in Python's order: packed IN symbols compare as the Python ints). */
static int64_t family_symbols(Build *B) {
    Words *S = B->S;
    if (!S->nfam) return 0;
    uint8_t *seen = calloc((size_t)S->n, 1);
    int64_t *st = NULL, stn = 0, stcap = 0, inscap = 0, code = 0;
    if (!seen) return E_NOMEM;
    for (int64_t row = 0; row < B->nrows && !code; row++) {
        if (grow((void **)&st, &stcap, stn + 1, sizeof(int64_t)) < 0) code = E_NOMEM;
        else st[stn++] = B->rest_of_row[row];
        while (stn && !code) {
            int64_t node = st[--stn];
            if (seen[node]) continue;
            seen[node] = 1;
            if (grow((void **)&st, &stcap, stn + n_edges(S, node), sizeof(int64_t)) < 0 ||
                grow((void **)&B->ins, &inscap, B->nins + n_edges(S, node), sizeof(int64_t)) < 0) {
                code = E_NOMEM;
                break;
            }
            for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
                if (S->esym[i] >= WIDE_IN && S->esym[i] < WIDE_REL) B->ins[B->nins++] = S->esym[i];
                if (!seen[S->ekid[i]]) st[stn++] = S->ekid[i];
            }
        }
    }
    free(seen);
    free(st);
    if (code) return code;
    qsort(B->ins, (size_t)B->nins, sizeof(int64_t), cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < B->nins; i++)
        if (!u || B->ins[u - 1] != B->ins[i]) B->ins[u++] = B->ins[i];
    B->nins = u;
    return 0;
}

/* The trie child of t on symbol m, made where it is new; -1 without memory. */
static int64_t trie_child(Build *B, int32_t t, uint32_t m, int64_t *tcap) {
    uint64_t key = ((uint64_t)(uint32_t)t << 32) | m;
    int32_t c = memo_get(&B->ext, key);
    if (c >= 0) return c;
    if (B->tn >= INT32_MAX) return -1;
    if (B->tn >= *tcap) {
        int64_t c1 = *tcap, c2 = *tcap, c3 = *tcap;
        if (grow((void **)&B->tpar, &c1, B->tn + 1, sizeof(int32_t)) < 0 ||
            grow((void **)&B->tsym, &c2, B->tn + 1, sizeof(int32_t)) < 0 ||
            grow((void **)&B->tdep, &c3, B->tn + 1, sizeof(int32_t)) < 0)
            return -1;
        *tcap = c1;
    }
    c = (int32_t)B->tn++;
    B->tpar[c] = t;
    B->tsym[c] = (int32_t)m;
    B->tdep[c] = B->tdep[t] + 1;
    return memo_put(&B->ext, key, c) < 0 ? -1 : c;
}

/* A node's trie nodes, its children's done (see sigma_trie): the root where it accepts, then for each edge
 * (s, kid) the child on s of each of kid's trie nodes; appended to tpool and recorded in tix. */
static int64_t node_trie_nodes(Build *B, int64_t node, int64_t *tcap, int64_t *ntp, int64_t *tpcap, int64_t *ntix,
                               int64_t *toffcap, int64_t *tlencap) {
    Words *S = B->S;
    int64_t off = *ntp;
    if (S->acc[node]) {
        if (grow((void **)&B->tpool, tpcap, *ntp + 1, sizeof(int32_t)) < 0) return E_NOMEM;
        B->tpool[(*ntp)++] = 0;
    }
    for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
        int64_t sym = S->esym[i], kid = S->ekid[i];
        uint32_t m = (uint32_t)(sym >= WIDE_IN ? S->nt + rank_i64(B->ins, B->nins, sym) : sym - S->nt - 1);
        int32_t kix = nodemap_get(&B->tix, kid);
        if (*ntp + B->tlen[kix] - off > INT32_MAX || grow((void **)&B->tpool, tpcap, *ntp + B->tlen[kix], sizeof(int32_t)) < 0)
            return E_NOMEM;
        for (int32_t j = 0; j < B->tlen[kix]; j++) {
            int64_t c = trie_child(B, B->tpool[B->toff[kix] + j], m, tcap);
            if (c < 0) return E_NOMEM;
            B->tpool[(*ntp)++] = (int32_t)c;
        }
    }
    if (*ntix >= INT32_MAX || grow((void **)&B->toff, toffcap, *ntix + 1, sizeof(int64_t)) < 0 ||
        grow((void **)&B->tlen, tlencap, *ntix + 1, sizeof(int32_t)) < 0 ||
        nodemap_put(&B->tix, node, (int32_t)*ntix) < 0)
        return E_NOMEM;
    B->toff[*ntix] = off;
    B->tlen[(*ntix)++] = (int32_t)(*ntp - off);
    return 0;
}

/* The trie of every listed rest's sigma_in, built bottom-up over the rests' DAGs: a word s1..sd of a rest
 * is sigma_in sd..s1, so the sigma_in of a node are those of each child k (over an edge s) followed by s
 * (the trie child of each of k's trie nodes on s), with the root where the node accepts. Each node's trie
 * nodes are made once, in a post-order over the nodes below the listed rests (shared tails are not listed
 * again), sets over distinct edges are disjoint (a word is listed once). Numbered afterwards in preorder
 * with children in symbol order (number_trie), which is the order inserting the sorted sigma_in one by one
 * numbers them in (the Python build). Symbols n + 1 + A -> A (IN: nt + rank). */
static int64_t sigma_trie(Build *B) {
    Words *S = B->S;
    int64_t tcap = 0, ntp = 0, tpcap = 0, wcap = 0, ntix = 0, toffcap = 0, tlencap = 0, c2 = 0, c3 = 0;
    if (grow((void **)&B->tpar, &tcap, 1024, sizeof(int32_t)) < 0 || grow((void **)&B->tsym, &c2, tcap, sizeof(int32_t)) < 0 ||
        grow((void **)&B->tdep, &c3, tcap, sizeof(int32_t)) < 0)
        return E_NOMEM;
    B->tn = 1;
    B->tpar[0] = -1;
    B->tsym[0] = -1;
    B->tdep[0] = 0;
    for (int64_t row = 0; row < B->nrows; row++) {
        int64_t sp = 0, *ws; /* entries (node, next edge) */
        if (nodemap_get(&B->tix, B->rest_of_row[row]) >= 0) continue;
        if (grow((void **)&B->wstack, &wcap, 2, sizeof(int64_t)) < 0) return E_NOMEM;
        ws = B->wstack;
        ws[sp++] = B->rest_of_row[row];
        ws[sp++] = S->estart[B->rest_of_row[row]];
        while (sp) {
            int64_t node = ws[sp - 2], e = ws[sp - 1];
            if (e < S->estart[node + 1]) {
                ws[sp - 1] = e + 1;
                int64_t kid = S->ekid[e];
                if (nodemap_get(&B->tix, kid) < 0) {
                    if (grow((void **)&B->wstack, &wcap, sp + 2, sizeof(int64_t)) < 0) return E_NOMEM;
                    ws = B->wstack;
                    ws[sp++] = kid;
                    ws[sp++] = S->estart[kid];
                }
                continue;
            }
            sp -= 2;
            int64_t code = node_trie_nodes(B, node, &tcap, &ntp, &tpcap, &ntix, &toffcap, &tlencap);
            if (code < 0) return code;
        }
    }
    memo_free(&B->ext);
    return 0;
}

/* The classes left to the walk (those with a rest too large to list), and the classes of each row,
 * ascending. */
static int64_t rest_classes(Build *B) {
    Idx *X = &B->X;
    int64_t K = B->K, nrows = B->nrows, pairs = 0;
    B->unindexed = malloc((size_t)(K ? K : 1) * sizeof(int32_t));
    B->row_ptr = calloc((size_t)nrows + 1, sizeof(int32_t));
    if (!B->unindexed || !B->row_ptr) return E_NOMEM;
    for (int64_t k = 0; k < K; k++) {
        int64_t set = B->cset[k];
        if (set < 0) continue;
        int is_big = 0;
        for (int64_t j = 0; j < X->set_len[set] && !is_big; j++) is_big = B->big[X->pool[X->set_off[set] + j]];
        if (is_big) {
            B->unindexed[B->nun++] = (int32_t)k;
            B->cset[k] = -1;
            continue;
        }
        for (int64_t j = 0; j < X->set_len[set]; j++) B->row_ptr[B->row_of[X->pool[X->set_off[set] + j]] + 1]++;
        pairs += X->set_len[set];
    }
    for (int64_t r = 0; r < nrows; r++) B->row_ptr[r + 1] += B->row_ptr[r];
    B->row_cls = malloc((size_t)(pairs ? pairs : 1) * sizeof(int32_t));
    int32_t *fill = malloc((size_t)(nrows ? nrows : 1) * sizeof(int32_t));
    if (!B->row_cls || !fill) {
        free(fill);
        return E_NOMEM;
    }
    memcpy(fill, B->row_ptr, (size_t)nrows * sizeof(int32_t));
    for (int64_t k = 0; k < K; k++) /* classes ascending in each row */
        if (B->cset[k] >= 0)
            for (int64_t j = 0; j < X->set_len[B->cset[k]]; j++)
                B->row_cls[fill[B->row_of[X->pool[X->set_off[B->cset[k]] + j]]]++] = (int32_t)k;
    free(fill);
    return 0;
}

/* The rows of each sigma_in (CSR by trie node; a sigma_in is a trie node some rest holds), and how many
 * distinct sigma_in there are, the longest. */
static int64_t sigma_rows(Build *B) {
    int64_t tn = B->tn, ninc = 0;
    B->sig_ptr = calloc((size_t)tn + 1, sizeof(int32_t));
    if (!B->sig_ptr) return E_NOMEM;
    for (int64_t r = 0; r < B->nrows; r++) {
        int32_t rix = nodemap_get(&B->tix, B->rest_of_row[r]);
        const int32_t *set = B->tpool + B->toff[rix];
        for (int32_t j = 0; j < B->tlen[rix]; j++) B->sig_ptr[set[j] + 1]++;
        ninc += B->tlen[rix];
    }
    for (int64_t t = 0; t < tn; t++) {
        if (B->sig_ptr[t + 1]) {
            B->ns++;
            if (B->tdep[t] > B->maxlen) B->maxlen = B->tdep[t];
        }
        B->sig_ptr[t + 1] += B->sig_ptr[t];
    }
    B->sig_row = malloc((size_t)(ninc ? ninc : 1) * sizeof(int32_t));
    int32_t *fill = malloc((size_t)tn * sizeof(int32_t));
    if (!B->sig_row || !fill) {
        free(fill);
        return E_NOMEM;
    }
    memcpy(fill, B->sig_ptr, (size_t)tn * sizeof(int32_t));
    for (int64_t r = 0; r < B->nrows; r++) {
        int32_t rix = nodemap_get(&B->tix, B->rest_of_row[r]);
        const int32_t *set = B->tpool + B->toff[rix];
        for (int32_t j = 0; j < B->tlen[rix]; j++) B->sig_row[fill[set[j]]++] = (int32_t)r;
    }
    free(fill);
    return 0;
}

/* The trie numbered in preorder, children in symbol order (kid lists by parent, sorted by symbol), and its
 * edges grouped by parent in that order. */
static int64_t number_trie(Build *B) {
    int64_t tn = B->tn;
    int32_t *tsym = B->tsym;
    B->pcount = calloc((size_t)tn + 1, sizeof(int32_t));
    B->order = malloc((size_t)tn * sizeof(int32_t));  /* kids grouped by parent */
    B->tnode = malloc((size_t)tn * sizeof(int32_t));  /* old id -> preorder id */
    B->old_of = malloc((size_t)tn * sizeof(int32_t)); /* preorder id -> old id */
    B->tstack = malloc((size_t)tn * sizeof(int32_t));
    B->edges_sorted = malloc((size_t)(tn > 1 ? tn - 1 : 1) * 3 * sizeof(int32_t));
    int32_t *fill = malloc((size_t)tn * sizeof(int32_t));
    int32_t *pcount = B->pcount, *order = B->order;
    if (!pcount || !order || !B->tnode || !B->old_of || !B->tstack || !B->edges_sorted || !fill) {
        free(fill);
        return E_NOMEM;
    }
    for (int64_t t = 1; t < tn; t++) pcount[B->tpar[t] + 1]++;
    for (int64_t t = 0; t < tn; t++) pcount[t + 1] += pcount[t];
    memcpy(fill, pcount, (size_t)tn * sizeof(int32_t));
    for (int64_t t = 1; t < tn; t++) order[fill[B->tpar[t]]++] = (int32_t)t;
    free(fill);
    for (int64_t t = 0; t < tn; t++) { /* insertion sort by symbol (kid symbols of a parent are distinct) */
        int32_t *kids = order + pcount[t];
        int64_t nk = pcount[t + 1] - pcount[t];
        if (nk > 32) {
            sort_syms = tsym;
            qsort(kids, (size_t)nk, sizeof(int32_t), cmp_by_sym);
            continue;
        }
        for (int64_t a = 1; a < nk; a++) {
            int32_t x = kids[a], sx = tsym[x];
            int64_t b = a;
            for (; b > 0 && tsym[kids[b - 1]] > sx; b--) kids[b] = kids[b - 1];
            kids[b] = x;
        }
    }
    int64_t sp = 0, q = 0;
    B->tstack[sp++] = 0;
    while (sp) {
        int32_t t = B->tstack[--sp];
        B->tnode[t] = (int32_t)q;
        B->old_of[q++] = t;
        for (int64_t a = pcount[t + 1] - 1; a >= pcount[t]; a--) B->tstack[sp++] = order[a];
    }
    for (int64_t q2 = 0; q2 < tn; q2++) { /* edges grouped by parent, children in symbol order */
        int32_t t = B->old_of[q2];
        for (int32_t a = pcount[t]; a < pcount[t + 1]; a++) {
            int32_t kid = order[a];
            int32_t *edge = B->edges_sorted + 3 * B->ne++;
            edge[0] = (int32_t)q2;
            edge[1] = tsym[kid];
            edge[2] = B->tnode[kid];
        }
    }
    return 0;
}

/* The classes at each trie node: the union over its sigma_in's rows, ascending. One row (most sigma_in):
 * its class list as it is; several: their lists' bits set in a K-bit accumulator, read back over the
 * words they touched and cleared (no dense row matrix: c_like's 8k rows x 4k classes were 4 MB). */
static int64_t node_classes(Build *B) {
    const int32_t *sig_ptr = B->sig_ptr, *sig_row = B->sig_row, *row_ptr = B->row_ptr, *row_cls = B->row_cls;
    int64_t kw = (B->K + 63) / 64, outcap = 0, code = 0;
    uint64_t *acc = calloc((size_t)(kw ? kw : 1), sizeof(uint64_t));
    B->indptr = malloc((size_t)(B->tn + 1) * sizeof(int64_t));
    if (!acc || !B->indptr) {
        free(acc);
        return E_NOMEM;
    }
    B->indptr[0] = 0;
    for (int64_t t = 0; t < B->tn && !code; t++) {
        int32_t i = B->old_of[t];
        if (sig_ptr[i + 1] > sig_ptr[i]) {
            int64_t most = 0;
            for (int32_t a = sig_ptr[i]; a < sig_ptr[i + 1]; a++) most += row_ptr[sig_row[a] + 1] - row_ptr[sig_row[a]];
            if (grow((void **)&B->out_cls, &outcap, B->nout + most, sizeof(int32_t)) < 0) {
                code = E_NOMEM;
                break;
            }
            if (sig_ptr[i + 1] - sig_ptr[i] == 1) {
                int32_t r = sig_row[sig_ptr[i]];
                memcpy(B->out_cls + B->nout, row_cls + row_ptr[r], (size_t)most * sizeof(int32_t));
                B->nout += most;
            } else {
                int64_t wlo = kw, whi = -1;
                for (int32_t a = sig_ptr[i]; a < sig_ptr[i + 1]; a++) {
                    int32_t r = sig_row[a];
                    if (row_ptr[r + 1] == row_ptr[r]) continue;
                    int64_t w0 = row_cls[row_ptr[r]] >> 6, w1 = row_cls[row_ptr[r + 1] - 1] >> 6;
                    if (w0 < wlo) wlo = w0;
                    if (w1 > whi) whi = w1;
                    for (int32_t b = row_ptr[r]; b < row_ptr[r + 1]; b++)
                        acc[row_cls[b] >> 6] |= (uint64_t)1 << (row_cls[b] & 63);
                }
                for (int64_t w = wlo; w <= whi; w++) {
                    for (uint64_t bits = acc[w]; bits; bits &= bits - 1)
                        B->out_cls[B->nout++] = (int32_t)(w * 64 + __builtin_ctzll(bits));
                    acc[w] = 0;
                }
            }
        }
        B->indptr[t + 1] = B->nout;
    }
    free(acc);
    return code;
}

/* IN(f, lo, hi) edges apart, as SigmaInIndex keeps them: rows (parent, f, lo, hi, child). */
static int64_t family_edges(Build *B) {
    if (!B->nins) return 0;
    B->fam_edges = malloc((size_t)(B->ne ? B->ne : 1) * 5 * sizeof(int64_t));
    if (!B->fam_edges) return E_NOMEM;
    int64_t keep = 0;
    for (int64_t e = 0; e < B->ne; e++) {
        int32_t *x = B->edges_sorted + 3 * e;
        if (x[1] < B->S->nt) {
            memmove(B->edges_sorted + 3 * keep++, x, 3 * sizeof(int32_t));
            continue;
        }
        int64_t f, j, lo, hi;
        split_wide(B->S, B->ins[x[1] - B->S->nt], &f, &j, &lo, &hi);
        int64_t *row = B->fam_edges + 5 * B->nfe++;
        row[0] = x[0];
        row[1] = f;
        row[2] = lo;
        row[3] = hi;
        row[4] = x[2];
    }
    B->ne = keep;
    return 0;
}

static PyObject *build_result(Build *B) {
    PyObject *stats = Py_BuildValue("{sLsLsLsL}", "distinct_sigma_in", (long long)B->ns, "longest_sigma_in",
                                    (long long)B->maxlen, "trie_nodes", (long long)B->tn, "sep_rest_nodes",
                                    (long long)B->nrows);
    if (!stats) return NULL;
    return Py_BuildValue("(sNNNNNN)", "ok", bytes_of(B->edges_sorted, 3 * B->ne, sizeof(int32_t)),
                         bytes_of(B->indptr, B->tn + 1, sizeof(int64_t)), bytes_of(B->out_cls, B->nout, sizeof(int32_t)),
                         bytes_of(B->unindexed, B->nun, sizeof(int32_t)), stats,
                         bytes_of(B->fam_edges, 5 * B->nfe, sizeof(int64_t)));
}

PyObject *words_sigma_index(Words *S, PyObject *args) {
    Py_buffer nodes_b;
    long long max_per_node, max_words;
    if (!PyArg_ParseTuple(args, "y*LL", &nodes_b, &max_per_node, &max_words)) return NULL;
    PyObject *result = NULL;
    Build B;
    memset(&B, 0, sizeof(B));
    B.S = B.X.S = S;
    B.K = nodes_b.len / 8;
    B.cnode = nodes_b.buf;
    unsigned __int128 to_list = 0;
    int64_t code = 0;
    if (need_grammar(S) < 0) goto done;
    if (nodes_b.len % 8) {
        PyErr_SetString(PyExc_ValueError, "sigma_index: class_nodes must be int64");
        goto done;
    }
    if ((code = class_rest_sets(&B)) < 0 || (code = rests_to_list(&B, max_per_node, &to_list)) < 0) goto fail;
    if (to_list > (unsigned __int128)max_words) {
        PyObject *n = int128_to_py(to_list);
        if (n) result = Py_BuildValue("(sN)", "words", n);
        goto done;
    }
    if ((code = family_symbols(&B)) < 0 || (code = sigma_trie(&B)) < 0 || (code = rest_classes(&B)) < 0 ||
        (code = sigma_rows(&B)) < 0 || (code = number_trie(&B)) < 0 || (code = node_classes(&B)) < 0 ||
        (code = family_edges(&B)) < 0)
        goto fail;
    result = build_result(&B);
    goto done;
fail:
    if (code == E_DEPTH) {
        PyErr_SetString(Unsupported, "sigma_index: the displacements nest deeper than the compiled store allows");
    } else if (code == E_NOMEM) {
        PyErr_NoMemory();
    } else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
done:
    build_free(&B);
    PyBuffer_Release(&nodes_b);
    return result;
}
