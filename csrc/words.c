/* The word store (cfgzip_lab.grammar.words.WordStore, the reference): memo tables, interning, and the
 * set algebra over nodes (union, concatenation, the union of many concatenations at once). What the
 * compiled store is, and why its node ids are the Python store's, is said in words.h. */
#include "words.h"
#include "run_merge_sort.h"

int grow(void **buf, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *p = realloc(*buf, (size_t)c * elem);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
}

void memo_free(Memo *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}
int memo_resize(Memo *m, uint64_t cap) {
    uint64_t *keys = malloc(cap * sizeof(uint64_t));
    int32_t *vals = malloc(cap * sizeof(int32_t));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -1;
    }
    memset(keys, 0xFF, cap * sizeof(uint64_t));
    uint64_t mask = cap - 1;
    if (m->keys) {
        for (uint64_t j = 0; j <= m->mask; j++) {
            uint64_t k = m->keys[j];
            if (k == MEMO_FREE) continue;
            uint64_t i = mix64(k) & mask;
            while (keys[i] != MEMO_FREE) i = (i + 1) & mask;
            keys[i] = k;
            vals[i] = m->vals[j];
        }
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->mask = mask;
    return 0;
}




/* Room for one more node (need: nodes) and `edges` more edges. */
int reserve(Words *S, int64_t need, int64_t edges) {
    if (need + 1 > S->ncap) {
        int64_t cap = S->ncap ? 2 * S->ncap : 1024;
        while (cap < need + 1) cap *= 2;
        int64_t *estart = realloc(S->estart, (size_t)(cap + 1) * sizeof(int64_t));
        if (!estart) return -1;
        S->estart = estart;
        uint8_t *acc = realloc(S->acc, (size_t)cap);
        if (!acc) return -1;
        S->acc = acc;
        uint64_t *nhash = realloc(S->nhash, (size_t)cap * sizeof(uint64_t));
        if (!nhash) return -1;
        S->nhash = nhash;
        S->ncap = cap;
    }
    if (S->ne + edges > S->ecap) {
        int64_t cap = S->ecap ? 2 * S->ecap : 4096;
        while (cap < S->ne + edges) cap *= 2;
        int64_t *esym = realloc(S->esym, (size_t)cap * sizeof(int64_t));
        if (!esym) return -1;
        S->esym = esym;
        int32_t *ekid = realloc(S->ekid, (size_t)cap * sizeof(int32_t));
        if (!ekid) return -1;
        S->ekid = ekid;
        S->ecap = cap;
    }
    return 0;
}

static uint64_t hash_node(int accepts, const int64_t *syms, const int32_t *kids, int64_t cnt) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)accepts;
    for (int64_t i = 0; i < cnt; i++) {
        h = (h ^ (uint64_t)syms[i]) * 0x100000001B3ULL;
        h = (h ^ (uint64_t)(uint32_t)kids[i]) * 0xC2B2AE3D27D4EB4FULL;
    }
    return mix64(h ^ (uint64_t)cnt);
}

int itab_resize(Words *S, uint64_t cap) {
    int32_t *tab = malloc(cap * sizeof(int32_t));
    if (!tab) return -1;
    memset(tab, 0xFF, cap * sizeof(int32_t));
    uint64_t mask = cap - 1;
    for (int64_t id = 0; id < S->n; id++) {
        uint64_t i = S->nhash[id] & mask;
        while (tab[i] >= 0) i = (i + 1) & mask;
        tab[i] = (int32_t)id;
    }
    free(S->itab);
    S->itab = tab;
    S->imask = mask;
    return 0;
}

/* Intern the node (accepts, scratch[base:stop]) and pop the scratch back to base. */
int64_t make_scratch(Words *S, int accepts, int64_t base) {
    int64_t cnt = S->stop - base;
    const int64_t *syms = S->ssym + base;
    const int32_t *kids = S->skid + base;
    uint64_t h = hash_node(accepts, syms, kids, cnt);
    uint64_t i = h & S->imask;
    for (;;) {
        int32_t id = S->itab[i];
        if (id < 0) break;
        if (S->nhash[id] == h && S->acc[id] == accepts && n_edges(S, id) == cnt &&
            memcmp(S->esym + S->estart[id], syms, (size_t)cnt * sizeof(int64_t)) == 0 &&
            memcmp(S->ekid + S->estart[id], kids, (size_t)cnt * sizeof(int32_t)) == 0) {
            S->stop = base;
            return id;
        }
        i = (i + 1) & S->imask;
    }
    if (S->n >= INT32_MAX - 1) {
        S->stop = base;
        return E_NOMEM;
    }
    if (reserve(S, S->n + 1, cnt) < 0) {
        S->stop = base;
        return E_NOMEM;
    }
    memcpy(S->esym + S->ne, syms, (size_t)cnt * sizeof(int64_t));
    memcpy(S->ekid + S->ne, kids, (size_t)cnt * sizeof(int32_t));
    int64_t id = S->n++;
    S->ne += cnt;
    S->estart[id + 1] = S->ne;
    S->acc[id] = (uint8_t)accepts;
    S->nhash[id] = h;
    S->itab[i] = (int32_t)id;
    S->stop = base;
    if ((uint64_t)S->n * 2 > S->imask + 1 && itab_resize(S, (S->imask + 1) * 2) < 0) return E_NOMEM;
    S->created++;
    if (S->created > S->limit) return E_BUDGET;
    return id;
}


int64_t w_union(Words *S, int64_t a, int64_t b, int depth) {
    if (a == b || b == W_EMPTY) return a;
    if (a == W_EMPTY) return b;
    if (a > b) {
        int64_t t = a;
        a = b;
        b = t;
    }
    uint64_t key = pair_key(a, b);
    int32_t got = memo_get(&S->um, key);
    if (got >= 0) return got;
    if (depth > MAX_DEPTH) return E_DEPTH;
    int64_t base = S->stop;
    int64_t i = S->estart[a], iend = S->estart[a + 1], j = S->estart[b], jend = S->estart[b + 1];
    while (i < iend && j < jend) {
        int64_t sa = S->esym[i], sb = S->esym[j];
        int64_t sym, kid;
        if (sa == sb) {
            kid = w_union(S, S->ekid[i], S->ekid[j], depth + 1);
            if (kid < 0) {
                S->stop = base;
                return kid;
            }
            sym = sa;
            i++;
            j++;
        } else if (sa < sb) {
            sym = sa;
            kid = S->ekid[i++];
        } else {
            sym = sb;
            kid = S->ekid[j++];
        }
        if (push_edge(S, sym, kid) < 0) {
            S->stop = base;
            return E_NOMEM;
        }
    }
    for (; i < iend; i++)
        if (push_edge(S, S->esym[i], S->ekid[i]) < 0) goto nomem;
    for (; j < jend; j++)
        if (push_edge(S, S->esym[j], S->ekid[j]) < 0) goto nomem;
    int64_t r = make_scratch(S, S->acc[a] | S->acc[b], base);
    if (r < 0) return r;
    if (memo_put(&S->um, key, (int32_t)r) < 0) return E_NOMEM;
    return r;
nomem:
    S->stop = base;
    return E_NOMEM;
}

int64_t w_concat(Words *S, int64_t a, int64_t b, int depth) {
    if (a == W_EMPTY || b == W_EMPTY) return W_EMPTY;
    if (a == W_EPSILON) return b;
    if (b == W_EPSILON) return a;
    uint64_t key = pair_key(a, b);
    int32_t got = memo_get(&S->cm, key);
    if (got >= 0) return got;
    if (depth > MAX_DEPTH) return E_DEPTH;
    int64_t base = S->stop;
    for (int64_t i = S->estart[a]; i < S->estart[a + 1]; i++) {
        int64_t kid = w_concat(S, S->ekid[i], b, depth + 1);
        if (kid < 0) {
            S->stop = base;
            return kid;
        }
        if (push_edge(S, S->esym[i], kid) < 0) {
            S->stop = base;
            return E_NOMEM;
        }
    }
    int64_t r = make_scratch(S, 0, base);
    if (r < 0) return r;
    if (S->acc[a]) {
        r = w_union(S, r, b, depth + 1);
        if (r < 0) return r;
    }
    if (memo_put(&S->cm, key, (int32_t)r) < 0) return E_NOMEM;
    return r;
}

/* ---- the union of many concatenations at once (WordStore.union_concats, the reference) ----
 * Folding a step's terms pairwise made a node per partial result, with the kid unions under it (60% of
 * sql_select's classing nodes, 93k of 158k, most in no final set), and each term a . b was made whole
 * before the union merged it away. w_union_n makes only the result's nodes: the terms' edges merged by
 * symbol without making the terms (a's edge (s, c) stands for (s, c . b); where a holds the empty word,
 * b's edges join as (s, c . eps)); a symbol one term has gets that term made (w_concat), one that several
 * have the union of theirs, recursively. Same order as the reference: the terms as a sorted set (a, b)
 * without EMPTY parts, eps . b read as b . eps; one term is w_concat, two plain nodes w_union (their memos
 * and order); otherwise memoised on the sorted list, the kids made in symbol order, then the node. */
/* TERM, TERM_A, TERM_B: words.h */


static int cmp_u64_asc(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

#define U64_LESS(x, y) (*(x) < *(y))
RUN_MERGE_SORT(sort_u64_runs, uint64_t, U64_LESS)

static void sort_u64(uint64_t *a, int64_t n) {
    uint64_t local[256], *tmp = n <= 256 ? local : malloc((size_t)n * sizeof(uint64_t)); /* (most are short) */
    if (!tmp) {
        qsort(a, (size_t)n, sizeof(uint64_t), cmp_u64_asc);
        return;
    }
    sort_u64_runs(a, tmp, n);
    if (tmp != local) free(tmp);
}

/* the gathered edges g[0:n] in symbol order (stable), tmp: room for n more */
#define GEDGE_LESS(x, y) ((x)->sym < (y)->sym)
RUN_MERGE_SORT(sort_gathered, struct gedge, GEDGE_LESS)

static uint64_t hash_ops(const uint64_t *ops, int64_t k) {
    uint64_t h = 0x51AFD7ED558CCD11ULL ^ (uint64_t)k;
    for (int64_t i = 0; i < k; i++) h = (h ^ ops[i]) * 0x100000001B3ULL;
    return mix64(h);
}

static int32_t nmemo_get(const Words *S, const uint64_t *ops, int64_t k, uint64_t h) {
    if (!S->nm_tab) return -1;
    for (uint64_t i = h & S->nm_mask;; i = (i + 1) & S->nm_mask) {
        int32_t e = S->nm_tab[i];
        if (e < 0) return -1;
        if (S->nm_hash[e] == h && S->nm_len[e] == k &&
            memcmp(S->nm_ops + S->nm_off[e], ops, (size_t)k * sizeof(uint64_t)) == 0)
            return S->nm_val[e];
    }
}

static int nmemo_put(Words *S, const uint64_t *ops, int64_t k, uint64_t h, int64_t val) {
    if (S->nm_n >= INT32_MAX - 1) return 0; /* a memo only: past this, unions are made again (same ids) */
    if (S->nm_n + 1 > S->nm_cap) {
        int64_t cap = S->nm_cap, want = S->nm_n + 1;
        if (grow((void **)&S->nm_off, &cap, want, sizeof(int64_t)) < 0) return -1;
        int32_t *len = realloc(S->nm_len, (size_t)cap * sizeof(int32_t));
        if (!len) return -1;
        S->nm_len = len;
        int32_t *vals = realloc(S->nm_val, (size_t)cap * sizeof(int32_t));
        if (!vals) return -1;
        S->nm_val = vals;
        uint64_t *hashes = realloc(S->nm_hash, (size_t)cap * sizeof(uint64_t));
        if (!hashes) return -1;
        S->nm_hash = hashes;
        S->nm_cap = cap;
    }
    if (grow((void **)&S->nm_ops, &S->nm_opcap, S->nm_nops + k, sizeof(uint64_t)) < 0) return -1;
    if (!S->nm_tab || (uint64_t)(S->nm_n + 1) * 2 > S->nm_mask + 1) {
        uint64_t cap = S->nm_tab ? (S->nm_mask + 1) * 2 : 1024;
        int32_t *tab = malloc(cap * sizeof(int32_t));
        if (!tab) return -1;
        memset(tab, 0xFF, cap * sizeof(int32_t));
        for (int64_t e = 0; e < S->nm_n; e++) {
            uint64_t i = S->nm_hash[e] & (cap - 1);
            while (tab[i] >= 0) i = (i + 1) & (cap - 1);
            tab[i] = (int32_t)e;
        }
        free(S->nm_tab);
        S->nm_tab = tab;
        S->nm_mask = cap - 1;
    }
    int64_t e = S->nm_n++;
    memcpy(S->nm_ops + S->nm_nops, ops, (size_t)k * sizeof(uint64_t));
    S->nm_off[e] = S->nm_nops;
    S->nm_nops += k;
    S->nm_len[e] = (int32_t)k;
    S->nm_val[e] = (int32_t)val;
    S->nm_hash[e] = h;
    uint64_t i = h & S->nm_mask;
    while (S->nm_tab[i] >= 0) i = (i + 1) & S->nm_mask;
    S->nm_tab[i] = (int32_t)e;
    return 0;
}

/* The union of the terms ostk[obase:otop] (each a . b); pops them (otop = obase on every return). */
int64_t w_union_n(Words *S, int64_t obase, int depth) {
    if (S->poll && (++S->polls & (POLL_UNIONS - 1)) == 0) {
        int64_t stop = S->poll(S->poll_arg);
        if (stop < 0) {
            S->otop = obase;
            return stop;
        }
    }
    uint64_t *ops = S->ostk + obase;
    int64_t k = S->otop - obase, u = 0, r;
    for (int64_t i = 0; i < k; i++) {
        int64_t a = TERM_A(ops[i]), b = TERM_B(ops[i]);
        if (a == W_EMPTY || b == W_EMPTY) continue;
        ops[u++] = a == W_EPSILON ? TERM(b, W_EPSILON) : ops[i];
    }
    sort_u64(ops, u);
    k = 0;
    for (int64_t i = 0; i < u; i++)
        if (k == 0 || ops[k - 1] != ops[i]) ops[k++] = ops[i];
    S->otop = obase + k;
    if (k <= 1 || (k == 2 && TERM_B(ops[0]) == W_EPSILON && TERM_B(ops[1]) == W_EPSILON)) {
        S->otop = obase;
        if (k == 0) return W_EMPTY;
        if (k == 1) return w_concat(S, TERM_A(ops[0]), TERM_B(ops[0]), depth);
        return w_union(S, TERM_A(ops[0]), TERM_A(ops[1]), depth);
    }
    uint64_t h = hash_ops(ops, k);
    int32_t got = nmemo_get(S, ops, k, h);
    if (got >= 0) {
        S->otop = obase;
        return got;
    }
    if (depth > MAX_DEPTH) {
        S->otop = obase;
        return E_DEPTH;
    }
    /* gather every term's edges, then group them by symbol */
    int64_t total = 0, gbase = S->gtop, ebase = S->stop;
    int accepts = 0;
    for (int64_t i = 0; i < k; i++) {
        int64_t a = TERM_A(ops[i]), b = TERM_B(ops[i]);
        total += n_edges(S, a);
        if (S->acc[a] && b != W_EPSILON) total += n_edges(S, b);
    }
    if (grow((void **)&S->gat, &S->gcap, gbase + 2 * total, sizeof(struct gedge)) < 0) {
        S->otop = obase;
        return E_NOMEM;
    }
    struct gedge *g = S->gat + gbase;
    int64_t m = 0;
    for (int64_t i = 0; i < k; i++) {
        int64_t a = TERM_A(ops[i]), b = TERM_B(ops[i]);
        for (int64_t e = S->estart[a]; e < S->estart[a + 1]; e++) {
            g[m].sym = S->esym[e];
            g[m].term = TERM(S->ekid[e], b);
            m++;
        }
        if (!S->acc[a]) continue;
        if (b == W_EPSILON) {
            accepts = 1;
            continue;
        }
        accepts |= S->acc[b]; /* a holds the empty word: a . b holds b */
        for (int64_t e = S->estart[b]; e < S->estart[b + 1]; e++) {
            g[m].sym = S->esym[e];
            g[m].term = TERM(S->ekid[e], W_EPSILON);
            m++;
        }
    }
    sort_gathered(g, g + total, total);
    S->gtop = gbase + total;
    for (int64_t i = 0; i < total;) {
        g = S->gat + gbase; /* (the recursion may move the arrays) */
        int64_t sym = g[i].sym, j = i + 1, kid;
        while (j < total && g[j].sym == sym) j++;
        if (j - i == 1) {
            kid = w_concat(S, TERM_A(g[i].term), TERM_B(g[i].term), depth + 1);
        } else {
            int64_t kbase = S->otop;
            kid = 0;
            if (grow((void **)&S->ostk, &S->ocap, kbase + (j - i), sizeof(uint64_t)) < 0) kid = E_NOMEM;
            else {
                for (int64_t t = i; t < j; t++) S->ostk[S->otop++] = S->gat[gbase + t].term;
                kid = w_union_n(S, kbase, depth + 1);
            }
        }
        if (kid >= 0 && push_edge(S, sym, kid) < 0) kid = E_NOMEM;
        if (kid < 0) {
            S->otop = obase;
            S->gtop = gbase;
            S->stop = ebase;
            return kid;
        }
        i = j;
    }
    S->gtop = gbase;
    r = make_scratch(S, accepts, ebase);
    if (r >= 0 && nmemo_put(S, S->ostk + obase, k, h, r) < 0) r = E_NOMEM;
    S->otop = obase;
    return r;
}

