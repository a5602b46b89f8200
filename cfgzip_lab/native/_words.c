/* The compiled word store and what walks it: interning, union, concat and their memos
 * (cfgzip_lab.grammar.words), the displacement step (cfgzip_lab.classes.displacement), classing's walk
 * of the vocabulary as a trie over byte classes and the numbering of the classes
 * (cfgzip_lab.classes.classing), the sigma_in index build (cfgzip_lab.native.index) and the state step
 * and trie mask of the native engine (cfgzip_lab.native.walk). The Python modules named are the
 * reference; cfgzip_lab.native.compiled wraps this one, and the tests compare the two node for node.
 *
 * Same algorithm, same order: a Words store is seeded with a Python WordStore's nodes (ids 0..N-1
 * kept), and every operation creates its nodes in the order the Python code creates them (children
 * before parents, edges in symbol order, the same memo keys), so the ids it hands out are the ones
 * the Python store would hand out for the same calls, and budgets (WordStore.limit / created) trip
 * at the same node. Nodes are flat arrays: accepts[i], edges esym/ekid[estart[i]:estart[i+1]]
 * (symbols int64, children int32), interned by an open-addressing table over (accepts, edges);
 * union, concat and step memos are open-addressing tables keyed by node pairs.
 *
 * Errors inside the set algebra are negative return values (E_BUDGET: created passed limit, the
 * node that passed it stays interned, as in Python; E_NOMEM; E_DEPTH: recursion deeper than
 * MAX_DEPTH, which the Python wrapper turns into a fall-back to the Python path). Memo entries are
 * written only for finished results, so an error leaves the store consistent.
 */
#include "_kernel.h"

#include <stdlib.h>
#include <string.h>

#define W_EMPTY 0
#define W_EPSILON 1
#define E_BUDGET (-2)
#define E_NOMEM (-3)
#define E_DEPTH (-4)
#define E_LIMIT (-5)
#define E_CANCEL (-6)
#define E_PYTHON (-7)
#define E_SYMBOL (-8)
/* Set operations recurse along word length. Words here are stacks and token displacements (a few
 * hundred symbols at most on every grammar tried); past this depth the caller falls back to Python. */
#define MAX_DEPTH 20000
#define NO_LIMIT INT64_MAX

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static int grow(void **buf, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *p = realloc(*buf, (size_t)c * elem);
    if (!p) return -1;
    *buf = p;
    *cap = c;
    return 0;
}

/* ---- memo tables: uint64 key -> int32 value, open addressing, linear probing ---- */
#define MEMO_FREE UINT64_MAX
typedef struct {
    uint64_t *keys;
    int32_t *vals;
    uint64_t mask;
    int64_t used;
} Memo;

static void memo_free(Memo *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

static inline int32_t memo_get(const Memo *m, uint64_t key) {
    if (!m->keys) return -1;
    uint64_t i = mix64(key) & m->mask;
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == key) return m->vals[i];
        if (k == MEMO_FREE) return -1;
        i = (i + 1) & m->mask;
    }
}

static int memo_resize(Memo *m, uint64_t cap) {
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

static int memo_put(Memo *m, uint64_t key, int32_t val) {
    if (!m->keys || (uint64_t)(m->used + 1) * 2 > m->mask + 1) {
        if (memo_resize(m, m->keys ? (m->mask + 1) * 2 : 1024) < 0) return -1;
    }
    uint64_t i = mix64(key) & m->mask;
    while (m->keys[i] != MEMO_FREE && m->keys[i] != key) i = (i + 1) & m->mask;
    if (m->keys[i] == MEMO_FREE) m->used++;
    m->keys[i] = key;
    m->vals[i] = val;
    return 0;
}

static inline uint64_t pair_key(int64_t a, int64_t b) { return ((uint64_t)a << 32) | (uint64_t)b; }

/* ---- the store ---- */
struct gedge { /* an edge w_union_n gathers from its operands: its symbol, the (kid, rest) term under it */
    int64_t sym;
    uint64_t term;
};

typedef struct {
    PyObject_HEAD
    /* nodes */
    int64_t n, ncap;
    int64_t *estart; /* ncap + 1 */
    uint8_t *acc;
    uint64_t *nhash;
    /* edges */
    int64_t ne, ecap;
    int64_t *esym;
    int32_t *ekid;
    /* interning */
    int32_t *itab;
    uint64_t imask;
    /* scratch stack of edges under construction */
    int64_t stop, scap;
    int64_t *ssym;
    int32_t *skid;
    /* memos */
    Memo um, cm, sm;
    /* w_union_n: its operand stack (terms a . b packed as a << 32 | b: the sorted operands of each open
     * call, kid groups above them), the edges it gathers (a stack too), and its memo over sorted operand
     * lists (entries: the list at nm_ops[nm_off[e]:+nm_len[e]], its hash, the union; nm_tab: open
     * addressing over them) */
    int64_t otop, ocap;
    uint64_t *ostk;
    int64_t gtop, gcap;
    struct gedge *gat;
    uint64_t *nm_ops;
    int32_t *nm_len, *nm_val, *nm_tab;
    int64_t nm_nops, nm_opcap, nm_n, nm_cap;
    int64_t *nm_off;
    uint64_t *nm_hash, nm_mask;
    int64_t created, limit;
    PyObject *budget_exc;
    /* the grammar (displacement), once set */
    int has_grammar;
    int64_t nt, natoms, sep;
    int32_t *table;                  /* nt * natoms: tail or -1 */
    int32_t *tops_ptr;               /* natoms + 1 */
    int32_t *tops_a, *tops_t;        /* nonterminal, tail; by atom, nonterminals ascending */
    uint64_t *below;                 /* nt rows of below_words: bit b of row a: b may sit under a */
    uint64_t *tops_bits;             /* natoms rows of below_words: bit a: a has a production on the atom */
    int64_t below_words;
    int64_t *cand;                   /* step's backtrack candidates (a, tail, consumed) */
    /* count(): words per node, memoised (cstate 0: not yet, 1: cval holds it, 2: past 64 bits) */
    uint64_t *cval;
    uint8_t *cstate;
    int64_t ccount_cap;
    int64_t ccap;
    int64_t steps, step_hits;        /* statistics */
    /* counted-repetition families (cfgzip_lab.grammar.counted), once the grammar has some: family f's
     * item, effective min, max (-1: unbounded) and last count; the item's atoms in its row's dict order
     * (GNF.row makes a member's tails in that order); a member's row, made on first use (rowm: keyed by
     * member_key, a marker entry at atom natoms once the whole row is made); step's family candidates */
    int64_t nfam, nb;                /* families; nb = nt + nfam rows of `below` (row nt + f: every F_c of f) */
    int32_t *fam_item;
    int64_t *fam_min, *fam_max, *fam_last;
    int32_t *fam_rowptr, *fam_rowatoms; /* nfam + 1; the item atoms */
    Memo rowm;
    int64_t *fcand;
    int64_t fccap;
    int fbits, cbits;                /* widths of IN / REL symbol fields (0: none in this store yet) */
} Words;

static PyTypeObject WordsType;

static inline int64_t n_edges(const Words *S, int64_t node) { return S->estart[node + 1] - S->estart[node]; }

static int push_edge(Words *S, int64_t sym, int64_t kid) {
    if (S->stop >= S->scap) {
        int64_t cap = S->scap ? 2 * S->scap : 256;
        int64_t *syms = realloc(S->ssym, (size_t)cap * sizeof(int64_t));
        if (syms) S->ssym = syms;
        int32_t *kids = syms ? realloc(S->skid, (size_t)cap * sizeof(int32_t)) : NULL;
        if (!kids) return -1;
        S->skid = kids;
        S->scap = cap;
    }
    S->ssym[S->stop] = sym;
    S->skid[S->stop] = (int32_t)kid;
    S->stop++;
    return 0;
}

/* Room for one more node (need: nodes) and `edges` more edges. */
static int reserve(Words *S, int64_t need, int64_t edges) {
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

static int itab_resize(Words *S, uint64_t cap) {
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
static int64_t make_scratch(Words *S, int accepts, int64_t base) {
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

static int64_t make1(Words *S, int64_t sym, int64_t kid) {
    int64_t base = S->stop;
    if (push_edge(S, sym, kid) < 0) return E_NOMEM;
    return make_scratch(S, 0, base);
}

static int64_t w_union(Words *S, int64_t a, int64_t b, int depth) {
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

static int64_t w_concat(Words *S, int64_t a, int64_t b, int depth) {
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
#define TERM(a, b) (((uint64_t)(uint32_t)(a) << 32) | (uint32_t)(b))
#define TERM_A(t) ((int64_t)((t) >> 32))
#define TERM_B(t) ((int64_t)((t) & 0xFFFFFFFFu))

static int ostk_push(Words *S, int64_t a, int64_t b) {
    if (S->otop >= S->ocap && grow((void **)&S->ostk, &S->ocap, S->otop + 1, sizeof(uint64_t)) < 0) return -1;
    S->ostk[S->otop++] = TERM(a, b);
    return 0;
}

static int cmp_u64_asc(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

static void sort_u64(uint64_t *a, int64_t n) {
    if (n <= 24) {
        for (int64_t i = 1; i < n; i++) {
            uint64_t v = a[i];
            int64_t j = i;
            while (j > 0 && a[j - 1] > v) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
        return;
    }
    qsort(a, (size_t)n, sizeof(uint64_t), cmp_u64_asc);
}

/* the gathered edges g[0:n] in symbol order, tmp: room for n more */
static void sort_gathered(struct gedge *g, struct gedge *tmp, int64_t n) {
    int64_t run = n <= 32 ? n : 16; /* insertion sort of runs, then bottom-up merges */
    for (int64_t lo = 0; lo < n; lo += run) {
        int64_t hi = lo + run < n ? lo + run : n;
        for (int64_t i = lo + 1; i < hi; i++) {
            struct gedge v = g[i];
            int64_t j = i;
            while (j > lo && g[j - 1].sym > v.sym) {
                g[j] = g[j - 1];
                j--;
            }
            g[j] = v;
        }
    }
    struct gedge *src = g, *dst = tmp;
    for (int64_t width = run; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) dst[o++] = src[j].sym < src[i].sym ? src[j++] : src[i++];
            while (i < mid) dst[o++] = src[i++];
            while (j < hi) dst[o++] = src[j++];
        }
        struct gedge *t = src;
        src = dst;
        dst = t;
    }
    if (src != g) memcpy(g, src, (size_t)n * sizeof(struct gedge));
}

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
static int64_t w_union_n(Words *S, int64_t obase, int depth) {
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

/* ---- counted-repetition symbols (cfgzip_lab.grammar.counted, docs/counted_repetition.md) ----
 * A concrete member F_c is the Python value itself, FAMILY_BASE + (f << 32) + c (below 2^61). The
 * symbolic sigma_in member IN(f, lo, hi) and the relative sigma_out bottom REL(f, j, lo, hi) are Python
 * ints past 2^100 and 2^120; here they are packed into int64 with the fields in the same order, so that
 * comparing packed symbols orders them as Python orders its ints (edges stay sorted the same way, and
 * the nodes and ids stay the Python ones):
 *     IN  = 2^61 | f << 3W | lo << W | hi          REL = 2^62 | f << 3W | j << 2W | lo << W | hi
 * W (cbits) holds every count of the grammar's families (1..last), f fbits bits; fbits + 3W <= 61, else
 * the grammar is not for this store (native.compiled.supports says so first). The Python API converts
 * at its edges (edges, nodes, make, child). */
#define FAMILY_BASE (INT64_C(1) << 48)
#define WIDE_IN (INT64_C(1) << 61)
#define WIDE_REL (INT64_C(1) << 62)
#define WIDE_BITS 61

static inline int64_t member_sym(int64_t f, int64_t c) { return FAMILY_BASE + (f << 32) + c; }
static inline int64_t in_sym_of(const Words *S, int64_t f, int64_t lo, int64_t hi) {
    return WIDE_IN | (f << (3 * S->cbits)) | (lo << S->cbits) | hi;
}
static inline int64_t rel_sym_of(const Words *S, int64_t f, int64_t j, int64_t lo, int64_t hi) {
    return WIDE_REL | (f << (3 * S->cbits)) | (j << (2 * S->cbits)) | (lo << S->cbits) | hi;
}
/* the fields of a packed IN (j = 0) or REL symbol */
static inline void split_wide(const Words *S, int64_t sym, int64_t *f, int64_t *j, int64_t *lo, int64_t *hi) {
    int64_t v = sym & (WIDE_IN - 1), mask = (INT64_C(1) << S->cbits) - 1;
    *hi = v & mask;
    *lo = (v >> S->cbits) & mask;
    *j = (v >> (2 * S->cbits)) & mask;
    *f = v >> (3 * S->cbits);
}

/* The kinds of symbols on top of a configuration word: a GNF nonterminal (output), SEP, a concrete
 * family member F_c, a relative bottom REL(f, j, lo, hi), or something else (E_SYMBOL: never on top of
 * a displacement word; the Python reference raises there too). */
enum { SYM_OUTPUT, SYM_SEP, SYM_OTHER, SYM_MEMBER, SYM_REL };
static inline int sym_kind(const Words *S, int64_t sym) {
    if (sym >= 0 && sym < S->nt) return SYM_OUTPUT;
    if (sym == S->sep) return SYM_SEP;
    if (sym >= FAMILY_BASE && sym < WIDE_IN && ((sym - FAMILY_BASE) >> 32) < S->nfam) return SYM_MEMBER;
    if (sym >= WIDE_REL && S->nfam) return SYM_REL;
    return SYM_OTHER;
}

/* Family.continues / successor / stops */
static inline int fam_continues(const Words *S, int64_t f, int64_t c) {
    return S->fam_max[f] < 0 || c + 1 <= S->fam_max[f] - 1;
}
static inline int64_t fam_successor(const Words *S, int64_t f, int64_t c) {
    return S->fam_max[f] >= 0 ? c + 1 : (c + 1 < S->fam_last[f] ? c + 1 : S->fam_last[f]);
}
static inline int fam_stops(const Words *S, int64_t f, int64_t c) { return c + 1 >= S->fam_min[f]; }

/* rowm keys: (f, atom) above, c below; atom natoms marks a finished row */
static inline uint64_t member_key(const Words *S, int64_t f, int64_t atom, int64_t c) {
    return ((uint64_t)(f * (S->natoms + 1) + atom) << 32) | (uint64_t)c;
}
#define ROW_MEMO_MAX (INT64_C(1) << 22)

/* GNF.row(F_c): T_X(a) . W_c for every atom a of the item X, W_c = {F_succ(c)} if c continues, with
 * epsilon if it stops; made whole on first use, in the item row's dict order (the Python order). A
 * row past an error is made again next time (the nodes it made stay interned: same ids either way). */
static int64_t member_row(Words *S, int64_t f, int64_t c) {
    if (memo_get(&S->rowm, member_key(S, f, S->natoms, c)) >= 0) return 0;
    if (S->rowm.used > ROW_MEMO_MAX) memo_free(&S->rowm); /* derived data only: dropping it changes no id */
    int64_t rest = W_EMPTY, item = S->fam_item[f];
    if (fam_continues(S, f, c)) {
        rest = make1(S, member_sym(f, fam_successor(S, f, c)), W_EPSILON);
        if (rest < 0) return rest;
    }
    if (fam_stops(S, f, c)) {
        rest = w_union(S, rest, W_EPSILON, 0);
        if (rest < 0) return rest;
    }
    for (int32_t i = S->fam_rowptr[f]; i < S->fam_rowptr[f + 1]; i++) {
        int64_t atom = S->fam_rowatoms[i];
        int64_t t = w_concat(S, S->table[item * S->natoms + atom], rest, 0);
        if (t < 0) return t;
        if (memo_put(&S->rowm, member_key(S, f, atom, c), (int32_t)t) < 0) return E_NOMEM;
    }
    if (memo_put(&S->rowm, member_key(S, f, S->natoms, c), 0) < 0) return E_NOMEM;
    return 0;
}

/* Displacer._member_terms: the words after reading one item from F_(x+j), x in [lo, hi], given the item's
 * tail on the atom, pushed as terms (tail, rest') of the step's union: continue (x + j + 1 <= max - 1) leaves
 * tail . REL(f, j + 1, lo, top); stop (x + j + 1 >= min) leaves tail . SEP . IN(f, bottom, hi); an
 * unbounded family saturates at F_last. */
static int64_t member_terms(Words *S, int64_t f, int64_t j, int64_t lo, int64_t hi, int64_t tail, int64_t rest) {
    int64_t r;
    if (S->fam_max[f] >= 0) {
        int64_t top = S->fam_max[f] - 2 - j;
        if (hi < top) top = hi;
        if (lo <= top) {
            if ((r = make1(S, rel_sym_of(S, f, j + 1, lo, top), rest)) < 0) return r;
            if (ostk_push(S, tail, r) < 0) return E_NOMEM;
        }
    } else {
        int64_t split = S->fam_last[f] - j - 1; /* x >= split reach the saturated member */
        if (lo < split) {
            int64_t top = hi < split - 1 ? hi : split - 1;
            if ((r = make1(S, rel_sym_of(S, f, j + 1, lo, top), rest)) < 0) return r;
            if (ostk_push(S, tail, r) < 0) return E_NOMEM;
        }
        if (hi >= split) {
            int64_t start = lo > split ? lo : split;
            if ((r = make1(S, in_sym_of(S, f, start, hi), rest)) < 0) return r;
            if ((r = make1(S, S->sep, r)) < 0) return r;
            if ((r = make1(S, member_sym(f, S->fam_last[f]), r)) < 0) return r;
            if (ostk_push(S, tail, r) < 0) return E_NOMEM;
        }
    }
    int64_t bottom = S->fam_min[f] - 1 - j;
    if (bottom < lo) bottom = lo;
    if (bottom <= hi) {
        if ((r = make1(S, in_sym_of(S, f, bottom, hi), rest)) < 0) return r;
        if ((r = make1(S, S->sep, r)) < 0) return r;
        if (ostk_push(S, tail, r) < 0) return E_NOMEM;
    }
    return 0;
}

/* room for n more (a, tail, consumed) triples in cand (plain) or fcand (family) */
static int cand_room(int64_t **buf, int64_t *cap, int64_t n) { return grow((void **)buf, cap, 3 * n, sizeof(int64_t)); }

/* Displacer.step: the configuration set after reading one more byte of class `atom`: its terms tail . rest
 * pushed in edge and candidate order onto the operand stack (their own nodes made first), then united at
 * once (w_union_n). */
static int64_t w_step(Words *S, int64_t node, int64_t atom) {
    uint64_t key = (uint64_t)node * (uint64_t)S->natoms + (uint64_t)atom;
    S->steps++;
    int32_t got = memo_get(&S->sm, key);
    if (got >= 0) {
        S->step_hits++;
        return got;
    }
    int64_t nt = S->nt, sep = S->sep, result = W_EMPTY, obase = S->otop;
    int64_t nedges = n_edges(S, node);
    for (int64_t e = 0; e < nedges; e++) {
        int64_t sym = S->esym[S->estart[node] + e], rest = S->ekid[S->estart[node] + e];
        int kind = sym_kind(S, sym);
        if (kind == SYM_OTHER) {
            result = E_SYMBOL;
            goto fail;
        }
        if (kind == SYM_OUTPUT) {
            int64_t tail = S->table[sym * S->natoms + atom];
            if (tail < 0) continue;
            if (ostk_push(S, tail, rest) < 0) goto nomem;
            continue;
        }
        if (kind == SYM_MEMBER) { /* a concrete member F_c (pushed by this token): its computed row */
            int64_t f = (sym - FAMILY_BASE) >> 32, c = (sym - FAMILY_BASE) & 0xFFFFFFFF;
            if ((result = member_row(S, f, c)) < 0) goto fail;
            if (S->table[S->fam_item[f] * S->natoms + atom] < 0) continue;
            int64_t tail = memo_get(&S->rowm, member_key(S, f, atom, c));
            if (ostk_push(S, tail, rest) < 0) goto nomem;
            continue;
        }
        if (kind == SYM_REL) { /* F_(x+j) . SEP . IN(f, lo, hi) */
            int64_t f, j, lo, hi;
            split_wide(S, sym, &f, &j, &lo, &hi);
            int64_t tail = S->table[S->fam_item[f] * S->natoms + atom];
            if (tail < 0) continue;
            if ((result = member_terms(S, f, j, lo, hi, tail, rest)) < 0) goto fail;
            continue;
        }
        /* SEP: sigma_out is empty, backtrack into the context. Candidates as Displacer.step lists them:
         * plain nonterminals (cand) and families (fcand) of every consumed symbol, the plain ones first */
        int64_t nc = 0, nfc = 0;
        const int32_t *ta = S->tops_a + S->tops_ptr[atom], *tt = S->tops_t + S->tops_ptr[atom];
        int64_t ntops = S->tops_ptr[atom + 1] - S->tops_ptr[atom];
        if (S->acc[rest]) {
            if (cand_room(&S->cand, &S->ccap, nc + ntops) < 0) goto nomem;
            for (int64_t k = 0; k < ntops; k++) {
                S->cand[3 * nc] = ta[k];
                S->cand[3 * nc + 1] = tt[k];
                S->cand[3 * nc + 2] = W_EPSILON;
                nc++;
            }
            if (S->nfam && cand_room(&S->fcand, &S->fccap, nfc + S->nfam) < 0) goto nomem;
            for (int64_t f = 0; f < S->nfam; f++) {
                int64_t t = S->table[S->fam_item[f] * S->natoms + atom];
                if (t < 0) continue;
                S->fcand[3 * nfc] = f;
                S->fcand[3 * nfc + 1] = t;
                S->fcand[3 * nfc + 2] = W_EPSILON;
                nfc++;
            }
        }
        int64_t nrest = n_edges(S, rest), words = S->below_words;
        const uint64_t *tops_bits = S->tops_bits + atom * words;
        for (int64_t f = 0; f < nrest; f++) {
            int64_t in_sym = S->esym[S->estart[rest] + f], deeper = S->ekid[S->estart[rest] + f];
            int64_t consumed = make1(S, in_sym, deeper);
            if (consumed < 0) {
                result = consumed;
                goto fail;
            }
            int64_t last = in_sym - nt - 1; /* a plain input symbol n + 1 + A, or IN(g, lo, hi): row nt + g */
            if (in_sym >= WIDE_IN && in_sym < WIDE_REL && S->nfam) {
                int64_t g, j, lo, hi;
                split_wide(S, in_sym, &g, &j, &lo, &hi);
                last = nt + g;
            } else if (last < 0 || last >= nt) {
                continue; /* (never: input symbols are n + 1 + A) */
            }
            if (cand_room(&S->cand, &S->ccap, nc + ntops) < 0) goto nomem;
            if (S->nfam && cand_room(&S->fcand, &S->fccap, nfc + S->nfam) < 0) goto nomem;
            /* the tops on this atom that may sit below `last`, ascending: one AND per 64 symbols
             * (Displacer's backtrack candidates; a loop over every top cost 34% of jsb_0172's classing) */
            const uint64_t *below = S->below + last * words;
            for (int64_t w = 0; w < words; w++)
                for (uint64_t bits = below[w] & tops_bits[w]; bits; bits &= bits - 1) {
                    int64_t a = w * 64 + __builtin_ctzll(bits);
                    if (a < nt) {
                        S->cand[3 * nc] = a;
                        S->cand[3 * nc + 1] = S->table[a * S->natoms + atom];
                        S->cand[3 * nc + 2] = consumed;
                        nc++;
                    } else { /* a family: bit nt + g (tops_bits has it where g's item reads the atom) */
                        int64_t g = a - nt;
                        S->fcand[3 * nfc] = g;
                        S->fcand[3 * nfc + 1] = S->table[S->fam_item[g] * S->natoms + atom];
                        S->fcand[3 * nfc + 2] = consumed;
                        nfc++;
                    }
                }
        }
        for (int64_t k = 0; k < nc; k++) {
            int64_t a = S->cand[3 * k], tail = S->cand[3 * k + 1], consumed = S->cand[3 * k + 2];
            if ((result = make1(S, nt + 1 + a, consumed)) < 0) goto fail;
            if ((result = make1(S, sep, result)) < 0) goto fail;
            if (ostk_push(S, tail, result) < 0) goto nomem;
        }
        /* a member F_x of family g with a symbolic x in [1, last] consumed */
        for (int64_t k = 0; k < nfc; k++) {
            int64_t g = S->fcand[3 * k], tail = S->fcand[3 * k + 1], consumed = S->fcand[3 * k + 2];
            if ((result = member_terms(S, g, 0, 1, S->fam_last[g], tail, consumed)) < 0) goto fail;
        }
    }
    result = w_union_n(S, obase, 0);
    if (result < 0) return result;
    if (memo_put(&S->sm, key, (int32_t)result) < 0) return E_NOMEM;
    return result;
nomem:
    result = E_NOMEM;
fail:
    S->otop = obase;
    return result;
}

/* ---- Python-facing errors ---- */
/* cfgzip_lab.native._kernel.Unsupported: what this store does not do (recursion past MAX_DEPTH, a symbol
 * kind it does not know); the callers run the Python reference instead. */
static PyObject *Unsupported;

static PyObject *raise_code(Words *S, int64_t code) {
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

static int check_node(Words *S, long long node) {
    if (node < 0 || node >= S->n) {
        PyErr_Format(PyExc_IndexError, "word store: no node %lld", node);
        return -1;
    }
    return 0;
}

/* ---- construction ---- */
static void words_dealloc(Words *S) {
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

static int words_init(Words *S, PyObject *args, PyObject *kwds) {
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

/* Stack adjacency, directly-below form (cfgzip_lab.grammar.gnf.stack_below, the reference): bit b of
 * row a (bit nb = nt + families: BOTTOM) when some reachable stack may hold b right under a. The fixpoint
 *     below[S] has BOTTOM;  for A -> a B1..Bk: below[Bi] has B(i+1) (i < k), below[Bk] includes below[A]
 * over the tails' DAG: direct pairs from every reachable node's edge followed by an edge, "lasts" (the
 * symbols ending some word of a node) by one postorder pass, then the inclusions until nothing changes. */
/* The row of `below` a GNF tail symbol stands for: a plain nonterminal its own, a member F_c of family f
 * row nt + f (stack_below's key); -1 for any other symbol. */
static inline int64_t below_key(const Words *S, int64_t sym) {
    if (sym >= 0 && sym < S->nt) return sym;
    if (sym >= FAMILY_BASE && sym < WIDE_IN && ((sym - FAMILY_BASE) >> 32) < S->nfam)
        return S->nt + ((sym - FAMILY_BASE) >> 32);
    return -1;
}

static int compute_below(Words *S, int64_t start) {
    int64_t nt = S->nt, nb = S->nb, words = (nb + 1 + 63) / 64; /* bit nb: BOTTOM */
    S->below_words = words;
    S->below = calloc((size_t)(nb ? nb : 1) * words, sizeof(uint64_t));
    int32_t *slot = malloc((size_t)S->n * sizeof(int32_t)); /* node -> row of `lasts`, -1 unseen */
    int64_t *stack = NULL, sp = 0, scap = 0;
    int32_t *order = NULL;
    uint64_t *lasts = NULL, *ends = calloc((size_t)(nb ? nb : 1) * words, sizeof(uint64_t));
    int64_t nreach = 0;
    int ret = -1;
    if (!S->below || !slot || !ends) goto done;
    memset(slot, 0xFF, (size_t)S->n * sizeof(int32_t));
    order = malloc((size_t)S->n * sizeof(int32_t));
    if (!order) goto done;
    /* postorder over the nodes reachable from every tail (children first) */
    for (int64_t e = 0; e < nt * S->natoms; e++) {
        int64_t root = S->table[e];
        if (root <= W_EPSILON || slot[root] != -1) continue;
        if (grow((void **)&stack, &scap, sp + 2, sizeof(int64_t)) < 0) goto done;
        stack[sp++] = root;
        stack[sp++] = -1;
        while (sp) { /* slot: -1 unseen, -2 expanded (on the current path), >= 0 finished */
            int64_t mark = stack[--sp], node = stack[--sp];
            if (mark == -1) {
                if (slot[node] != -1) continue;
                slot[node] = -2;
                if (grow((void **)&stack, &scap, sp + 2 + 2 * n_edges(S, node), sizeof(int64_t)) < 0) goto done;
                stack[sp++] = node;
                stack[sp++] = -3;
                for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
                    int64_t c = S->ekid[i];
                    if (c <= W_EPSILON || slot[c] != -1) continue;
                    stack[sp++] = c;
                    stack[sp++] = -1;
                }
            } else {
                slot[node] = (int32_t)nreach;
                order[nreach++] = (int32_t)node;
            }
        }
    }
    lasts = calloc((size_t)(nreach ? nreach : 1) * words, sizeof(uint64_t));
    if (!lasts) goto done;
    for (int64_t r = 0; r < nreach; r++) {
        int64_t node = order[r];
        uint64_t *row = lasts + r * words;
        for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
            int64_t sym = below_key(S, S->esym[i]), c = S->ekid[i];
            if (sym < 0) continue;
            if (S->acc[c]) row[sym >> 6] |= (uint64_t)1 << (sym & 63);
            if (c > W_EPSILON) {
                const uint64_t *sub = lasts + (int64_t)slot[c] * words;
                for (int64_t w = 0; w < words; w++) row[w] |= sub[w];
            }
            for (int64_t j = S->estart[c]; j < S->estart[c + 1]; j++) {
                int64_t s2 = below_key(S, S->esym[j]);
                if (s2 >= 0) S->below[sym * words + (s2 >> 6)] |= (uint64_t)1 << (s2 & 63);
            }
        }
    }
    for (int64_t a = 0; a < nt; a++)
        for (int64_t k = 0; k < S->natoms; k++) {
            int64_t t = S->table[a * S->natoms + k];
            if (t <= W_EPSILON) continue;
            const uint64_t *sub = lasts + (int64_t)slot[t] * words;
            for (int64_t w = 0; w < words; w++) ends[a * words + w] |= sub[w];
        }
    /* family f, one row nt + f for all its members: F -> a T_X(a) F and F -> a T_X(a) (stack_below) */
    for (int64_t f = 0; f < S->nfam; f++) {
        int64_t me = nt + f, item = S->fam_item[f];
        uint64_t *em = ends + me * words;
        em[me >> 6] |= (uint64_t)1 << (me & 63);
        for (int64_t k = 0; k < S->natoms; k++) {
            int64_t t = S->table[item * S->natoms + k];
            if (t <= W_EPSILON) continue;
            const uint64_t *sub = lasts + (int64_t)slot[t] * words;
            for (int64_t w = 0; w < words; w++) {
                em[w] |= sub[w];
                for (uint64_t bits = sub[w]; bits; bits &= bits - 1) {
                    int64_t b = w * 64 + __builtin_ctzll(bits);
                    S->below[b * words + (me >> 6)] |= (uint64_t)1 << (me & 63);
                }
            }
        }
    }
    if (start >= 0 && start < nt) S->below[start * words + (nb >> 6)] |= (uint64_t)1 << (nb & 63);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int64_t a = 0; a < nb; a++) {
            const uint64_t *from = S->below + a * words, *ea = ends + a * words;
            for (int64_t w = 0; w < words; w++)
                for (uint64_t bits = ea[w]; bits; bits &= bits - 1) {
                    int64_t b = w * 64 + __builtin_ctzll(bits);
                    uint64_t *to = S->below + b * words;
                    for (int64_t x = 0; x < words; x++)
                        if (from[x] & ~to[x]) {
                            to[x] |= from[x];
                            changed = 1;
                        }
                }
        }
    }
    ret = 0;
done:
    free(slot);
    free(stack);
    free(order);
    free(lasts);
    free(ends);
    return ret;
}

/* Bits a count 0..v needs (at least 1). */
static int bits_for(int64_t v) {
    int b = 1;
    while (b < 62 && (INT64_C(1) << b) <= v) b++;
    return b;
}

/* The symbol widths a store needs for `nfam` families whose largest count is `last` (0 / 0: none), or -1
 * when they do not fit the 61 bits of a packed symbol. */
static int widths_for(int64_t nfam, int64_t last, int *fbits, int *cbits) {
    if (nfam <= 0) {
        *fbits = *cbits = 0;
        return 0;
    }
    *fbits = bits_for(nfam - 1);
    *cbits = bits_for(last);
    return nfam < (INT64_C(1) << 20) && *fbits + 3 * *cbits <= WIDE_BITS ? 0 : -1;
}

/* The families of grammar(): a sequence of (item, min, max) with max -1 when unbounded (Family.item,
 * .min, .max); their item rows' atoms in dict order from `table`. */
static int load_families(Words *S, PyObject *families, PyObject *table) {
    PyObject *seq = PySequence_Fast(families, "word store: families must be a sequence of (item, min, max)");
    if (!seq) return -1;
    Py_ssize_t nf = PySequence_Fast_GET_SIZE(seq);
    int ret = -1;
    S->fam_item = malloc((size_t)(nf ? nf : 1) * sizeof(int32_t));
    S->fam_min = malloc((size_t)(nf ? nf : 1) * sizeof(int64_t));
    S->fam_max = malloc((size_t)(nf ? nf : 1) * sizeof(int64_t));
    S->fam_last = malloc((size_t)(nf ? nf : 1) * sizeof(int64_t));
    S->fam_rowptr = calloc((size_t)nf + 1, sizeof(int32_t));
    if (!S->fam_item || !S->fam_min || !S->fam_max || !S->fam_last || !S->fam_rowptr) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t biggest = 0, natoms_total = 0;
    for (Py_ssize_t f = 0; f < nf; f++) {
        long long item, lo, hi;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, f), "LLL", &item, &lo, &hi)) goto done;
        if (item < 0 || item >= S->nt || lo < 0 || hi < -1) {
            PyErr_SetString(PyExc_ValueError, "word store: a family out of range");
            goto done;
        }
        S->fam_item[f] = (int32_t)item;
        S->fam_min[f] = lo;
        S->fam_max[f] = hi;
        S->fam_last[f] = hi >= 0 ? hi - 1 : (lo - 1 > 1 ? lo - 1 : 1); /* Family.last */
        if (S->fam_last[f] > biggest) biggest = S->fam_last[f];
        natoms_total += PyDict_Size(PyList_GET_ITEM(table, item));
    }
    int fbits, cbits;
    if (widths_for(nf, biggest, &fbits, &cbits) < 0) {
        PyErr_SetString(PyExc_ValueError, "word store: counted repetitions past the compiled store's symbol widths");
        goto done;
    }
    if (S->cbits && (S->cbits != cbits || S->fbits != fbits)) {
        PyErr_SetString(PyExc_ValueError, "word store: its symbol widths are not this grammar's");
        goto done;
    }
    S->fbits = fbits;
    S->cbits = cbits;
    S->fam_rowatoms = malloc((size_t)(natoms_total ? natoms_total : 1) * sizeof(int32_t));
    if (!S->fam_rowatoms) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t pos = 0;
    for (Py_ssize_t f = 0; f < nf; f++) {
        PyObject *row = PyList_GET_ITEM(table, S->fam_item[f]), *k, *v;
        Py_ssize_t it = 0;
        S->fam_rowptr[f] = (int32_t)pos;
        while (PyDict_Next(row, &it, &k, &v)) S->fam_rowatoms[pos++] = (int32_t)PyLong_AsLongLong(k);
    }
    S->fam_rowptr[nf] = (int32_t)pos;
    S->nfam = nf;
    ret = 0;
done:
    Py_DECREF(seq);
    return ret;
}

/* grammar(table, num_atoms, start, families=()) -> the displacer's initial node.
 *   table: list of dicts atom -> tail node, one per GNF nonterminal; start: the start nonterminal;
 *   families: GNF.families as (item, min, max) tuples, max -1 when unbounded.
 * Builds the stack adjacency (compute_below), Displacer's tops / backtrack lists, and interns the
 * initial set {SEP} (as Displacer.__init__ does). */
static PyObject *words_grammar(Words *S, PyObject *args) {
    PyObject *table, *families = NULL;
    long long natoms, start;
    if (!PyArg_ParseTuple(args, "O!LL|O", &PyList_Type, &table, &natoms, &start, &families)) return NULL;
    int64_t nt = PyList_GET_SIZE(table);
    Py_ssize_t nf = families ? PySequence_Size(families) : 0;
    if (nf < 0) return NULL;
    if (S->has_grammar) { /* a second displacer of the same GNF on its store: the same tables */
        if (nt != S->nt || natoms != S->natoms || nf != S->nfam) {
            PyErr_SetString(PyExc_RuntimeError, "word store: it already serves another grammar");
            return NULL;
        }
        int64_t initial = make1(S, S->sep, W_EPSILON);
        return initial < 0 ? raise_code(S, initial) : PyLong_FromLongLong(initial);
    }
    if (natoms <= 0 || natoms > 256 || nt >= INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "word store: between 1 and 256 byte classes");
        return NULL;
    }
    S->nt = nt;
    S->natoms = natoms;
    S->sep = nt;
    S->table = malloc((size_t)(nt ? nt : 1) * natoms * sizeof(int32_t));
    S->tops_ptr = calloc((size_t)natoms + 1, sizeof(int32_t));
    if (!S->table || !S->tops_ptr) return PyErr_NoMemory();
    memset(S->table, 0xFF, (size_t)nt * natoms * sizeof(int32_t));
    int64_t entries = 0;
    for (int64_t a = 0; a < nt; a++) {
        PyObject *row = PyList_GET_ITEM(table, a), *k, *v;
        Py_ssize_t pos = 0;
        if (!PyDict_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "word store: a table row must be a dict");
            return NULL;
        }
        while (PyDict_Next(row, &pos, &k, &v)) {
            long long atom = PyLong_AsLongLong(k), tail = PyLong_AsLongLong(v);
            if (PyErr_Occurred()) return NULL;
            if (atom < 0 || atom >= natoms || tail <= W_EMPTY || tail >= S->n) {
                PyErr_SetString(PyExc_ValueError, "word store: a table entry out of range");
                return NULL;
            }
            S->table[a * natoms + atom] = (int32_t)tail;
            entries++;
        }
    }
    S->nfam = 0;
    if (nf && load_families(S, families, table) < 0) {
        S->nfam = 0;
        return NULL;
    }
    S->nb = nt + S->nfam;
    if (compute_below(S, start) < 0) return PyErr_NoMemory();
    S->tops_a = malloc((size_t)(entries ? entries : 1) * sizeof(int32_t));
    S->tops_t = malloc((size_t)(entries ? entries : 1) * sizeof(int32_t));
    if (!S->tops_a || !S->tops_t) return PyErr_NoMemory();
    int64_t pos = 0;
    for (int64_t k = 0; k < natoms; k++) {
        S->tops_ptr[k] = (int32_t)pos;
        for (int64_t a = 0; a < nt; a++) {
            int32_t t = S->table[a * natoms + k];
            if (t < 0) continue;
            S->tops_a[pos] = (int32_t)a;
            S->tops_t[pos] = t;
            pos++;
        }
    }
    S->tops_ptr[natoms] = (int32_t)pos;
    S->tops_bits = calloc((size_t)natoms * (size_t)S->below_words, sizeof(uint64_t));
    if (!S->tops_bits) return PyErr_NoMemory();
    for (int64_t k = 0; k < natoms; k++) {
        uint64_t *bits = S->tops_bits + k * S->below_words;
        for (int32_t i = S->tops_ptr[k]; i < S->tops_ptr[k + 1]; i++) bits[S->tops_a[i] >> 6] |= (uint64_t)1 << (S->tops_a[i] & 63);
        for (int64_t f = 0; f < S->nfam; f++) /* bit nt + f: family f's item reads the atom */
            if (S->table[S->fam_item[f] * natoms + k] >= 0) bits[(nt + f) >> 6] |= (uint64_t)1 << ((nt + f) & 63);
    }
    S->has_grammar = 1;
    int64_t initial = make1(S, S->sep, W_EPSILON);
    if (initial < 0) return raise_code(S, initial);
    return PyLong_FromLongLong(initial);
}

/* below_sets(bottom) -> list of sets: the stack adjacency as stack_below returns it (`bottom` for BOTTOM). */
static PyObject *words_below_sets(Words *S, PyObject *arg) {
    if (!S->has_grammar) {
        PyErr_SetString(PyExc_RuntimeError, "word store: no grammar set (Words.grammar)");
        return NULL;
    }
    PyObject *out = PyList_New(S->nb);
    for (int64_t a = 0; out && a < S->nb; a++) {
        PyObject *set = PySet_New(NULL);
        if (!set) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, a, set);
        for (int64_t b = 0; b <= S->nb; b++) {
            if (!((S->below[a * S->below_words + (b >> 6)] >> (b & 63)) & 1)) continue;
            PyObject *x = b == S->nb ? Py_NewRef(arg) : PyLong_FromLongLong(b);
            if (!x || PySet_Add(set, x) < 0) {
                Py_XDECREF(x);
                Py_CLEAR(out);
                break;
            }
            Py_DECREF(x);
        }
    }
    return out;
}

static int need_grammar(Words *S) {
    if (!S->has_grammar) {
        PyErr_SetString(PyExc_RuntimeError, "word store: no grammar set (Words.grammar)");
        return -1;
    }
    return 0;
}

/* ---- the WordStore API ---- */
static PyObject *words_make(Words *S, PyObject *args) {
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

static PyObject *words_union(Words *S, PyObject *args) {
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

static PyObject *words_union_many(Words *S, PyObject *arg) { return union_terms_py(S, arg, 0); }
static PyObject *words_union_concats(Words *S, PyObject *arg) { return union_terms_py(S, arg, 1); }

static PyObject *words_concat(Words *S, PyObject *args) {
    long long a, b;
    if (!PyArg_ParseTuple(args, "LL", &a, &b) || check_node(S, a) < 0 || check_node(S, b) < 0) return NULL;
    int64_t r = w_concat(S, a, b, 0);
    return r < 0 ? raise_code(S, r) : PyLong_FromLongLong(r);
}

static PyObject *words_step(Words *S, PyObject *args) {
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
static PyObject *words_run(Words *S, PyObject *args) {
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

static PyObject *words_edges(Words *S, PyObject *arg) {
    long long node = PyLong_AsLongLong(arg);
    if ((node == -1 && PyErr_Occurred()) || check_node(S, node) < 0) return NULL;
    return edges_tuple(S, node);
}

static PyObject *words_accepts(Words *S, PyObject *arg) {
    long long node = PyLong_AsLongLong(arg);
    if ((node == -1 && PyErr_Occurred()) || check_node(S, node) < 0) return NULL;
    return PyBool_FromLong(S->acc[node]);
}

static PyObject *words_child(Words *S, PyObject *args) {
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
static PyObject *words_reachable(Words *S, PyObject *roots) {
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
static PyObject *words_count(Words *S, PyObject *arg) {
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

static Py_ssize_t words_len(Words *S) { return (Py_ssize_t)S->n; }

static PyObject *words_item(Words *S, Py_ssize_t i) {
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

static PyObject *words_get_created(Words *S, void *c) {
    (void)c;
    return PyLong_FromLongLong(S->created);
}

static PyObject *words_get_limit(Words *S, void *c) {
    (void)c;
    return S->limit == NO_LIMIT ? PyFloat_FromDouble(Py_HUGE_VAL) : PyLong_FromLongLong(S->limit);
}

static int words_set_limit(Words *S, PyObject *v, void *c) {
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

static PyObject *words_stats(Words *S, PyObject *unused) {
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

/* ---- the class mask of a state: its DAG walked with the sigma_in trie (as _kernel.c's trie_mask, on this
 * store's arrays instead of the Python store's tuples) ---- */
static void store_trie_walk(const Words *S, const Trie *t, int64_t node, Py_ssize_t tn, uint64_t *out) {
    const int32_t *ptr = (const int32_t *)t->ptr.buf, *syms = (const int32_t *)t->syms.buf;
    const int32_t *kids = (const int32_t *)t->kids.buf;
    Py_ssize_t j = ptr[tn], jend = ptr[tn + 1];
    for (int64_t i = S->estart[node], iend = S->estart[node + 1]; i < iend && j < jend; i++) {
        int64_t sym = S->esym[i];
        while (j < jend && syms[j] < sym) j++; /* both sides sorted by symbol */
        if (j == jend || syms[j] != sym) continue;
        Py_ssize_t nt = kids[j];
        trie_or_classes(t, nt, out);
        if (ptr[nt + 1] > ptr[nt] && S->ekid[i] != W_EPSILON) store_trie_walk(S, t, S->ekid[i], nt, out);
    }
}

/* trie_mask(trie, state, out): out (uint64[words], zeroed first) = OR of the class sets of the trie nodes
 * that words of `state` spell from the root. The DAG is deterministic and the trie a tree, so each pair
 * (DAG node, trie node) is met once. */
static PyObject *words_trie_mask(Words *S, PyObject *args) {
    PyObject *capsule;
    long long state;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "OLw*", &capsule, &state, &out)) return NULL;
    PyObject *result = NULL;
    Trie *t = (Trie *)PyCapsule_GetPointer(capsule, "cfgzip_trie");
    if (!t || check_node(S, state) < 0) goto done;
    if (out.len != t->words * 8) {
        PyErr_SetString(PyExc_ValueError, "trie_mask: out has the wrong size");
        goto done;
    }
    memset(out.buf, 0, (size_t)out.len);
    store_trie_walk(S, t, state, 0, (uint64_t *)out.buf);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    return result;
}

/* ---- the native engine's accept step (cfgzip_lab.native.walk.StateWalker.advance and the matcher's
 * token dispatch, the reference): one call per token, so that a decode step touches a few arrays
 * rather than the Python objects of a matcher, a walker and their dicts (with the caches cold, as a
 * model's forward pass leaves them, those were ~17 us of a 30 us accept on c_like). ---- */
typedef struct {
    PyObject_HEAD
    Words *S;
    PyObject *tokens;     /* list of bytes: token_bytes */
    Py_buffer class_buf;  /* class_of's buffer, held for the Advancer's life (no copy: 512 KB of fresh
                           * pages a grammar with Llama-3, ~0.17 ms of page faults on a new schema) */
    int32_t *class_of;    /* V, in class_buf; each id checked when an accept reads it */
    Py_buffer ids_buf, classes_buf; /* or a sparse map: ids ascending (class 0 elsewhere) and their classes */
    const int32_t *ids, *classes;
    int64_t nids;
    uint8_t *class_kind;  /* K: 0 NORMAL, 1 STOP, 2 BLOCKED (ClassKind) */
    int64_t V, K;
    uint8_t atom_of[256];
    Memo memo;            /* state * K + class -> state */
    int64_t memo_entries, token_budget, request_budget;
    PyObject *budget_exc; /* StateBudgetExceeded */
    int64_t hits, advances, drops;
} Advancer;

static PyTypeObject AdvancerType;

static void advancer_dealloc(Advancer *A) {
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
static int advancer_init(Advancer *A, PyObject *args, PyObject *kwds) {
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

/* accept(state, token, spent) -> (state after the token, nodes created)
 * The state after: EMPTY (0) when the grammar does not allow the token (or it is blocked, or no id),
 * -1 when it is a stop token the state may end on (the matcher's _STOPPED). A NORMAL token's
 * successor is memoised by (state, class): equal displacements lead to the same canonical node.
 * Raises budget_exc past the per-token or the request budget (nothing changed then). */
static PyObject *advancer_accept(Advancer *A, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "accept(state, token, spent)");
        return NULL;
    }
    long long state = PyLong_AsLongLong(args[0]), token = PyLong_AsLongLong(args[1]);
    long long spent = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    Words *S = A->S;
    if (check_node(S, state) < 0) return NULL;
    if (token < 0 || token >= A->V) return Py_BuildValue("ii", W_EMPTY, 0);
    int32_t k = A->class_of ? A->class_of[token] : sparse_class(A, token);
    if (k < 0 || k >= A->K) {  /* the array was written after the Advancer checked it */
        PyErr_SetString(PyExc_ValueError, "Advancer: class_of names a class outside class_kind");
        return NULL;
    }
    uint8_t kind = A->class_kind[k];
    if (kind == 1) return Py_BuildValue("ii", S->acc[state] ? -1 : W_EMPTY, 0);
    if (kind != 0) return Py_BuildValue("ii", W_EMPTY, 0);
    uint64_t key = (uint64_t)state * (uint64_t)A->K + (uint64_t)k;
    int32_t got = memo_get(&A->memo, key);
    if (got >= 0) {
        A->hits++;
        return Py_BuildValue("ii", got, 0);
    }
    A->advances++;
    int64_t budget = A->token_budget < A->request_budget - spent ? A->token_budget : A->request_budget - spent;
    if (budget <= 0) {
        PyErr_Format(A->budget_exc, "the request created more than %lld state nodes", (long long)A->request_budget);
        return NULL;
    }
    PyObject *b = PyList_GET_ITEM(A->tokens, token);
    if (!PyBytes_Check(b)) {
        PyErr_SetString(PyExc_TypeError, "Advancer: a token's bytes are not bytes");
        return NULL;
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
        return NULL;
    }
    if (A->memo.used >= A->memo_entries) { /* dropped whole when full: it only holds finished results */
        memo_free(&A->memo);
        A->drops++;
    }
    if (memo_put(&A->memo, key, (int32_t)r) < 0) return PyErr_NoMemory();
    return Py_BuildValue("LL", (long long)r, (long long)(S->created - before));
}

static PyObject *advancer_stats(Advancer *A, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("{sLsLsL}", "advance_memo_hits", (long long)A->hits, "advances", (long long)A->advances,
                         "memo_drops", (long long)A->drops);
}

static PyMethodDef advancer_methods[] = {
    {"accept", (PyCFunction)(void (*)(void))advancer_accept, METH_FASTCALL, "accept(state, token, spent) (see _words.c)"},
    {"stats", (PyCFunction)advancer_stats, METH_NOARGS, "memo hits, advances, memo drops"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AdvancerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cfgzip_lab.native._kernel.Advancer",
    .tp_basicsize = sizeof(Advancer),
    .tp_dealloc = (destructor)advancer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "the native engine's accept step on a compiled word store (see _words.c)",
    .tp_methods = advancer_methods,
    .tp_init = (initproc)advancer_init,
    .tp_new = PyType_GenericNew,
};

/* ---- the vocabulary as a trie over bytes (per vocabulary, grammar-independent) ---- */
typedef struct {
    PyObject_HEAD
    int64_t ntok, nnodes, eligible, maxdepth;
    int32_t *cptr, *ckid; /* children of node t: ckid[cptr[t]:cptr[t+1]], bytes ascending */
    uint8_t *cbyte;
    int32_t *tptr, *ttok; /* tokens whose bytes end at node t, ids ascending */
    int32_t *len;         /* byte length of every token id */
    int32_t *send;        /* one past the last node of t's subtree (preorder: the subtree is t..send[t]-1) */
    uint64_t *below;      /* 4 words per node: the bytes on the edges strictly below t (classing's skip) */
    PyObject **held;      /* the token objects it was built from (references held: same() compares them) */
    uint8_t *kinds;
    int normal;           /* the kind of the tokens it holds (with a non-empty byte string) */
    int stop;             /* the kind of the stop tokens (the numbering's STOP class) */
    int32_t *parent;      /* each node's parent (the root's: -1) and the byte on the edge to it: the walk's */
    uint8_t *pbyte;       /* scan of a subtree in preorder (walk_scan) */
    /* For the numbering (assemble), per vocabulary: eligible[t] (a NORMAL token with bytes, one the
     * trie holds), those tokens by (length, id) (the first dead one is the BLOCKED class's
     * representative), and the tokens no grammar can change: the STOP ids, the count and first id
     * of the BLOCKED ones (special or empty), the shortest STOP token (the first of equals). */
    uint8_t *eligible_of;
    int32_t *by_length;
    int32_t *stop_ids;
    int64_t nstops, nfixed_blocked, fixed_blocked_min, stop_rep;
    int64_t nnormal; /* NORMAL tokens, empty ones too (the classes' metadata counts them) */
} VocabTrie;

static PyTypeObject VocabTrieType;

static void vtrie_dealloc(VocabTrie *T) {
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
    free(T->stop_ids);
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
    T->stop_ids = malloc((size_t)(T->nstops ? T->nstops : 1) * sizeof(int32_t));
    if (!T->stop_ids) return -1;
    for (int64_t t = 0, k = 0; t < v; t++)
        if (!T->eligible_of[t] && T->kinds[t] == T->stop) T->stop_ids[k++] = (int32_t)t;
    return 0;
}

/* VocabTrie(token_bytes, kinds, normal=0, stop=1): the trie of the NORMAL, non-empty tokens' bytes.
 * Built by sorting the tokens (counting sort on their first two bytes, then qsort inside each bucket)
 * and inserting them in order: nodes come out in preorder, children in byte order. */
static int vtrie_init(VocabTrie *T, PyObject *args, PyObject *kwds) {
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
    T->nnodes = nn;
    T->cptr = calloc((size_t)nn + 1, sizeof(int32_t));
    T->ckid = malloc((size_t)nn * sizeof(int32_t));
    T->cbyte = malloc((size_t)nn);
    T->tptr = calloc((size_t)nn + 1, sizeof(int32_t));
    T->ttok = malloc((size_t)(m ? m : 1) * sizeof(int32_t));
    if (!T->cptr || !T->ckid || !T->cbyte || !T->tptr || !T->ttok) goto nomem;
    for (int64_t t = 1; t < nn; t++) T->cptr[parent[t] + 1]++;
    for (int64_t t = 0; t < nn; t++) T->cptr[t + 1] += T->cptr[t];
    /* preorder: a node's children are created in byte order, after it, so filling in creation order works */
    {
        int32_t *fill = malloc((size_t)nn * sizeof(int32_t));
        if (!fill) goto nomem;
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
    if (!T->send || !T->below) goto nomem;
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
static PyObject *vtrie_same(VocabTrie *T, PyObject *args) {
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

static PyObject *vtrie_info(VocabTrie *T, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("{sLsLsLsLsLsL}", "tokens", (long long)T->ntok, "eligible", (long long)T->eligible, "nodes",
                         (long long)T->nnodes, "longest", (long long)T->maxdepth, "normal", (long long)T->nnormal,
                         "stop", (long long)T->nstops);
}

/* ---- classing: the vocabulary walked as a trie over byte classes ----
 *
 * The byte trie is quotiented by the grammar's atom map on the fly: a "group" is the set of byte-trie
 * nodes whose byte strings map to one byte-class string; its children are the children of its nodes,
 * grouped by atom, visited in atom order. So groups with tokens come in exactly the order of the
 * sorted byte-class strings the Python walk (classing._walk) iterates, and each key's steps are the
 * ones _walk runs (from the longest valid prefix of the path, under a fresh per-key budget; after a
 * budget failure the path stays valid up to the failing step, which _walk re-runs from memo hits). */
typedef struct {
    int32_t lo, hi; /* ttok[lo:hi] */
    int64_t node;   /* their displacement node, or -1: fallback tokens */
} Range;
#define RANGES_MAX (1 << 16)

typedef struct {
    Words *S;
    VocabTrie *T;
    const uint8_t *atom_of;
    int64_t budget, max_nodes;
    int32_t *path;
    int64_t valid;
    uint8_t *atoms;
    int64_t *node_of;
    uint64_t *assigned; /* bit t: the walk wrote node_of[t] over what walk_prefill wrote */
    uint8_t *fallback;
    int32_t *gs;
    uint8_t *ga;
    int64_t gtop, gcap, gcap2;
    int32_t *sort_tmp;
    uint8_t *sort_tmpa;
    int64_t tcap, tcap2;
    int64_t keys, fallback_keys, done_tokens;
    PyObject *progress, *cancel;
    int64_t limit_depth, limit_node; /* where the run's cap was passed */
    PyObject *pystep;                /* classify_steps: the Python displacer's step (S is NULL then) */
    /* The skip (walk_skips): per configuration set D met at a node, the bytes known to step D to D
     * itself (loop) and known not to (exit), from the step memo; atom_bytes: the bytes of each atom. */
    Memo loops_at;                   /* D -> index into loop/exit (4 words each) */
    uint64_t *loop, *exit;
    int64_t nloops, loopcap, loopcap2;
    uint64_t *atom_bytes;            /* natoms x 4 words */
    int64_t skipped_tokens;
    int64_t dead_skipped; /* tokens of dead subtrees, left at the empty set walk_prefill wrote */
    int64_t fallback_tokens; /* tokens given -1 by walk_dead_check: the walk's fallbacks */
    int lazy_nodes; /* node_of not written (yet): the ranges hold the walk's nodes (classify's `lazy`) */
    /* walk_scan: up to SCAN_STATES configuration sets met in scans, their transitions as slots
     * (-1: not in the step memo when last looked), and a slot per node of the subtree scanned */
    int64_t scan_state[255];
    int32_t scan_loop[255]; /* the slot's loop/exit slot (walk_loop_slot), -1 until needed */
    Memo scan_slot;      /* configuration set -> slot + 1 */
    int16_t *scan_next;  /* SCAN_STATES x natoms */
    int32_t nscan;
    uint8_t *scan_at;    /* slot per node of the subtree being scanned, relative to its root */
    int64_t scan_cap;
    int64_t scanned_tokens; /* of skipped_tokens, those walk_scan numbered */
    /* The tokens given a live node (> W_EMPTY) or a fallback (node -1), as ranges of ttok, for the
     * numbering's short way (assemble_ranges); given up (ranges_off) past a quarter of the vocabulary
     * or RANGES_MAX ranges, where the pass over the whole vocabulary costs no more. */
    Range *ranges;
    int64_t nranges, rangecap, range_tokens;
    int ranges_off;
} Walk;

static int walk_push(Walk *W, uint8_t atom, int32_t node) {
    if (W->gtop >= W->gcap) {
        int64_t c = W->gcap, c2 = W->gcap2;
        if (grow((void **)&W->gs, &c, W->gtop + 1, sizeof(int32_t)) < 0) return -1;
        if (grow((void **)&W->ga, &c2, W->gtop + 1, 1) < 0) return -1;
        W->gcap = c < c2 ? c : c2;
        W->gcap2 = c2;
    }
    W->gs[W->gtop] = node;
    W->ga[W->gtop] = atom;
    W->gtop++;
    return 0;
}

/* Sort gs/ga[lo:hi] by atom (counting sort; groups are small but the root has ~250 children). */
static int walk_sort(Walk *W, int64_t lo, int64_t hi) {
    int64_t n = hi - lo;
    if (n < 2) return 0;
    if (n <= 16) {
        for (int64_t i = lo + 1; i < hi; i++) {
            uint8_t a = W->ga[i];
            int32_t g = W->gs[i];
            int64_t j = i - 1;
            while (j >= lo && W->ga[j] > a) {
                W->ga[j + 1] = W->ga[j];
                W->gs[j + 1] = W->gs[j];
                j--;
            }
            W->ga[j + 1] = a;
            W->gs[j + 1] = g;
        }
        return 0;
    }
    if (grow((void **)&W->sort_tmp, &W->tcap, n, sizeof(int32_t)) < 0) return -1;
    if (grow((void **)&W->sort_tmpa, &W->tcap2, n, 1) < 0) return -1;
    int64_t count[257] = {0};
    for (int64_t i = lo; i < hi; i++) count[W->ga[i] + 1]++;
    for (int k = 0; k < 256; k++) count[k + 1] += count[k];
    for (int64_t i = lo; i < hi; i++) {
        int64_t p = count[W->ga[i]]++;
        W->sort_tmp[p] = W->gs[i];
        W->sort_tmpa[p] = W->ga[i];
    }
    memcpy(W->gs + lo, W->sort_tmp, (size_t)n * sizeof(int32_t));
    memcpy(W->ga + lo, W->sort_tmpa, (size_t)n);
    return 0;
}

static int64_t walk_report(Walk *W) {
    if (W->progress != Py_None) {
        PyObject *r = PyObject_CallFunction(W->progress, "LL", (long long)W->done_tokens, (long long)W->T->eligible);
        if (!r) return E_PYTHON;
        Py_DECREF(r);
    }
    if (W->cancel != Py_None) {
        PyObject *r = PyObject_CallNoArgs(W->cancel);
        if (!r) return E_PYTHON;
        int stop = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (stop < 0) return E_PYTHON;
        if (stop) return E_CANCEL;
    }
    return 0;
}

static void walk_prefill(Walk *W);

/* The ranges given up (past their bound): where node_of was left to them (lazy), it is written now
 * from what they hold and this range, and by the walk itself from here on. */
static void walk_ranges_off(Walk *W, int32_t lo, int32_t hi, int64_t node) {
    W->ranges_off = 1;
    if (!W->lazy_nodes) return;
    const int32_t *ttok = W->T->ttok;
    walk_prefill(W);
    for (int64_t i = 0; i < W->nranges; i++)
        for (int32_t k = W->ranges[i].lo; k < W->ranges[i].hi; k++) W->node_of[ttok[k]] = W->ranges[i].node;
    for (int32_t k = lo; k < hi; k++) W->node_of[ttok[k]] = node;
    W->lazy_nodes = 0;
}

static void walk_range(Walk *W, int32_t lo, int32_t hi, int64_t node) {
    if (W->ranges_off || hi <= lo) return;
    W->range_tokens += hi - lo;
    Range *last = W->nranges ? W->ranges + W->nranges - 1 : NULL;
    if (W->range_tokens > W->T->ntok / 4)
        walk_ranges_off(W, lo, hi, node);
    else if (last && last->hi == lo && last->node == node) /* a scan's run of one set */
        last->hi = hi;
    else if (W->nranges >= RANGES_MAX || grow((void **)&W->ranges, &W->rangecap, W->nranges + 1, sizeof(Range)) < 0)
        walk_ranges_off(W, lo, hi, node);
    else
        W->ranges[W->nranges++] = (Range){lo, hi, node};
}

static void walk_fallback(Walk *W, int64_t gbase, int64_t glen) {
    VocabTrie *T = W->T;
    W->fallback_keys++;
    for (int64_t g = 0; g < glen; g++) {
        int32_t t = W->gs[gbase + g];
        /* (their node_of entries: -1 from walk_dead_check, after the walk, for those it did not write) */
        for (int32_t k = T->tptr[t]; k < T->tptr[t + 1]; k++) W->fallback[T->ttok[k]] = 1;
        walk_range(W, T->tptr[t], T->tptr[t + 1], -1);
        W->done_tokens += T->tptr[t + 1] - T->tptr[t];
    }
}

/* A token's node from the walk, marked as written (walk_dead_check counts the marks). */
static inline void walk_write(Walk *W, int32_t t, int64_t node) {
    if (!W->lazy_nodes) W->node_of[t] = node;
    W->assigned[t >> 6] |= (uint64_t)1 << (t & 63);
}

static void walk_assign(Walk *W, int64_t gbase, int64_t glen, int64_t node) {
    VocabTrie *T = W->T;
    for (int64_t g = 0; g < glen; g++) {
        int32_t t = W->gs[gbase + g];
        for (int32_t k = T->tptr[t]; k < T->tptr[t + 1]; k++) walk_write(W, T->ttok[k], node);
        if (node != W_EMPTY) walk_range(W, T->tptr[t], T->tptr[t + 1], node);
        W->done_tokens += T->tptr[t + 1] - T->tptr[t];
    }
}

/* walk_key with the steps taken by a Python callable pystep(node, atom, fresh) -> node, -1 (past the
 * key's budget: its tokens fall back) or -2 (past the run's cap); fresh: the key's first step (the
 * callable sets the key's budget on its store then, as _walk does before the key's steps). For the
 * grammars the compiled step does not take (counted families): the displacer's own step, the trie
 * walk and the numbering in C. */
static int64_t walk_key_py(Walk *W, int64_t gbase, int64_t glen, int64_t depth) {
    int64_t node = W->path[W->valid - 1];
    int fresh = 1;
    for (int64_t d = W->valid - 1; d < depth; d++) {
        if (node != W_EMPTY) {
            PyObject *res = PyObject_CallFunction(W->pystep, "LiO", (long long)node, (int)W->atoms[d],
                                                  fresh ? Py_True : Py_False);
            fresh = 0;
            if (!res) return E_PYTHON;
            long long next = PyLong_AsLongLong(res);
            Py_DECREF(res);
            if (next == -1 && PyErr_Occurred()) return E_PYTHON;
            if (next == -2) {
                W->limit_depth = depth;
                W->limit_node = node;
                return E_LIMIT;
            }
            if (next == -1) {
                walk_fallback(W, gbase, glen);
                W->valid = d + 1;
                return 0;
            }
            if (next < 0 || next > INT32_MAX) {
                PyErr_SetString(PyExc_ValueError, "classify_steps: the step gave no node id");
                return E_PYTHON;
            }
            node = next;
        }
        W->path[d + 1] = (int32_t)node;
        W->valid = d + 2;
    }
    walk_assign(W, gbase, glen, node);
    return 0;
}

/* One byte-class string with tokens: classing._walk's loop body. */
static int64_t walk_key(Walk *W, int64_t gbase, int64_t glen, int64_t depth) {
    Words *S = W->S;
    if (W->keys++ % 2048 == 0) { /* before keys 0, 2048, ... as _walk does */
        int64_t r = walk_report(W);
        if (r < 0) return r;
    }
    if (W->pystep) return walk_key_py(W, gbase, glen, depth);
    int64_t limit = S->created + W->budget;
    S->limit = limit < W->max_nodes ? limit : W->max_nodes;
    int64_t node = W->path[W->valid - 1];
    for (int64_t d = W->valid - 1; d < depth; d++) {
        if (node != W_EMPTY) {
            int64_t next = w_step(S, node, W->atoms[d]);
            if (next < 0) {
                S->limit = NO_LIMIT;
                if (next != E_BUDGET) return next;
                if (S->created > W->max_nodes) {
                    W->limit_depth = depth;
                    W->limit_node = node;
                    return E_LIMIT;
                }
                walk_fallback(W, gbase, glen);
                W->valid = d + 1;
                return 0;
            }
            node = next;
        }
        W->path[d + 1] = (int32_t)node;
        W->valid = d + 2;
    }
    S->limit = NO_LIMIT;
    walk_assign(W, gbase, glen, node);
    return 0;
}

/* Whether every byte below trie node t steps the configuration set D to D itself, by the step memo
 * alone (a byte whose step is not memoised yet counts as not: nothing is computed here). Then every
 * token below t has D's displacement, and the walk would reach it through memo hits only: no node
 * created, no budget spent; walk_visit assigns D to the subtree's tokens without walking it. D EMPTY
 * (dead) qualifies at once. This is what makes a typical schema's classing cheap: past a byte or two
 * inside a JSON string almost every token sits in the string's loop. */
/* The slot of D's loop/exit bytes (made on first use); < 0: no memory. Once per group: every node of
 * a group has the group's D. */
static int32_t walk_loop_slot(Walk *W, int64_t D) {
    int32_t at = memo_get(&W->loops_at, (uint64_t)D);
    if (at < 0) {
        if (W->nloops >= W->loopcap || W->nloops >= W->loopcap2) {
            int64_t c = W->loopcap, c2 = W->loopcap2;
            if (grow((void **)&W->loop, &c, 4 * (W->nloops + 1), sizeof(uint64_t)) < 0) return E_NOMEM;
            if (grow((void **)&W->exit, &c2, 4 * (W->nloops + 1), sizeof(uint64_t)) < 0) return E_NOMEM;
            W->loopcap = c / 4;
            W->loopcap2 = c2 / 4;
        }
        at = (int32_t)W->nloops++;
        memset(W->loop + 4 * (int64_t)at, 0, 4 * sizeof(uint64_t));
        memset(W->exit + 4 * (int64_t)at, 0, 4 * sizeof(uint64_t));
        if (memo_put(&W->loops_at, (uint64_t)D, at) < 0) return E_NOMEM;
    }
    return at;
}

/* Whether byte b steps D to D itself, by the step memo alone (a byte whose step is not memoised yet
 * counts as not: nothing is computed here); what the memo says is kept in D's loop/exit bytes. */
static inline int walk_byte_loops(Walk *W, int64_t D, int32_t at, int b) {
    uint64_t *loop = W->loop + 4 * (int64_t)at, *exit = W->exit + 4 * (int64_t)at, bit = 1ULL << (b & 63);
    if (loop[b >> 6] & bit) return 1;
    if (exit[b >> 6] & bit) return 0;
    Words *S = W->S;
    int64_t a = W->atom_of[b];
    int32_t next = memo_get(&S->sm, (uint64_t)D * (uint64_t)S->natoms + (uint64_t)a);
    if (next < 0) return 0; /* not stepped yet: the walk below will */
    uint64_t *bytes = next == D ? loop : exit;
    for (int v = 0; v < 4; v++) bytes[v] |= W->atom_bytes[4 * a + v];
    return next == D;
}

static int walk_skips(Walk *W, int64_t D, int32_t at, int32_t t) {
    if (D == W_EMPTY) return 1;
    const uint64_t *need = W->T->below + 4 * (int64_t)t;
    const uint64_t *loop = W->loop + 4 * (int64_t)at, *exit = W->exit + 4 * (int64_t)at;
    for (int w = 0; w < 4; w++) {
        uint64_t miss = need[w] & ~loop[w];
        if (miss & exit[w]) return 0;
        while (miss) {
            if (!walk_byte_loops(W, D, at, w * 64 + __builtin_ctzll(miss))) return 0;
            miss &= ~loop[w];
        }
    }
    return 1;
}

/* The tokens ttok[lo:hi] (a subtree's, in preorder) take D without being walked: written, or, D dead,
 * counted for walk_dead_check. */
static void walk_take(Walk *W, int32_t lo, int32_t hi, int64_t D) {
    if (D == W_EMPTY) {
        W->dead_skipped += hi - lo;
    } else {
        for (int32_t k = lo; k < hi; k++) walk_write(W, W->T->ttok[k], D);
        walk_range(W, lo, hi, D);
    }
    W->done_tokens += hi - lo;
    W->skipped_tokens += hi - lo;
}

/* ---- the scan: a subtree numbered in preorder from the step memo alone ----
 * Where the walk meets a node whose subtree does not loop (walk_skips fails), and every step the
 * subtree needs is already in the step memo, its tokens' configuration sets follow from the memo
 * node by node: one pass over the subtree's preorder range (each node's set is its parent's stepped
 * on its byte), jumping over the subtrees a set loops through as walk_skips would. No step is
 * computed, no node created, no budget spent, so the store's nodes and ids stay the Python walk's;
 * where a step is not in the memo yet, or past SCAN_STATES sets, the scan gives up (its writes are
 * the values the walk would give) and the walk goes on as before. It pays in the multi-byte UTF-8
 * of a JSON string: a set and its continuation-byte sets alternate byte by byte, so the walk
 * visited every node of Llama-3's non-ASCII subtrees one by one. */
#define SCAN_STATES 255
#define SCAN_MAX_NODES 8192
#define SCAN_JUMP_MIN 8

static int scan_slot_of(Walk *W, int64_t D) {
    int32_t got = memo_get(&W->scan_slot, (uint64_t)D);
    if (got > 0) return got - 1;
    if (W->nscan >= SCAN_STATES) return -1;
    int32_t slot = W->nscan++;
    W->scan_state[slot] = D;
    W->scan_loop[slot] = -1;
    memset(W->scan_next + (int64_t)slot * W->S->natoms, 0xFF, (size_t)W->S->natoms * sizeof(int16_t));
    if (memo_put(&W->scan_slot, (uint64_t)D, slot + 1) < 0) return E_NOMEM;
    return slot;
}

/* 1: every token strictly below t has its set (node_of written, counts kept); 0: gave up; < 0: error.
 * One pass: a node's tokens are written as its set is found; a scan that gives up has written only
 * what the walk will write again (the same sets), and counted nothing. Dead tokens are counted, not
 * written (they keep the empty set walk_prefill gave them). */
static int walk_scan_ranges(Walk *W, int64_t D, int32_t t) {
    VocabTrie *T = W->T;
    Words *S = W->S;
    int32_t end = T->send[t];
    int64_t n = end - t, natoms = S->natoms;
    if (n > SCAN_MAX_NODES || n < 2) return 0;
    if (!W->scan_next) {
        W->scan_next = malloc((size_t)SCAN_STATES * (size_t)natoms * sizeof(int16_t));
        if (!W->scan_next) return E_NOMEM;
    }
    if (n > W->scan_cap && grow((void **)&W->scan_at, &W->scan_cap, n, 1) < 0) return E_NOMEM;
    int root = scan_slot_of(W, D);
    if (root < 0) return root == -1 ? 0 : root;
    uint8_t *at = W->scan_at;
    at[0] = (uint8_t)root;
    int64_t dead = 0;
    const int32_t *ttok = T->ttok, *tptr = T->tptr;
    for (int32_t u = t + 1; u < end; u++) {
        int ps = at[T->parent[u] - t];
        int64_t a = W->atom_of[T->pbyte[u]];
        int16_t nx = W->scan_next[ps * natoms + a];
        if (nx < 0) {
            int64_t from = W->scan_state[ps];
            int64_t r = from == W_EMPTY ? W_EMPTY : memo_get(&S->sm, (uint64_t)from * (uint64_t)natoms + (uint64_t)a);
            if (r < 0) return 0;
            int slot = scan_slot_of(W, r);
            if (slot < 0) {
                return slot == -1 ? 0 : slot;
            }
            nx = (int16_t)slot;
            W->scan_next[ps * natoms + a] = nx;
        }
        at[u - t] = (uint8_t)nx;
        int64_t st = W->scan_state[nx];
        int32_t last = u + 1; /* one past the nodes whose tokens take st */
        int32_t below = T->send[u] - u - 1;
        /* a dead subtree, or one whose set loops through it: all of it st (checked where the subtree
         * is large enough to pay for reading its byte mask: a node costs less to scan than the read) */
        if (below > 0 && (st == W_EMPTY || below >= SCAN_JUMP_MIN)) {
            int whole = st == W_EMPTY;
            if (!whole) {
                int32_t ls = W->scan_loop[nx];
                if (ls < 0 && (ls = W->scan_loop[nx] = walk_loop_slot(W, st)) < 0) return ls;
                whole = walk_skips(W, st, ls, u);
            }
            if (whole) last = T->send[u];
        }
        int32_t lo = tptr[u], hi = tptr[last];
        if (st == W_EMPTY) {
            dead += hi - lo;
        } else {
            for (int32_t k = lo; k < hi; k++) walk_write(W, ttok[k], st);
            walk_range(W, lo, hi, st);
        }
        u = last - 1;
    }
    int64_t tokens = tptr[end] - tptr[t + 1];
    W->dead_skipped += dead;
    W->done_tokens += tokens;
    W->skipped_tokens += tokens;
    W->scanned_tokens += tokens;
    return 1;
}

/* walk_scan_ranges, whose ranges count only where the scan finishes: one that stops at a step the memo
 * lacks has written some of its tokens (the walk writes the same nodes again) and recorded them. */
static int walk_scan(Walk *W, int64_t D, int32_t t) {
    int64_t nranges = W->nranges, range_tokens = W->range_tokens;
    int ranges_off = W->ranges_off;
    int32_t last_hi = nranges ? W->ranges[nranges - 1].hi : 0;
    int r = walk_scan_ranges(W, D, t);
    if (r <= 0) {
        W->nranges = nranges;
        W->range_tokens = range_tokens;
        W->ranges_off = ranges_off;
        if (nranges) W->ranges[nranges - 1].hi = last_hi;
    }
    return r;
}

static int64_t walk_visit(Walk *W, int64_t gbase, int64_t glen, int64_t depth) {
    VocabTrie *T = W->T;
    for (int64_t g = 0; g < glen; g++) {
        int32_t t = W->gs[gbase + g];
        if (T->tptr[t + 1] > T->tptr[t]) {
            int64_t r = walk_key(W, gbase, glen, depth);
            if (r < 0) return r;
            break;
        }
    }
    /* D: the group's configuration set where the walk has it (its key was walked, within budget) */
    int64_t D = W->atom_bytes && W->valid > depth ? W->path[depth] : -1;
    int32_t at = -1; /* D's loop/exit slot, looked up at the group's first inner node */
    int64_t cbase = W->gtop;
    for (int64_t g = 0; g < glen; g++) {
        int32_t t = W->gs[gbase + g];
        if (T->cptr[t + 1] == T->cptr[t]) continue;
        if (D >= 0) {
            if (at < 0 && D != W_EMPTY && (at = walk_loop_slot(W, D)) < 0) return at;
            if (walk_skips(W, D, at, t)) {
                walk_take(W, T->tptr[t + 1], T->tptr[T->send[t]], D);
                continue;
            }
            if (D != W_EMPTY) {
                int scanned = walk_scan(W, D, t);
                if (scanned < 0) return scanned;
                if (scanned) continue;
            }
        }
        int32_t c0 = T->cptr[t], c1 = T->cptr[t + 1];
        if (W->gtop + (c1 - c0) > W->gcap) { /* room for every kid */
            int64_t c = W->gcap, c2 = W->gcap2;
            if (grow((void **)&W->gs, &c, W->gtop + (c1 - c0), sizeof(int32_t)) < 0) return E_NOMEM;
            if (grow((void **)&W->ga, &c2, W->gtop + (c1 - c0), 1) < 0) return E_NOMEM;
            W->gcap = c < c2 ? c : c2;
            W->gcap2 = c2;
        }
        int32_t *gs = W->gs + W->gtop;
        uint8_t *ga = W->ga + W->gtop;
        const int32_t *ckid = T->ckid + c0;
        const uint8_t *cbyte = T->cbyte + c0;
        int32_t pushed = 0;
        for (int32_t c = 0; c < c1 - c0; c++) {
            int32_t kid = ckid[c];
            /* A kid on a byte that loops D, with only such bytes below it: its whole subtree has D
             * (the kid's own tokens too), found without visiting it, whether or not the kid ends a
             * token (a kid without tokens has no D of its own in the walk) */
            if (D > W_EMPTY && walk_byte_loops(W, D, at, cbyte[c]) && walk_skips(W, D, at, kid)) {
                walk_take(W, T->tptr[kid], T->tptr[T->send[kid]], D);
                continue;
            }
            /* the kid's rows are read when its group is visited: fetch them now (the walk's misses) */
            __builtin_prefetch(T->below + 4 * (int64_t)kid);
            __builtin_prefetch(T->tptr + kid);
            __builtin_prefetch(T->cptr + kid);
            gs[pushed] = kid;
            ga[pushed++] = W->atom_of[cbyte[c]];
        }
        W->gtop += pushed;
    }
    if (walk_sort(W, cbase, W->gtop) < 0) return E_NOMEM;
    int64_t i = cbase, end = W->gtop;
    while (i < end) {
        uint8_t a = W->ga[i];
        int64_t j = i + 1;
        while (j < end && W->ga[j] == a) j++;
        if (W->valid > depth + 1) W->valid = depth + 1;
        W->atoms[depth] = a;
        int64_t r = walk_visit(W, i, j - i, depth + 1);
        if (r < 0) return r;
        i = j;
    }
    W->gtop = cbase;
    return 0;
}

/* Every token's node as the vocabulary alone gives it: the empty set (a dead token) for a trie token,
 * -1 for the others (not in the trie). Before the walk (or, lazy, where the ranges are given up); the
 * walk then writes its live tokens over it (walk_write, which marks them in `assigned`), so no entry is
 * read back or written twice in a branchy pass after it. Lazy, a walk that keeps its ranges never
 * writes node_of at all: a small grammar's 1 MB with Llama-3, ~0.13 ms of its ~0.3 ms classing. */
static void walk_prefill(Walk *W) {
    const VocabTrie *T = W->T;
    int64_t *restrict node_of = W->node_of;
    const uint8_t *restrict eligible = T->eligible_of;
    for (int64_t t = 0; t < T->ntok; t++) node_of[t] = (int64_t)(eligible[t] != 0) - 1; /* W_EMPTY (0) or -1 */
}

/* After the walk: the fallback tokens it did not write get -1 (where node_of is written), and the
 * tokens left at the empty set must be the ones it skipped as dead (eligible, not written, not
 * fallbacks), or a token was left out.
 * The fallback array is read 8 bytes at a time (almost all zero); the written ones are counted from
 * `assigned`. */
static int walk_dead_check(Walk *W) {
    const VocabTrie *T = W->T;
    const int64_t ntok = T->ntok;
    const uint8_t *fallback = W->fallback, *eligible = T->eligible_of;
    const uint64_t *assigned = W->assigned;
    int64_t written = 0, fallen = 0;
    for (int64_t w = 0; w <= ntok >> 6; w++) written += __builtin_popcountll(assigned[w]);
    for (int64_t base = 0; base < ntok; base += 8) {
        uint64_t eight = 0;
        int64_t n = ntok - base < 8 ? ntok - base : 8;
        if (n == 8)
            memcpy(&eight, fallback + base, 8);
        else
            memcpy(&eight, fallback + base, (size_t)n);
        if (!eight) continue;
        for (int64_t t = base; t < base + n; t++) {
            if (!fallback[t] || !eligible[t] || (assigned[t >> 6] >> (t & 63)) & 1) continue;
            if (!W->lazy_nodes) W->node_of[t] = -1;
            fallen++;
        }
    }
    int64_t dead = T->eligible - written - fallen;
    if (dead != W->dead_skipped) {
        PyErr_Format(PyExc_RuntimeError, "classify: %lld tokens left without a node, %lld skipped as dead",
                     (long long)dead, (long long)W->dead_skipped);
        return -1;
    }
    W->fallback_tokens = fallen;
    return 0;
}

/* The walk from the trie's root (classify and classify_steps): (keys, fallback_keys, status,
 * skipped_tokens, scanned_tokens: those of walk_scan, 0 with the Python step, fallback_tokens: the
 * tokens of the fallback keys (0 where the walk did not finish), ranges: the walk's Ranges as bytes
 * for assemble, or None where it gave them up or did not finish). */
static PyObject *run_classify(Words *S, PyObject *pystep, VocabTrie *T, const uint8_t *atom_of, long long initial,
                              long long budget, long long max_nodes, Py_buffer *node_of, Py_buffer *fallback,
                              PyObject *progress, PyObject *cancel, int lazy) {
    PyObject *result = NULL;
    Walk W;
    memset(&W, 0, sizeof(W));
    W.S = S;
    W.pystep = pystep;
    W.T = T;
    W.atom_of = atom_of;
    W.budget = budget;
    W.max_nodes = max_nodes;
    W.node_of = node_of->buf;
    W.fallback = fallback->buf;
    W.progress = progress;
    W.cancel = cancel;
    W.path = malloc((size_t)(T->maxdepth + 1) * sizeof(int32_t));
    W.atoms = malloc((size_t)(T->maxdepth + 1));
    W.assigned = calloc((size_t)(T->ntok / 64 + 1), sizeof(uint64_t));
    if (!W.path || !W.atoms || !W.assigned) {
        PyErr_NoMemory();
        goto done;
    }
    if (S) { /* the skip reads the compiled store's step memo (not classify_steps' Python one) */
        W.atom_bytes = calloc((size_t)S->natoms * 4, sizeof(uint64_t));
        if (!W.atom_bytes) {
            PyErr_NoMemory();
            goto done;
        }
        for (int b = 0; b < 256; b++) W.atom_bytes[4 * (int64_t)atom_of[b] + (b >> 6)] |= 1ULL << (b & 63);
    }
    W.lazy_nodes = lazy;
    if (!lazy) walk_prefill(&W);
    W.path[0] = (int32_t)initial;
    W.valid = 1;
    int64_t r = walk_push(&W, 0, 0);
    if (r == 0) r = walk_visit(&W, 0, 1, 0);
    if (S) S->limit = NO_LIMIT;
    if (r == E_LIMIT) {
        PyObject *key = PyBytes_FromStringAndSize((const char *)W.atoms, (Py_ssize_t)W.limit_depth);
        if (key) result = Py_BuildValue("LL(sNL)LLiO", (long long)W.keys, (long long)W.fallback_keys, "limit", key,
                                        (long long)W.limit_node, (long long)W.skipped_tokens, (long long)W.scanned_tokens, 0, Py_None);
    } else if (r == E_CANCEL) {
        result = Py_BuildValue("LLsLLiO", (long long)W.keys, (long long)W.fallback_keys, "cancelled",
                               (long long)W.skipped_tokens, (long long)W.scanned_tokens, 0, Py_None);
    } else if (r < 0) {
        if (S && r != E_PYTHON) raise_code(S, r);
        else if (r == E_NOMEM) PyErr_NoMemory();
    } else if (walk_dead_check(&W) == 0) {
        PyObject *ranges = W.ranges_off ? Py_NewRef(Py_None)
                                        : PyBytes_FromStringAndSize((const char *)W.ranges,
                                                                    (Py_ssize_t)(W.nranges * (int64_t)sizeof(Range)));
        if (ranges)
            result = Py_BuildValue("LLOLLLN", (long long)W.keys, (long long)W.fallback_keys, Py_None,
                                   (long long)W.skipped_tokens, (long long)W.scanned_tokens,
                                   (long long)W.fallback_tokens, ranges);
    }
    if (!result && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "classify: the walk failed");
done:
    free(W.path);
    free(W.atoms);
    free(W.assigned);
    free(W.gs);
    free(W.ga);
    free(W.sort_tmp);
    free(W.sort_tmpa);
    memo_free(&W.loops_at);
    memo_free(&W.scan_slot);
    free(W.scan_next);
    free(W.scan_at);
    free(W.loop);
    free(W.exit);
    free(W.atom_bytes);
    free(W.ranges);
    return result;
}

static int classify_buffers(VocabTrie *T, Py_buffer *atom_table, Py_buffer *node_of, Py_buffer *fallback,
                            int64_t natoms) {
    if (atom_table->len != 256 || node_of->len != T->ntok * 8 || fallback->len != T->ntok) {
        PyErr_SetString(PyExc_ValueError, "classify: atom table, node_of or fallback do not fit the vocabulary");
        return -1;
    }
    for (int b = 0; b < 256; b++)
        if (((const uint8_t *)atom_table->buf)[b] >= natoms) {
            PyErr_SetString(PyExc_ValueError, "classify: the atom table names a byte class the grammar lacks");
            return -1;
        }
    return 0;
}

/* classify(trie, atom_table, initial, budget, max_nodes, node_of, fallback, progress, cancel, lazy=False)
 *   -> (keys, fallback_keys, status, skipped_tokens, scanned_tokens, fallback_tokens, ranges)
 * node_of: writable int64[V], every entry written once the walk ends (-1 for the tokens not in the trie
 * and those in a fallback, the empty set for dead ones; see walk_prefill), except with `lazy` where the
 * walk kept its ranges (ranges not None): node_of is not written then, the ranges and the vocabulary
 * say every token's node (assemble reads them; token_nodes writes the array). fallback: writable uint8[V]
 * (set to 1 for the tokens of a key past its budget). status: None, "cancelled", or ("limit", key
 * atoms as bytes, node) when the run's cap was passed (classing._walk's ClassingLimitError). */
static PyObject *words_classify(Words *S, PyObject *args) {
    VocabTrie *T;
    Py_buffer atom_table, node_of, fallback;
    long long initial, budget, max_nodes;
    PyObject *progress, *cancel, *result = NULL;
    int lazy = 0;
    if (!PyArg_ParseTuple(args, "O!y*LLLw*w*OO|p", &VocabTrieType, &T, &atom_table, &initial, &budget, &max_nodes,
                          &node_of, &fallback, &progress, &cancel, &lazy))
        return NULL;
    if (need_grammar(S) == 0 && check_node(S, initial) == 0 &&
        classify_buffers(T, &atom_table, &node_of, &fallback, S->natoms) == 0)
        result = run_classify(S, NULL, T, atom_table.buf, initial, budget, max_nodes, &node_of, &fallback, progress,
                              cancel, lazy);
    PyBuffer_Release(&atom_table);
    PyBuffer_Release(&node_of);
    PyBuffer_Release(&fallback);
    return result;
}

/* classify_steps(trie, atom_table, num_atoms, initial, node_of, fallback, progress, cancel, step)
 *   -> (keys, fallback_keys, status, skipped_tokens, scanned_tokens, fallback_tokens, ranges): classify with the steps taken by step(node, atom, fresh) (see
 * walk_key_py; budgets are the callable's), for a displacer the compiled store does not run. */
static PyObject *k_classify_steps(PyObject *self, PyObject *args) {
    (void)self;
    VocabTrie *T;
    Py_buffer atom_table, node_of, fallback;
    long long natoms, initial;
    PyObject *progress, *cancel, *step, *result = NULL;
    if (!PyArg_ParseTuple(args, "O!y*LLw*w*OOO", &VocabTrieType, &T, &atom_table, &natoms, &initial, &node_of,
                          &fallback, &progress, &cancel, &step))
        return NULL;
    if (!PyCallable_Check(step)) {
        PyErr_SetString(PyExc_TypeError, "classify_steps: step must be callable");
    } else if (initial < 0 || initial > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "classify_steps: the initial node is out of range");
    } else if (classify_buffers(T, &atom_table, &node_of, &fallback, natoms) == 0) {
        result = run_classify(NULL, step, T, atom_table.buf, initial, 0, 0, &node_of, &fallback, progress, cancel, 0);
    }
    PyBuffer_Release(&atom_table);
    PyBuffer_Release(&node_of);
    PyBuffer_Release(&fallback);
    return result;
}

/* assemble(trie, kinds, node_of, fallback, class_of, normal, stop, nodes=-1, ranges=None) -> (reps int32 bytes,
 * kinds uint8 bytes, dead, blocked, rep_nodes int64 bytes, ids, classes): classing._assemble over arrays (with classify's
 * ranges and the node count, from those tokens alone, node_of not read: assemble_ranges). BLOCKED first
 * (special and empty tokens, dead ones: node_of 0), STOP next, then one class per displacement node (a
 * fallback token alone), numbered by representative id; a representative is the shortest member, ties
 * to the lowest id; the BLOCKED class's is its shortest dead token when it has one. rep_nodes: each
 * representative's node (what node_of holds for it). class_of: writable int32[V], or None: the short way
 * alone, which then writes no map (None returned where it does not apply: give a map). ids, classes: the
 * short way's ids outside class 0 (BLOCKED there), ascending, and their classes, int32 bytes (the whole
 * map: every other id is class 0, TokenClasses.from_sparse); None the long way. */
static int cmp_int32(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* assemble's short way, from the walk's ranges: only the tokens with a live node or a fallback are
 * read; every other token's class is known from the vocabulary (special, empty and dead tokens
 * BLOCKED, class 0; STOP tokens class 1), so the ~128k dead tokens of a small grammar cost one
 * memset, not a pass reading five arrays per token (0.17 ms of a one-word schema's ~0.4 ms classing
 * with Llama-3). The same classes and representatives as the long way. NULL with no error set where
 * it does not apply (no BLOCKED class, where STOP would be class 0): the caller takes the long way. */
static int cmp_u64_keys(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static PyObject *assemble_ranges(VocabTrie *T, const uint8_t *fb, int32_t *out, const Range *rs, int64_t nr,
                                 int64_t top) {
    int64_t live = 0, fallbacks = 0;
    for (int64_t i = 0; i < nr; i++) {
        if (rs[i].lo < 0 || rs[i].hi < rs[i].lo || rs[i].hi > T->eligible || rs[i].node > top ||
            (rs[i].node <= W_EMPTY && rs[i].node != -1)) {
            PyErr_SetString(PyExc_ValueError, "assemble: the walk's ranges do not fit this trie and store");
            return NULL;
        }
        if (rs[i].node < 0)
            fallbacks += rs[i].hi - rs[i].lo;
        else
            live += rs[i].hi - rs[i].lo;
    }
    int64_t dead = T->eligible - live - fallbacks, blocked = T->nfixed_blocked + dead;
    if (dead < 0) {
        PyErr_SetString(PyExc_ValueError, "assemble: the walk's ranges hold more tokens than the trie");
        return NULL;
    }
    if (blocked == 0) return NULL;
    PyObject *result = NULL, *reps_b = NULL, *kinds_b = NULL, *nodes_b = NULL, *ids_b = NULL, *classes_b = NULL;
    int64_t n_in = live + fallbacks, nl = n_in + T->nstops;
    int32_t *group_of_node = malloc((size_t)(top + 1) * sizeof(int32_t)), *rep = NULL, *cls = NULL, *by_rep = NULL;
    int32_t *tg = malloc((size_t)(n_in ? n_in : 1) * sizeof(int32_t)); /* each range token's group, in range order */
    uint64_t *pairs = malloc((size_t)(nl ? nl : 1) * sizeof(uint64_t));
    int64_t *group_node = NULL, groupcap = 0;
    uint64_t *in_range = NULL;
    if (!group_of_node || !tg || !pairs) goto nomem;
    memset(group_of_node, 0xFF, (size_t)(top + 1) * sizeof(int32_t));
    const int32_t *ttok = T->ttok, *len = T->len;
    int64_t ng = 0, repcap = 0, at = 0;
    for (int64_t i = 0; i < nr; i++) {
        int64_t node = rs[i].node;
        int32_t g = node >= 0 ? group_of_node[node] : -1;
        for (int32_t k = rs[i].lo; k < rs[i].hi; k++) {
            int32_t t = ttok[k];
            if (g < 0 || node < 0) { /* a node's first token, or a fallback token: a group of its own */
                if (ng >= repcap && grow((void **)&rep, &repcap, ng + 1, sizeof(int32_t)) < 0) goto nomem;
                if (ng >= groupcap && grow((void **)&group_node, &groupcap, ng + 1, sizeof(int64_t)) < 0) goto nomem;
                g = (int32_t)ng++;
                rep[g] = t;
                group_node[g] = node;
                if (node >= 0) group_of_node[node] = g;
            } else if (len[t] < len[rep[g]] || (len[t] == len[rep[g]] && t < rep[g])) {
                rep[g] = t; /* the shortest member, ties to the lowest id, as the pass in id order finds it */
            }
            tg[at++] = g;
        }
    }
    /* The dead representative: the shortest trie token in no range (neither live nor a fallback), the
     * first of equals; read from the ranges, not node_of, which a lazy walk did not write. */
    int64_t dead_rep = -1;
    if (dead) {
        in_range = calloc((size_t)(T->ntok / 64 + 1), sizeof(uint64_t));
        if (!in_range) goto nomem;
        for (int64_t i = 0; i < nr; i++)
            for (int32_t k = rs[i].lo; k < rs[i].hi; k++) in_range[ttok[k] >> 6] |= (uint64_t)1 << (ttok[k] & 63);
    }
    for (int64_t i = 0; dead && i < T->eligible; i++) {
        int32_t t = T->by_length[i];
        if (!((in_range[t >> 6] >> (t & 63)) & 1) && !fb[t]) {
            dead_rep = t;
            break;
        }
    }
    if (dead && dead_rep < 0) {
        PyErr_SetString(PyExc_RuntimeError, "assemble: the dead tokens the ranges leave are all fallbacks");
        goto done;
    }
    int64_t first = 1 + (T->nstops > 0), k_total = first + ng;
    cls = malloc((size_t)(ng ? ng : 1) * sizeof(int32_t));
    by_rep = malloc((size_t)(ng ? ng : 1) * sizeof(int64_t));
    reps_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 4));
    kinds_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)k_total);
    nodes_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 8));
    ids_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(nl * 4));
    classes_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(nl * 4));
    if (!cls || !by_rep || !reps_b || !kinds_b || !nodes_b || !ids_b || !classes_b) goto nomem;
    int32_t *reps = (int32_t *)PyBytes_AS_STRING(reps_b);
    uint8_t *kout = (uint8_t *)PyBytes_AS_STRING(kinds_b);
    int64_t *rep_nodes = (int64_t *)PyBytes_AS_STRING(nodes_b);
    reps[0] = (int32_t)(dead_rep >= 0 ? dead_rep : T->fixed_blocked_min);
    kout[0] = 2; /* ClassKind.BLOCKED */
    rep_nodes[0] = dead_rep >= 0 ? W_EMPTY : -1;
    if (T->nstops) {
        reps[1] = (int32_t)T->stop_rep;
        kout[1] = 1; /* ClassKind.STOP */
        rep_nodes[1] = -1;
    }
    /* NORMAL classes in the order of their representatives (group g's class: cls[g]) */
    uint64_t *order = (uint64_t *)by_rep;
    for (int64_t g = 0; g < ng; g++) order[g] = ((uint64_t)(uint32_t)rep[g] << 32) | (uint32_t)g;
    qsort(order, (size_t)ng, sizeof(uint64_t), cmp_u64_keys);
    for (int64_t i = 0; i < ng; i++) {
        int32_t g = (int32_t)(order[i] & 0xFFFFFFFFu);
        cls[g] = (int32_t)(first + i);
        reps[first + i] = rep[g];
        kout[first + i] = 0; /* ClassKind.NORMAL */
        rep_nodes[first + i] = group_node[g];
    }
    /* the ids outside class 0 (BLOCKED) with their classes, ascending by id: the whole map with class 0
     * for every other id (written into `out` too where the caller gave one) */
    at = 0;
    int64_t np_ = 0;
    for (int64_t i = 0; i < nr; i++)
        for (int32_t k = rs[i].lo; k < rs[i].hi; k++) pairs[np_++] = ((uint64_t)(uint32_t)ttok[k] << 32) | (uint32_t)cls[tg[at++]];
    for (int64_t i = 0; i < T->nstops; i++) pairs[np_++] = ((uint64_t)(uint32_t)T->stop_ids[i] << 32) | 1u;
    qsort(pairs, (size_t)nl, sizeof(uint64_t), cmp_u64_keys);
    int32_t *ids = (int32_t *)PyBytes_AS_STRING(ids_b), *classes = (int32_t *)PyBytes_AS_STRING(classes_b);
    for (int64_t i = 0; i < nl; i++) {
        ids[i] = (int32_t)(pairs[i] >> 32);
        classes[i] = (int32_t)(pairs[i] & 0xFFFFFFFFu);
    }
    if (out) {
        memset(out, 0, (size_t)T->ntok * sizeof(int32_t));
        for (int64_t i = 0; i < nl; i++) out[ids[i]] = classes[i];
    }
    result = Py_BuildValue("NNLLNNN", reps_b, kinds_b, (long long)dead, (long long)blocked, nodes_b, ids_b, classes_b);
    reps_b = kinds_b = nodes_b = ids_b = classes_b = NULL;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    Py_XDECREF(reps_b);
    Py_XDECREF(kinds_b);
    Py_XDECREF(nodes_b);
    Py_XDECREF(ids_b);
    Py_XDECREF(classes_b);
    free(group_node);
    free(in_range);
    free(group_of_node);
    free(tg);
    free(pairs);
    free(rep);
    free(cls);
    free(by_rep);
    return result;
}

static PyObject *k_assemble(PyObject *self, PyObject *args) {
    (void)self;
    VocabTrie *T;
    Py_buffer kinds, node_of, fallback, class_of = {0};
    int normal, stop;
    long long nodes = -1;
    PyObject *ranges = Py_None, *class_of_obj;
    if (!PyArg_ParseTuple(args, "O!y*y*y*Oii|LO", &VocabTrieType, &T, &kinds, &node_of, &fallback, &class_of_obj,
                          &normal, &stop, &nodes, &ranges))
        return NULL;
    PyObject *result = NULL;
    int64_t v = T->ntok;
    int32_t *group = NULL, *rep = NULL, *cls = NULL, *group_of_node = NULL;
    int sparse = class_of_obj == Py_None; /* no map: the short way's ids and classes alone, or None */
    if (!sparse && PyObject_GetBuffer(class_of_obj, &class_of, PyBUF_WRITABLE) < 0) goto done;
    if (kinds.len != v || node_of.len != v * 8 || fallback.len != v || (!sparse && class_of.len != v * 4)) {
        PyErr_SetString(PyExc_ValueError, "assemble: arrays do not fit the vocabulary");
        goto done;
    }
    const uint8_t *kd = kinds.buf, *fb = fallback.buf;
    const int64_t *no = node_of.buf;
    /* the walk's ranges, for this trie's own kinds: the short way (assemble_ranges) */
    if (ranges != Py_None && nodes >= 1 && normal == T->normal && stop == T->stop &&
        memcmp(kd, T->kinds, (size_t)v) == 0) {
        if (!PyBytes_Check(ranges) || PyBytes_GET_SIZE(ranges) % (Py_ssize_t)sizeof(Range)) {
            PyErr_SetString(PyExc_TypeError, "assemble: ranges must be the bytes classify returned");
            goto done;
        }
        result = assemble_ranges(T, fb, sparse ? NULL : class_of.buf, (const Range *)PyBytes_AS_STRING(ranges),
                                 PyBytes_GET_SIZE(ranges) / (Py_ssize_t)sizeof(Range), nodes - 1);
        if (result || PyErr_Occurred()) goto done;
    }
    if (sparse) { /* the short way does not apply: the caller gives a map and takes the long way */
        result = Py_NewRef(Py_None);
        goto done;
    }
    const int32_t *len = T->len;
    int32_t *out = class_of.buf;
    /* each token's group is kept in the output row until the classes are numbered (no scratch array
     * of the vocabulary's size); representatives grow with the groups */
    group = out;
    int64_t repcap = 0;
    /* node ids are a store's dense ids: a table from node to group (a hash per token cost 0.4 ms of
     * a JSON Schema's ~1 ms numbering with Llama-3) */
    int64_t top = nodes - 1; /* `nodes`: the store's node count, when the caller knows it (one pass less) */
    if (nodes < 1) {
        top = 0;
        for (int64_t t = 0; t < v; t++)
            if (no[t] > top) top = no[t];
    }
    if (top >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "assemble: a displacement node id past int32");
        goto done;
    }
    group_of_node = malloc((size_t)(top + 1) * sizeof(int32_t));
    if (!group_of_node) goto nomem;
    memset(group_of_node, 0xFF, (size_t)(top + 1) * sizeof(int32_t));
    int64_t ng = 0, blocked = 0, stops = 0, dead = 0;
    int64_t blocked_min = -1, dead_rep = -1, stop_rep = -1;
    /* the shortest dead and stop tokens (the first of equals) with their lengths in locals: a
     * comparison through len[rep] on every dead token kept rep in memory, a dependency from one
     * token to the next (0.32 ms of a ~0.75 ms classing of a one-word schema with Llama-3) */
    int32_t dead_len = INT32_MAX, stop_len = INT32_MAX;
    for (int64_t t = 0; t < v; t++) {
        uint8_t kt = kd[t];
        int32_t lt = len[t];
        if (kt == normal && lt != 0 && !fb[t]) {
            int64_t nt = no[t];
            if (nt == W_EMPTY) {
                group[t] = -1;
                blocked++;
                if (blocked_min < 0) blocked_min = t;
                dead++;
                if (lt < dead_len) {
                    dead_len = lt;
                    dead_rep = t;
                }
                continue;
            }
            if (nt < 0 || nt > top) {
                PyErr_Format(PyExc_ValueError, "assemble: token %lld has no displacement node", (long long)t);
                goto done;
            }
            int32_t g = group_of_node[nt];
            if (g < 0) {
                if (ng >= repcap && grow((void **)&rep, &repcap, ng + 1, sizeof(int32_t)) < 0) goto nomem;
                g = (int32_t)ng++;
                rep[g] = (int32_t)t;
                group_of_node[nt] = g;
            } else if (lt < len[rep[g]]) {
                rep[g] = (int32_t)t;
            }
            group[t] = g;
        } else if (kt == stop) {
            stops++;
            if (lt < stop_len) {
                stop_len = lt;
                stop_rep = t;
            }
            group[t] = -2;
        } else if (kt != normal || lt == 0) {
            group[t] = -1;
            blocked++;
            if (blocked_min < 0) blocked_min = t;
        } else { /* a fallback token: a class of its own */
            if (ng >= repcap && grow((void **)&rep, &repcap, ng + 1, sizeof(int32_t)) < 0) goto nomem;
            rep[ng] = (int32_t)t;
            group[t] = (int32_t)ng++;
        }
    }
    int64_t first = (blocked > 0) + (stops > 0), k_total = first + ng;
    cls = malloc((size_t)(ng ? ng : 1) * sizeof(int32_t));
    PyObject *reps_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 4));
    PyObject *kinds_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)k_total);
    if (!cls || !reps_b || !kinds_b) {
        Py_XDECREF(reps_b);
        Py_XDECREF(kinds_b);
        goto nomem;
    }
    int32_t *reps = (int32_t *)PyBytes_AS_STRING(reps_b);
    uint8_t *kout = (uint8_t *)PyBytes_AS_STRING(kinds_b);
    int64_t k = 0;
    if (blocked) {
        reps[k] = (int32_t)(dead_rep >= 0 ? dead_rep : blocked_min);
        kout[k++] = 2; /* ClassKind.BLOCKED */
    }
    if (stops) {
        reps[k] = (int32_t)stop_rep;
        kout[k++] = 1; /* ClassKind.STOP */
    }
    /* NORMAL classes in the order of their representatives: the groups sorted by rep (a pass over the
     * vocabulary looking for reps cost a third of the numbering) */
    int32_t *by_rep = malloc((size_t)(ng ? ng : 1) * sizeof(int32_t));
    if (!by_rep) {
        Py_DECREF(reps_b);
        Py_DECREF(kinds_b);
        goto nomem;
    }
    for (int64_t g = 0; g < ng; g++) by_rep[g] = rep[g];
    qsort(by_rep, (size_t)ng, sizeof(int32_t), cmp_int32);
    for (int64_t i = 0; i < ng; i++) {
        int32_t t = by_rep[i];
        cls[group[t]] = (int32_t)k;
        reps[k] = t;
        kout[k++] = 0; /* ClassKind.NORMAL */
    }
    free(by_rep);
    for (int64_t t = 0; t < v; t++) {
        int32_t g = group[t];
        out[t] = g >= 0 ? cls[g] : g == -2 ? (int32_t)(blocked > 0) : 0;
    }
    PyObject *nodes_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(k_total * 8));
    if (!nodes_b) {
        Py_DECREF(reps_b);
        Py_DECREF(kinds_b);
        goto done;
    }
    for (int64_t i = 0; i < k_total; i++) ((int64_t *)PyBytes_AS_STRING(nodes_b))[i] = no[reps[i]];
    result = Py_BuildValue("NNLLNOO", reps_b, kinds_b, (long long)dead, (long long)blocked, nodes_b, Py_None, Py_None);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(rep);
    free(cls);
    free(group_of_node);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&node_of);
    PyBuffer_Release(&fallback);
    if (class_of.obj) PyBuffer_Release(&class_of);
    return result;
}

/* token_nodes(trie, class_of int32[V], class_kind uint8[K], rep_nodes int64[K], out int64[V]): every token's
 * displacement node from its class, as classify writes node_of, for a lazy walk that kept its ranges (and
 * so did not write it): a NORMAL or STOP class's tokens share their representative's node (one class per
 * node), the BLOCKED class holds the dead trie tokens (the empty set) and the tokens outside the trie (-1). */
static PyObject *k_token_nodes(PyObject *self, PyObject *args) {
    (void)self;
    VocabTrie *T;
    Py_buffer co, ck, rn, out;
    if (!PyArg_ParseTuple(args, "O!y*y*y*w*", &VocabTrieType, &T, &co, &ck, &rn, &out)) return NULL;
    PyObject *result = NULL;
    int64_t v = T->ntok, k = ck.len;
    if (co.len != v * 4 || out.len != v * 8 || rn.len != k * 8) {
        PyErr_SetString(PyExc_ValueError, "token_nodes: arrays do not fit the vocabulary and the classes");
        goto done;
    }
    const int32_t *c = co.buf;
    const uint8_t *kind = ck.buf, *eligible = T->eligible_of;
    const int64_t *rep_nodes = rn.buf;
    int64_t *o = out.buf;
    for (int64_t t = 0; t < v; t++) {
        if ((uint32_t)c[t] >= (uint64_t)k) {
            PyErr_SetString(PyExc_ValueError, "token_nodes: class_of has ids outside [0, num_classes)");
            goto done;
        }
        o[t] = kind[c[t]] == 2 ? (int64_t)(eligible[t] != 0) - 1 : rep_nodes[c[t]]; /* ClassKind.BLOCKED */
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&co);
    PyBuffer_Release(&ck);
    PyBuffer_Release(&rn);
    PyBuffer_Release(&out);
    return result;
}

/* ---- the sigma_in index (cfgzip_lab.native.index.build_index, the reference) ----
 *
 * Per class: the set of SEP-rest nodes reachable from its displacement node over output symbols (each
 * rest node's words are reverse(sigma_in)), memoised per node over the whole vocabulary; each listed
 * rest's words once; the distinct sigma_in sorted, inserted into a trie in that order (so numbering is
 * a function of the grammar and classes, not of store ids); per trie node the classes whose rests hold
 * its sigma_in. Output: the arrays SigmaInIndex.to_arrays gives. */
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

static int cmp_i64(const void *x, const void *y) {
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
static PyObject *words_sigma_index(Words *S, PyObject *args) {
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

/* ---- a normal form's nodes as arrays, and a store read from them (cfgzip_lab.grammar.gnf_arrays) ----
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
static PyObject *words_subgraph(Words *S, PyObject *args) {
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

static PyObject *words_load_arrays(Words *S, PyObject *args) {
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

/* ---- types and module glue ---- */
#include "_gnf_passes.h" /* the normal form's passes (front end) */

static PyMethodDef words_methods[] = {
    GNF_PASS_METHODS
    {"grammar", (PyCFunction)words_grammar, METH_VARARGS, "set the GNF (table, num_atoms, start); the initial node"},
    {"below_sets", (PyCFunction)words_below_sets, METH_O, "the stack adjacency as stack_below returns it"},
    {"make", (PyCFunction)words_make, METH_VARARGS, "intern (accepts, edges)"},
    {"union", (PyCFunction)words_union, METH_VARARGS, "union of two node sets"},
    {"union_many", (PyCFunction)words_union_many, METH_O, "union_many(nodes): the union of them all at once"},
    {"union_concats", (PyCFunction)words_union_concats, METH_O, "union_concats(pairs): the union of every a . b"},
    {"concat", (PyCFunction)words_concat, METH_VARARGS, "concatenation of two node sets"},
    {"step", (PyCFunction)words_step, METH_VARARGS, "Displacer.step(node, atom)"},
    {"run", (PyCFunction)words_run, METH_VARARGS, "run(node, atoms, budget=-1) -> (node, created)"},
    {"edges", (PyCFunction)words_edges, METH_O, "edges of a node as ((symbol, child), ...)"},
    {"accepts", (PyCFunction)words_accepts, METH_O, "whether a node holds the empty word"},
    {"child", (PyCFunction)words_child, METH_VARARGS, "child(node, symbol), EMPTY when absent"},
    {"reachable", (PyCFunction)words_reachable, METH_O, "reachable(roots): every node below them (WordStore.reachable)"},
    {"count", (PyCFunction)words_count, METH_O, "count(node): its words, None past 64 bits (WordStore.count)"},
    {"classify", (PyCFunction)words_classify, METH_VARARGS, "classing's vocabulary walk (see _words.c)"},
    {"trie_mask", (PyCFunction)words_trie_mask, METH_VARARGS, "trie_mask(trie, state, out): a state's class set"},
    {"sigma_index", (PyCFunction)words_sigma_index, METH_VARARGS, "the sigma_in index's arrays (see _words.c)"},
    {"stats", (PyCFunction)words_stats, METH_NOARGS, "sizes of the store and its memos"},
    {"subgraph", (PyCFunction)words_subgraph, METH_VARARGS, "the nodes below roots as arrays (see _words.c)"},
    {"load_arrays", (PyCFunction)words_load_arrays, METH_VARARGS, "a fresh store's nodes from arrays (see _words.c)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef words_getset[] = {
    {"created", (getter)words_get_created, NULL, "nodes interned so far (budgets read it)", NULL},
    {"limit", (getter)words_get_limit, (setter)words_set_limit, "past this many created nodes, the budget error",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods words_as_sequence = {
    .sq_length = (lenfunc)words_len,
    .sq_item = (ssizeargfunc)words_item,
};

static PyTypeObject WordsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cfgzip_lab.native._kernel.Words",
    .tp_basicsize = sizeof(Words),
    .tp_dealloc = (destructor)words_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Words(nodes, created=0, budget_exc=None): a compiled word store seeded with a WordStore's nodes",
    .tp_methods = words_methods,
    .tp_getset = words_getset,
    .tp_as_sequence = &words_as_sequence,
    .tp_init = (initproc)words_init,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef vtrie_methods[] = {
    {"info", (PyCFunction)vtrie_info, METH_NOARGS, "sizes of the trie"},
    {"same", (PyCFunction)vtrie_same, METH_VARARGS, "whether it was built from these tokens and kinds"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject VocabTrieType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cfgzip_lab.native._kernel.VocabTrie",
    .tp_basicsize = sizeof(VocabTrie),
    .tp_dealloc = (destructor)vtrie_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "VocabTrie(token_bytes, kinds, normal=0, stop=1): the NORMAL tokens' bytes as a trie",
    .tp_methods = vtrie_methods,
    .tp_init = (initproc)vtrie_init,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef module_functions[] = {
    {"assemble", k_assemble, METH_VARARGS, "classing._assemble over arrays (see _words.c)"},
    {"token_nodes", k_token_nodes, METH_VARARGS, "every token's node from its class (see _words.c)"},
    {"classify_steps", k_classify_steps, METH_VARARGS, "classify with a Python step (see _words.c)"},
    {NULL, NULL, 0, NULL},
};

int words_add_to_module(PyObject *m) {
    if (PyType_Ready(&WordsType) < 0 || PyType_Ready(&VocabTrieType) < 0 || PyType_Ready(&AdvancerType) < 0)
        return -1;
    Unsupported = PyErr_NewException("cfgzip_lab.native._kernel.Unsupported", PyExc_RuntimeError, NULL);
    if (!Unsupported) return -1;
    if (PyModule_AddObjectRef(m, "Unsupported", Unsupported) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Words", (PyObject *)&WordsType) < 0) return -1;
    if (PyModule_AddObjectRef(m, "VocabTrie", (PyObject *)&VocabTrieType) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Advancer", (PyObject *)&AdvancerType) < 0) return -1;
    if (PyModule_AddFunctions(m, module_functions) < 0) return -1;
    if (PyModule_AddIntConstant(m, "COUNTED_SYMBOL_BITS", WIDE_BITS) < 0) return -1; /* families in the store */
    return PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH);
}
