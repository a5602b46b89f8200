/* The sigma_in index (cfgzip_lab.native.index.build_index, the reference)
 *
 * Per class: the set of SEP-rest nodes reachable from its displacement node over output symbols (each
 * rest node's words are reverse(sigma_in)), memoised per node over the whole vocabulary; each listed
 * rest's words once; the distinct sigma_in sorted, inserted into a trie in that order (so numbering is
 * a function of the grammar and classes, not of store ids); per trie node the classes whose rests hold
 * its sigma_in. Output: the arrays SigmaInIndex.to_arrays gives. */
#include "words.h"

typedef struct {
    Words *S;
    Memo rmemo;          /* node -> set id of its rests */
    int64_t *set_off;    /* set id -> offset in pool */
    int32_t *set_len;
    int64_t nsets, setcap, setcap2;
    int32_t *pool;       /* rests (their compact ids), per set */
    int64_t npool, poolcap;
    Memo rid;            /* rest node -> compact id (in order of first sight), so that the arrays over */
    int32_t *rest_node;  /* rests are as long as there are rests, not store nodes (c_like: 8k of 289k) */
    int64_t nrest, restcap;
    int64_t *stamps;     /* compact id -> the last set that took it (dedup without sorting) */
    int64_t stamp_now, nstamps;
    int64_t *sstamps;    /* set id -> the last set that took all of it (a part met twice is read once) */
    int64_t sstampcap;
    int32_t *subs;       /* the parts' set ids of the nodes being made, a stack (read again, not looked up) */
    int64_t nsubs, subcap;
    Memo cmemo;          /* node -> index in counts */
    unsigned __int128 *counts;
    int64_t ncounts, countcap;
} Idx;


/* The compact id of a rest node (given one on first sight); < 0: no memory. */
static int64_t rest_id(Idx *X, int64_t node) {
    int32_t got = memo_get(&X->rid, (uint64_t)node);
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
    if (memo_put(&X->rid, (uint64_t)node, (int32_t)X->nrest) < 0) return E_NOMEM;
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
    int32_t got = memo_get(&X->rmemo, (uint64_t)node);
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
    if (memo_put(&X->rmemo, (uint64_t)node, (int32_t)id) < 0) return E_NOMEM;
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
    int32_t got = memo_get(&X->cmemo, (uint64_t)node);
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
    if (memo_put(&X->cmemo, (uint64_t)node, (int32_t)X->ncounts) < 0) return E_NOMEM;
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
 *     child), SigmaInIndex's native_family_edges) */
PyObject *words_sigma_index(Words *S, PyObject *args) {
    Py_buffer nodes_b;
    long long max_per_node, max_words;
    if (!PyArg_ParseTuple(args, "y*LL", &nodes_b, &max_per_node, &max_words)) return NULL;
    PyObject *result = NULL;
    Idx X;
    Memo ext, tix; /* (trie node, symbol) -> trie node; a node below the listed rests -> its index */
    memset(&X, 0, sizeof(X));
    memset(&ext, 0, sizeof(ext));
    memset(&tix, 0, sizeof(tix));
    X.S = S;
    int64_t K = nodes_b.len / 8, code = 0;
    const int64_t *cnode = nodes_b.buf;
    int64_t *cset = NULL, *wstack = NULL, *indptr = NULL, *toff = NULL;
    int32_t *row_of = NULL, *rest_of_row = NULL, *tlen = NULL, *tpool = NULL, *tpar = NULL, *tsym = NULL, *tdep = NULL;
    int32_t *row_ptr = NULL, *row_cls = NULL, *sig_ptr = NULL, *sig_row = NULL, *order = NULL, *old_of = NULL;
    int32_t *tnode = NULL, *edges_sorted = NULL, *pcount = NULL, *out_cls = NULL, *unindexed = NULL;
    int32_t *tstack = NULL;
    uint8_t *big = NULL;
    int64_t *ins = NULL, nins = 0, *fam_edges = NULL, nfe = 0;
    int64_t nun = 0, nrows = 0;
    if (need_grammar(S) < 0) goto done;
    if (nodes_b.len % 8) {
        PyErr_SetString(PyExc_ValueError, "sigma_index: class_nodes must be int64");
        goto done;
    }
    cset = malloc((size_t)(K ? K : 1) * sizeof(int64_t));
    if (!cset) goto nomem;
    for (int64_t k = 0; k < K; k++) {
        cset[k] = -1;
        if (cnode[k] < 1) continue;
        if (cnode[k] >= S->n) {
            PyErr_SetString(PyExc_ValueError, "sigma_index: a class node is not in the store");
            goto done;
        }
        code = rev_inputs(&X, cnode[k], 0);
        if (code < 0) goto fail;
        cset[k] = code;
    }
    /* distinct rests, in order of first appearance; their word counts; what is to list (row_of, big: by
     * compact rest id) */
    row_of = malloc((size_t)(X.nrest ? X.nrest : 1) * sizeof(int32_t));
    big = calloc((size_t)(X.nrest ? X.nrest : 1), 1);
    if (!row_of || !big) goto nomem;
    memset(row_of, 0xFF, (size_t)X.nrest * sizeof(int32_t));
    int64_t rowcap = 0;
    unsigned __int128 to_list = 0;
    for (int64_t k = 0; k < K; k++) {
        if (cset[k] < 0) continue;
        for (int64_t j = 0; j < X.set_len[cset[k]]; j++) {
            int32_t r = X.pool[X.set_off[cset[k]] + j];
            if (row_of[r] != -1 || big[r]) continue;
            unsigned __int128 c;
            code = count_words(&X, X.rest_node[r], &c, 0);
            if (code < 0) goto fail;
            if (c > (unsigned __int128)max_per_node) {
                big[r] = 1;
                continue;
            }
            to_list += c;
            if (to_list > COUNT_CAP) to_list = COUNT_CAP;
            if (grow((void **)&rest_of_row, &rowcap, nrows + 1, sizeof(int32_t)) < 0) goto nomem;
            row_of[r] = (int32_t)nrows;
            rest_of_row[nrows++] = X.rest_node[r];
        }
    }
    if (to_list > (unsigned __int128)max_words) {
        PyObject *n = int128_to_py(to_list);
        if (n) result = Py_BuildValue("(sN)", "words", n);
        goto done;
    }
    /* counted families: the IN(f, lo, hi) symbols the rests hold, sorted and each once; in a sigma_in
     * IN is the symbol nt + its rank, so that sigma_in sort as the Python build sorts them (every plain
     * A before every IN, the INs in Python's order: packed IN symbols compare as the Python ints) */
    if (S->nfam) {
        uint8_t *seen = calloc((size_t)S->n, 1);
        int64_t *st = NULL, stn = 0, stcap = 0, inscap = 0;
        if (!seen) goto nomem;
        for (int64_t row = 0; row < nrows; row++) {
            if (grow((void **)&st, &stcap, stn + 1, sizeof(int64_t)) < 0) goto ins_nomem;
            st[stn++] = rest_of_row[row];
            while (stn) {
                int64_t node = st[--stn];
                if (seen[node]) continue;
                seen[node] = 1;
                if (grow((void **)&st, &stcap, stn + n_edges(S, node), sizeof(int64_t)) < 0 ||
                    grow((void **)&ins, &inscap, nins + n_edges(S, node), sizeof(int64_t)) < 0)
                    goto ins_nomem;
                for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
                    if (S->esym[i] >= WIDE_IN && S->esym[i] < WIDE_REL) ins[nins++] = S->esym[i];
                    if (!seen[S->ekid[i]]) st[stn++] = S->ekid[i];
                }
            }
        }
        free(seen);
        free(st);
        qsort(ins, (size_t)nins, sizeof(int64_t), cmp_i64);
        int64_t u = 0;
        for (int64_t i = 0; i < nins; i++)
            if (!u || ins[u - 1] != ins[i]) ins[u++] = ins[i];
        nins = u;
        if (0) {
        ins_nomem:
            free(seen);
            free(st);
            goto nomem;
        }
    }
    /* the trie of every listed rest's sigma_in, built bottom-up over the rests' DAGs: a word s1..sd of a
     * rest is sigma_in sd..s1, so the sigma_in of a node are those of each child k (over an edge s)
     * followed by s (the trie child of each of k's trie nodes on s), with the root where the node
     * accepts. Each node's trie nodes are made once, in a post-order over the nodes below the listed
     * rests (shared tails are not listed again), sets over distinct edges are disjoint (a word is listed
     * once). Numbered afterwards in preorder with children in symbol order, which is the order inserting
     * the sorted sigma_in one by one numbers them in (the Python build). Symbols n + 1 + A -> A (IN:
     * nt + rank). */
    int64_t tn = 1, tcap = 0, ntp = 0, tpcap = 0, maxlen = 0, ns = 0, wcap = 0;
    /* toff, tlen: by a node's index in tix (the nodes below the listed rests, not the whole store) */
    int64_t ntix = 0, toffcap = 0, tlencap = 0;
    if (grow((void **)&tpar, &tcap, 1024, sizeof(int32_t)) < 0) goto nomem;
    {
        int64_t c2 = 0, c3 = 0;
        if (grow((void **)&tsym, &c2, tcap, sizeof(int32_t)) < 0 || grow((void **)&tdep, &c3, tcap, sizeof(int32_t)) < 0)
            goto nomem;
    }
    tpar[0] = -1;
    tsym[0] = -1;
    tdep[0] = 0;
    for (int64_t row = 0; row < nrows; row++) {
        int64_t sp = 0; /* entries (node, next edge) */
        if (memo_get(&tix, (uint64_t)rest_of_row[row]) >= 0) continue;
        if (grow((void **)&wstack, &wcap, 2, sizeof(int64_t)) < 0) goto nomem;
        wstack[sp++] = rest_of_row[row];
        wstack[sp++] = S->estart[rest_of_row[row]];
        while (sp) {
            int64_t node = wstack[sp - 2], e = wstack[sp - 1];
            if (e < S->estart[node + 1]) {
                wstack[sp - 1] = e + 1;
                int64_t kid = S->ekid[e];
                if (memo_get(&tix, (uint64_t)kid) < 0) {
                    if (grow((void **)&wstack, &wcap, sp + 2, sizeof(int64_t)) < 0) goto nomem;
                    wstack[sp++] = kid;
                    wstack[sp++] = S->estart[kid];
                }
                continue;
            }
            sp -= 2;
            int64_t off = ntp;
            if (S->acc[node]) {
                if (grow((void **)&tpool, &tpcap, ntp + 1, sizeof(int32_t)) < 0) goto nomem;
                tpool[ntp++] = 0;
            }
            for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
                int64_t sym = S->esym[i], kid = S->ekid[i];
                uint32_t m = (uint32_t)(sym >= WIDE_IN ? S->nt + rank_i64(ins, nins, sym) : sym - S->nt - 1);
                int32_t kix = memo_get(&tix, (uint64_t)kid);
                if (ntp + tlen[kix] - off > INT32_MAX || grow((void **)&tpool, &tpcap, ntp + tlen[kix], sizeof(int32_t)) < 0)
                    goto nomem;
                const int32_t *from = tpool + toff[kix];
                for (int32_t j = 0; j < tlen[kix]; j++) {
                    int32_t t = from[j];
                    uint64_t key = ((uint64_t)(uint32_t)t << 32) | m;
                    int32_t c = memo_get(&ext, key);
                    if (c < 0) {
                        if (tn >= INT32_MAX) goto nomem;
                        if (tn >= tcap) {
                            int64_t c1 = tcap, c2 = tcap, c3 = tcap;
                            if (grow((void **)&tpar, &c1, tn + 1, sizeof(int32_t)) < 0 ||
                                grow((void **)&tsym, &c2, tn + 1, sizeof(int32_t)) < 0 ||
                                grow((void **)&tdep, &c3, tn + 1, sizeof(int32_t)) < 0)
                                goto nomem;
                            tcap = c1;
                        }
                        c = (int32_t)tn++;
                        tpar[c] = t;
                        tsym[c] = (int32_t)m;
                        tdep[c] = tdep[t] + 1;
                        if (memo_put(&ext, key, c) < 0) goto nomem;
                    }
                    tpool[ntp++] = c;
                }
            }
            if (ntix >= INT32_MAX || grow((void **)&toff, &toffcap, ntix + 1, sizeof(int64_t)) < 0 ||
                grow((void **)&tlen, &tlencap, ntix + 1, sizeof(int32_t)) < 0 || memo_put(&tix, (uint64_t)node, (int32_t)ntix) < 0)
                goto nomem;
            toff[ntix] = off;
            tlen[ntix++] = (int32_t)(ntp - off);
        }
    }
    memo_free(&ext);
    /* classes left to the walk: those with a rest too large to list */
    unindexed = malloc((size_t)(K ? K : 1) * sizeof(int32_t));
    row_ptr = calloc((size_t)nrows + 1, sizeof(int32_t));
    if (!unindexed || !row_ptr) goto nomem;
    int64_t pairs = 0;
    for (int64_t k = 0; k < K; k++) {
        if (cset[k] < 0) continue;
        int is_big = 0;
        for (int64_t j = 0; j < X.set_len[cset[k]] && !is_big; j++) is_big = big[X.pool[X.set_off[cset[k]] + j]];
        if (is_big) {
            unindexed[nun++] = (int32_t)k;
            cset[k] = -1;
            continue;
        }
        for (int64_t j = 0; j < X.set_len[cset[k]]; j++) row_ptr[row_of[X.pool[X.set_off[cset[k]] + j]] + 1]++;
        pairs += X.set_len[cset[k]];
    }
    for (int64_t r = 0; r < nrows; r++) row_ptr[r + 1] += row_ptr[r];
    row_cls = malloc((size_t)(pairs ? pairs : 1) * sizeof(int32_t));
    if (!row_cls) goto nomem;
    {
        int32_t *fill = malloc((size_t)(nrows ? nrows : 1) * sizeof(int32_t));
        if (!fill) goto nomem;
        memcpy(fill, row_ptr, (size_t)nrows * sizeof(int32_t));
        for (int64_t k = 0; k < K; k++) /* classes ascending in each row */
            if (cset[k] >= 0)
                for (int64_t j = 0; j < X.set_len[cset[k]]; j++)
                    row_cls[fill[row_of[X.pool[X.set_off[cset[k]] + j]]]++] = (int32_t)k;
        free(fill);
    }
    /* rows of each sigma_in (CSR by trie node; a sigma_in is a trie node some rest holds) */
    sig_ptr = calloc((size_t)tn + 1, sizeof(int32_t));
    if (!sig_ptr) goto nomem;
    int64_t ninc = 0;
    for (int64_t r = 0; r < nrows; r++) {
        int32_t rix = memo_get(&tix, (uint64_t)rest_of_row[r]);
        const int32_t *set = tpool + toff[rix];
        for (int32_t j = 0; j < tlen[rix]; j++) sig_ptr[set[j] + 1]++;
        ninc += tlen[rix];
    }
    for (int64_t t = 0; t < tn; t++) {
        if (sig_ptr[t + 1]) {
            ns++;
            if (tdep[t] > maxlen) maxlen = tdep[t];
        }
        sig_ptr[t + 1] += sig_ptr[t];
    }
    sig_row = malloc((size_t)(ninc ? ninc : 1) * sizeof(int32_t));
    if (!sig_row) goto nomem;
    {
        int32_t *fill = malloc((size_t)tn * sizeof(int32_t));
        if (!fill) goto nomem;
        memcpy(fill, sig_ptr, (size_t)tn * sizeof(int32_t));
        for (int64_t r = 0; r < nrows; r++) {
            int32_t rix = memo_get(&tix, (uint64_t)rest_of_row[r]);
            const int32_t *set = tpool + toff[rix];
            for (int32_t j = 0; j < tlen[rix]; j++) sig_row[fill[set[j]]++] = (int32_t)r;
        }
        free(fill);
    }
    /* the trie numbered in preorder, children in symbol order: kid lists by parent, sorted by symbol */
    pcount = calloc((size_t)tn + 1, sizeof(int32_t));
    order = malloc((size_t)tn * sizeof(int32_t));       /* kids grouped by parent */
    tnode = malloc((size_t)tn * sizeof(int32_t));       /* old id -> preorder id */
    old_of = malloc((size_t)tn * sizeof(int32_t));      /* preorder id -> old id */
    tstack = malloc((size_t)tn * sizeof(int32_t));
    edges_sorted = malloc((size_t)(tn > 1 ? tn - 1 : 1) * 3 * sizeof(int32_t));
    if (!pcount || !order || !tnode || !old_of || !tstack || !edges_sorted) goto nomem;
    for (int64_t t = 1; t < tn; t++) pcount[tpar[t] + 1]++;
    for (int64_t t = 0; t < tn; t++) pcount[t + 1] += pcount[t];
    {
        int32_t *fill = malloc((size_t)tn * sizeof(int32_t));
        if (!fill) goto nomem;
        memcpy(fill, pcount, (size_t)tn * sizeof(int32_t));
        for (int64_t t = 1; t < tn; t++) order[fill[tpar[t]]++] = (int32_t)t;
        free(fill);
    }
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
    {
        int64_t sp = 0, q = 0;
        tstack[sp++] = 0;
        while (sp) {
            int32_t t = tstack[--sp];
            tnode[t] = (int32_t)q;
            old_of[q++] = t;
            for (int64_t a = pcount[t + 1] - 1; a >= pcount[t]; a--) tstack[sp++] = order[a];
        }
    }
    /* edges grouped by parent, children in symbol order */
    int64_t ne = 0;
    for (int64_t q = 0; q < tn; q++) {
        int32_t t = old_of[q];
        for (int32_t a = pcount[t]; a < pcount[t + 1]; a++) {
            int32_t kid = order[a];
            edges_sorted[3 * ne] = (int32_t)q;
            edges_sorted[3 * ne + 1] = tsym[kid];
            edges_sorted[3 * ne + 2] = tnode[kid];
            ne++;
        }
    }
    /* the classes at each trie node: the union over its sigma_in's rows, ascending. One row (most sigma_in):
     * its class list as it is; several: their lists' bits set in a K-bit accumulator, read back over the
     * words they touched and cleared (no dense row matrix: c_like's 8k rows x 4k classes were 4 MB) */
    int64_t kw = (K + 63) / 64;
    uint64_t *acc = calloc((size_t)(kw ? kw : 1), sizeof(uint64_t));
    indptr = malloc((size_t)(tn + 1) * sizeof(int64_t));
    if (!acc || !indptr) {
        free(acc);
        goto nomem;
    }
    int64_t nout = 0, outcap = 0;
    indptr[0] = 0;
    for (int64_t t = 0; t < tn; t++) {
        int32_t i = old_of[t];
        if (sig_ptr[i + 1] > sig_ptr[i]) {
            int64_t most = 0;
            for (int32_t a = sig_ptr[i]; a < sig_ptr[i + 1]; a++) most += row_ptr[sig_row[a] + 1] - row_ptr[sig_row[a]];
            if (grow((void **)&out_cls, &outcap, nout + most, sizeof(int32_t)) < 0) {
                free(acc);
                goto nomem;
            }
            if (sig_ptr[i + 1] - sig_ptr[i] == 1) {
                int32_t r = sig_row[sig_ptr[i]];
                memcpy(out_cls + nout, row_cls + row_ptr[r], (size_t)most * sizeof(int32_t));
                nout += most;
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
                        out_cls[nout++] = (int32_t)(w * 64 + __builtin_ctzll(bits));
                    acc[w] = 0;
                }
            }
        }
        indptr[t + 1] = nout;
    }
    free(acc);
    /* IN(f, lo, hi) edges apart, as SigmaInIndex keeps them: rows (parent, f, lo, hi, child) */
    if (nins) {
        fam_edges = malloc((size_t)(ne ? ne : 1) * 5 * sizeof(int64_t));
        if (!fam_edges) goto nomem;
        int64_t keep = 0;
        for (int64_t e = 0; e < ne; e++) {
            int32_t *x = edges_sorted + 3 * e;
            if (x[1] < S->nt) {
                memmove(edges_sorted + 3 * keep++, x, 3 * sizeof(int32_t));
                continue;
            }
            int64_t f, j, lo, hi;
            split_wide(S, ins[x[1] - S->nt], &f, &j, &lo, &hi);
            int64_t *row = fam_edges + 5 * nfe++;
            row[0] = x[0];
            row[1] = f;
            row[2] = lo;
            row[3] = hi;
            row[4] = x[2];
        }
        ne = keep;
    }
    PyObject *stats = Py_BuildValue("{sLsLsLsL}", "distinct_sigma_in", (long long)ns, "longest_sigma_in",
                                    (long long)maxlen, "trie_nodes", (long long)tn, "sep_rest_nodes", (long long)nrows);
    if (stats)
        result = Py_BuildValue("(sNNNNNN)", "ok", bytes_of(edges_sorted, 3 * ne, sizeof(int32_t)),
                               bytes_of(indptr, tn + 1, sizeof(int64_t)), bytes_of(out_cls, nout, sizeof(int32_t)),
                               bytes_of(unindexed, nun, sizeof(int32_t)), stats, bytes_of(fam_edges, 5 * nfe, sizeof(int64_t)));
    goto done;
fail:
    if (code == E_DEPTH) {
        PyErr_SetString(Unsupported, "sigma_index: the displacements nest deeper than the compiled store allows");
    } else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(cset);
    free(wstack);
    free(indptr);
    free(row_of);
    free(rest_of_row);
    free(toff);
    free(tlen);
    free(tpool);
    free(tpar);
    free(tsym);
    free(tdep);
    free(old_of);
    memo_free(&ext);
    memo_free(&tix);
    free(row_ptr);
    free(row_cls);
    free(sig_ptr);
    free(sig_row);
    free(order);
    free(tnode);
    free(edges_sorted);
    free(pcount);
    free(out_cls);
    free(unindexed);
    free(tstack);
    free(big);
    free(ins);
    free(fam_edges);
    memo_free(&X.rmemo);
    memo_free(&X.cmemo);
    free(X.set_off);
    free(X.set_len);
    free(X.pool);
    free(X.stamps);
    free(X.sstamps);
    free(X.subs);
    free(X.rest_node);
    memo_free(&X.rid);
    free(X.counts);
    PyBuffer_Release(&nodes_b);
    return result;
}
