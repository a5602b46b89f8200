/* The compiled word store, shared by every part of the extension that walks it.
 *
 * (From _words.c:) The compiled word store and what walks it: interning, union, concat and their memos
 * (cfgzip_lab.grammar.words, words.c), the displacement step and stack adjacency
 * (cfgzip_lab.classes.displacement, displace.c), classing's walk of the vocabulary as a trie over byte
 * classes and the numbering of the classes (cfgzip_lab.classes.classing, classing.c, assemble.c), the
 * sigma_in index build (cfgzip_lab.native.index, sigma_index.c), the normal form's passes
 * (cfgzip_lab.grammar.gnf, gnf_passes.c) and the state step and trie mask of the native engine
 * (cfgzip_lab.native.walk, step.c, trie.c). The Python modules named are the reference;
 * cfgzip_lab.native.compiled wraps the store, and the tests compare the two node for node.
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
#ifndef CFGZIP_WORDS_H
#define CFGZIP_WORDS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
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
#define POLL_UNIONS 1024 /* Words.poll: asked every this many unions (a power of two) */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}


/* ---- memo tables: uint64 key -> int32 value, open addressing, linear probing ---- */
#define MEMO_FREE UINT64_MAX
typedef struct {
    uint64_t *keys;
    int32_t *vals;
    uint64_t mask;
    int64_t used;
} Memo;

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
/* A memo key of two node ids (both below 2^31). */
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
    /* While classing walks (classing.c): asked every POLL_UNIONS calls of w_union_n, a negative return
     * (E_CANCEL) stops the operation as E_BUDGET does. A step of a large grammar's walk can take seconds,
     * all of it in unions: the walk's own polls, between keys, came 5-9 s apart on aerleon. */
    int64_t (*poll)(void *);
    void *poll_arg;
    int64_t polls;
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
    /* the words of `below` rows (nb + 1 offsets) and of tops_bits rows (natoms + 1) that are not zero,
     * ascending: the step's backtrack ANDs a below row with an atom's tops over the shorter list only */
    int32_t *below_nzptr, *below_nz, *tops_nzptr, *tops_nz;
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
static inline int64_t below_key(const Words *S, int64_t sym) {
    if (sym >= 0 && sym < S->nt) return sym;
    if (sym >= FAMILY_BASE && sym < WIDE_IN && ((sym - FAMILY_BASE) >> 32) < S->nfam)
        return S->nt + ((sym - FAMILY_BASE) >> 32);
    return -1;
}


static inline int64_t n_edges(const Words *S, int64_t node) { return S->estart[node + 1] - S->estart[node]; }

/* cfgzip_lab._native.Unsupported: what this store does not do (recursion past MAX_DEPTH, a symbol kind it
 * does not know); the callers run the Python reference instead. Made by module.c. */
extern PyObject *Unsupported;
extern PyTypeObject WordsType;

/* Grow *buf (elements of elem bytes, *cap of them) to hold need; -1 without memory. */
int grow(void **buf, int64_t *cap, int64_t need, size_t elem);
int cmp_i64(const void *x, const void *y); /* qsort's order of int64 values */

/* words.c: memos, interning, set algebra (negative: an E_ code) */
void memo_free(Memo *m);
int memo_resize(Memo *m, uint64_t cap); /* -1 without memory */
int reserve(Words *S, int64_t need, int64_t edges);
int itab_resize(Words *S, uint64_t cap);
int64_t make_scratch(Words *S, int accepts, int64_t base);
int64_t w_union(Words *S, int64_t a, int64_t b, int depth);
int64_t w_concat(Words *S, int64_t a, int64_t b, int depth);
int64_t w_union_n(Words *S, int64_t obase, int depth);

/* The small hot steps of the set algebra, inline in every file that walks the store (words.c, displace.c,
 * gnf_passes.c, sigma_index.c, ...): one call each per edge or term otherwise. */
static inline int memo_put(Memo *m, uint64_t key, int32_t val) {
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

/* One more edge on the scratch stack of the node under construction; -1 without memory. */
static inline int push_edge(Words *S, int64_t sym, int64_t kid) {
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

/* The node {sym . kid} (one edge, not accepting). */
static inline int64_t make1(Words *S, int64_t sym, int64_t kid) {
    int64_t base = S->stop;
    if (push_edge(S, sym, kid) < 0) return E_NOMEM;
    return make_scratch(S, 0, base);
}

/* A term a . b of w_union_n packed on its operand stack (words.c), as a << 32 | b. */
#define TERM(a, b) (((uint64_t)(uint32_t)(a) << 32) | (uint32_t)(b))
#define TERM_A(t) ((int64_t)((t) >> 32))
#define TERM_B(t) ((int64_t)((t) & 0xFFFFFFFFu))
static inline int ostk_push(Words *S, int64_t a, int64_t b) {
    if (S->otop >= S->ocap && grow((void **)&S->ostk, &S->ocap, S->otop + 1, sizeof(uint64_t)) < 0) return -1;
    S->ostk[S->otop++] = TERM(a, b);
    return 0;
}

/* displace.c: the displacement step, stack adjacency and the grammar it reads */
int64_t w_step(Words *S, int64_t node, int64_t atom);
int need_grammar(Words *S);

/* store.c: the Python-facing side of the store */
PyObject *raise_code(Words *S, int64_t code); /* NULL with the exception for an E_ code set */
int check_node(Words *S, long long node);       /* -1 with IndexError where node is not a node */
PyObject *words_count(Words *S, PyObject *arg); /* count(node): its words, None past 64 bits */

#endif
