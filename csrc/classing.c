/* Classing: the vocabulary walked as a trie over byte classes (cfgzip_lab.classes.classing._walk, the
 * reference; the numbering of the classes is assemble.c).
 *
 * The byte trie is quotiented by the grammar's atom map on the fly: a "group" is the set of byte-trie
 * nodes whose byte strings map to one byte-class string; its children are the children of its nodes,
 * grouped by atom, visited in atom order. So groups with tokens come in exactly the order of the
 * sorted byte-class strings the Python walk (classing._walk) iterates, and each key's steps are the
 * ones _walk runs (from the longest valid prefix of the path, under a fresh per-key budget; after a
 * budget failure the path stays valid up to the failing step, which _walk re-runs from memo hits). */
#include "vocab_trie.h"

#include <time.h>

/* The scan cache (walk_scan_ranges, scan_apply): per vocabulary, what a scan of a subtree found, in terms
 * of the bytes below it and the scan's own labels for the sets it met, so that a later grammar's walk
 * reaching the same subtree reuses it where its step memo says the same (see scan_apply). */
typedef struct {
    int32_t lo, hi, label; /* the tokens ttok[lo:hi] take the set labelled `label` (SCAN_DEAD: the empty set) */
} ScanRun;
typedef struct {
    int32_t node, label; /* every byte below trie node `node` steps the set labelled `label` to itself */
} ScanJump;
typedef struct {
    int64_t f0, nf, j0, nj, r0, nr; /* its facts, jumps and runs in the cache's arrays */
} ScanEntry;
typedef struct ScanCache ScanCache;
struct ScanCache {
    int32_t *entry_of; /* per trie node: its entry, or -1 */
    uint8_t *seen;     /* per trie node: scanned once without an entry (recorded at the second scan) */
    ScanEntry *entries;
    uint32_t *facts; /* label << 16 | byte << 8 | label of the step: the step memo's transitions read */
    ScanJump *jumps;
    ScanRun *runs;
    int64_t nentries, entcap, nfacts, factcap, njumps, jumpcap, nruns, runcap;
    int64_t reused, refused; /* entries applied, and found not to hold (a step not in the memo, or another set) */
};
#define SCAN_DEAD 255
/* What the cache may hold, in facts, jumps and runs each (a median MaskBench schema records ~2k
 * entries; past it nothing more is kept) */
#define SCAN_CACHE_MAX (1 << 20)

void scan_cache_free(struct ScanCache *c) {
    if (!c) return;
    free(c->entry_of);
    free(c->seen);
    free(c->entries);
    free(c->facts);
    free(c->jumps);
    free(c->runs);
    free(c);
}

void scan_cache_info(const struct ScanCache *c, int64_t *kept, int64_t *reused, int64_t *refused, int64_t *bytes) {
    *bytes = c ? (int64_t)((c->nfacts * sizeof(uint32_t) + c->njumps * sizeof(ScanJump) + c->nruns * sizeof(ScanRun) +
                            c->nentries * sizeof(ScanEntry))) : 0;
    *kept = c ? c->nentries : 0;
    *reused = c ? c->reused : 0;
    *refused = c ? c->refused : 0;
}

typedef struct {
    Words *S;
    VocabTrie *T;
    const uint8_t *atom_of;
    int64_t budget, max_nodes;
    int32_t *path;
    int64_t valid;
    uint8_t *atoms;
    int64_t *node_of;
    uint64_t *assigned; /* bit t: the walk wrote node_of[t] over what walk_prefill wrote (lazy, with the
                         * ranges kept: the dead tokens of walk_assign alone; the ranges say the others) */
    uint8_t *fallback;
    int32_t *gs;
    uint8_t *ga;
    int64_t gtop, gcap, gcap2;
    int32_t *sort_tmp;
    uint8_t *sort_tmpa;
    int64_t tcap, tcap2;
    int64_t keys, fallback_keys, done_tokens;
    PyObject *progress, *cancel;
    double cancel_at; /* the clock (walk_clock) when cancel is next asked between the reports */
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
     * numbering's short way (assemble_ranges, assemble_dense). A typical schema's ~125k live Llama-3
     * tokens make 5-14k ranges (a subtree's tokens in preorder mostly share their set), so they are kept
     * however many tokens they hold; given up (ranges_off) past a quarter of the vocabulary in ranges
     * (runs of a token or two: Github_hard o84346 made 104k for ~125k tokens, and its numbering from
     * them took 1.3 ms where the pass over every token takes 0.45) or where memory runs out. A lazy walk
     * that keeps them writes nothing per token: writing node_of and the `assigned` bits token by token
     * (at random ids: ttok is in trie order) was ~0.35 ms of a median MaskBench schema's ~1.4 ms walk
     * from a warm step memo. */
    Range *ranges;
    int64_t nranges, rangecap, range_tokens;
    int ranges_off;
    /* scan_rec_*: the scan being recorded for the scan cache: each slot's label (-1: none yet), the
     * slots labelled (to clear), the (label, byte) pairs seen, and its facts, jumps and runs */
    int16_t rec_label[255];
    uint8_t rec_slots[255];
    int32_t rec_nslots, rec_nlabels;
    uint64_t *rec_seen; /* 4 words per label */
    uint32_t *rec_facts;
    ScanJump *rec_jumps;
    ScanRun *rec_runs;
    int64_t rec_nfacts, rec_factcap, rec_njumps, rec_jumpcap, rec_nruns, rec_runcap;
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

/* Between the reports (every 2048 keys, as _walk), cancel is also asked from inside the steps (Words.poll,
 * every POLL_UNIONS unions), at most every CANCEL_SECONDS: one key's steps can take seconds (aerleon's
 * host-name regex: the reports came 5-9 s apart, its build's deadline passed by as much). */
#define CANCEL_SECONDS 0.05

static double walk_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t walk_cancelled(Walk *W) {
    if (W->cancel == Py_None) return 0;
    double now = walk_clock();
    if (now < W->cancel_at) return 0;
    W->cancel_at = now + CANCEL_SECONDS;
    PyObject *r = PyObject_CallNoArgs(W->cancel);
    if (!r) return E_PYTHON;
    int stop = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (stop < 0) return E_PYTHON;
    return stop ? E_CANCEL : 0;
}

static int64_t walk_poll(void *W) { return walk_cancelled((Walk *)W); }

static void walk_prefill(Walk *W);

/* The tokens ttok[lo:hi], given `node` by the walk, marked written (walk_dead_check counts the marks) */
static void walk_mark(Walk *W, int32_t lo, int32_t hi, int64_t node) {
    const int32_t *ttok = W->T->ttok;
    for (int32_t k = lo; k < hi; k++) {
        int32_t t = ttok[k];
        W->node_of[t] = node;
        if (node >= 0) W->assigned[t >> 6] |= (uint64_t)1 << (t & 63); /* (fallback tokens are not marked) */
    }
}

/* The ranges given up (too many, or no memory for more): where node_of was left to them (lazy), it is written now
 * from what they hold and this range (and marked, as the walk marks what it writes), and by the walk
 * itself from here on. */
static void walk_ranges_off(Walk *W, int32_t lo, int32_t hi, int64_t node) {
    W->ranges_off = 1;
    if (!W->lazy_nodes) return;
    walk_prefill(W);
    for (int64_t i = 0; i < W->nranges; i++) walk_mark(W, W->ranges[i].lo, W->ranges[i].hi, W->ranges[i].node);
    walk_mark(W, lo, hi, node);
    W->lazy_nodes = 0;
}

static void walk_range(Walk *W, int32_t lo, int32_t hi, int64_t node) {
    if (W->ranges_off || hi <= lo) return;
    W->range_tokens += hi - lo;
    Range *last = W->nranges ? W->ranges + W->nranges - 1 : NULL;
    if (last && last->hi == lo && last->node == node) /* a scan's run of one set */
        last->hi = hi;
    else if (W->nranges >= W->T->ntok / 4 || grow((void **)&W->ranges, &W->rangecap, W->nranges + 1, sizeof(Range)) < 0)
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

/* The tokens ttok[lo:hi]' node from the walk, marked as written (walk_dead_check counts the marks); lazy,
 * a live node is left to the ranges (walk_range) and only a dead one (walk_assign's) is marked. */
static inline void walk_write(Walk *W, int32_t lo, int32_t hi, int64_t node) {
    const int32_t *ttok = W->T->ttok;
    if (!W->lazy_nodes) {
        for (int32_t k = lo; k < hi; k++) {
            W->node_of[ttok[k]] = node;
            W->assigned[ttok[k] >> 6] |= (uint64_t)1 << (ttok[k] & 63);
        }
    } else if (node == W_EMPTY) {
        for (int32_t k = lo; k < hi; k++) W->assigned[ttok[k] >> 6] |= (uint64_t)1 << (ttok[k] & 63);
    }
}

static void walk_assign(Walk *W, int64_t gbase, int64_t glen, int64_t node) {
    VocabTrie *T = W->T;
    for (int64_t g = 0; g < glen; g++) {
        int32_t t = W->gs[gbase + g];
        walk_write(W, T->tptr[t], T->tptr[t + 1], node);
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
        walk_write(W, lo, hi, D);
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

/* ---- the scan cache: a scan kept per vocabulary, reused by later grammars ----
 * A scan numbers a subtree from the step memo alone: each node's set is its parent's stepped on its
 * byte, and a subtree whose bytes all step a set to itself takes that set whole. So its outcome
 * depends on the grammar only through the transitions it read, and is kept (per trie, from the second
 * scan of a subtree root, by this walk or a later one) as facts over labels: label 0 for the set at the root, the others
 * numbered as the scan met them, SCAN_DEAD for the empty set. A fact "label a on byte b gives label c"
 * for each (label, byte) pair the scan stepped, a jump "label a loops through the subtree of node n"
 * for each subtree it took whole, and the runs of tokens (ttok order) with the label each took.
 * A later walk scanning the same root from its own set D (scan_apply) checks them against its own
 * step memo in order, binding label 0 to D and each other label to the set its first fact gives:
 * each step must be in the memo and give the bound set (the empty set exactly for SCAN_DEAD), each
 * jump must hold (walk_skips). Then, by induction from the root, every node of the subtree has the set
 * bound to its recorded label, which is what the scan would find, and the runs are written with the
 * bound sets; else nothing is written and the scan runs. Nothing is stepped and no node made (the
 * store's nodes and ids stay the Python walk's): what goes is the per-node work, one fact per
 * (label, byte) pair instead of one pass per node (a median MaskBench schema's scans read ~90k of
 * Llama-3's 274k trie nodes, most of them UTF-8 inside a JSON string, the same in every schema). */

/* The label of a scan slot in the recording (given at first sight); -1: past the labels a fact holds */
static int scan_rec_label(Walk *W, int slot) {
    int l = W->rec_label[slot];
    if (l >= 0) return l;
    if (W->scan_state[slot] == W_EMPTY) {
        l = SCAN_DEAD;
    } else {
        if (W->rec_nlabels >= SCAN_DEAD) return -1;
        l = W->rec_nlabels++;
        memset(W->rec_seen + 4 * (int64_t)l, 0, 4 * sizeof(uint64_t));
    }
    W->rec_label[slot] = (int16_t)l;
    W->rec_slots[W->rec_nslots++] = (uint8_t)slot;
    return l;
}

/* Whether the scan of t from the slot `root` is recorded (1; 0: t has an entry, was not scanned before, or
 * the cache is full; < 0: no memory); the previous recording's labels cleared. */
static int scan_rec_begin(Walk *W, int32_t t, int root) {
    VocabTrie *T = W->T;
    ScanCache *C = T->scans;
    for (int32_t i = 0; i < W->rec_nslots; i++) W->rec_label[W->rec_slots[i]] = -1;
    W->rec_nslots = W->rec_nlabels = 0;
    W->rec_nfacts = W->rec_njumps = W->rec_nruns = 0;
    if (!C) {
        C = calloc(1, sizeof(ScanCache));
        if (!C || !(C->entry_of = malloc((size_t)T->nnodes * sizeof(int32_t))) ||
            !(C->seen = calloc((size_t)T->nnodes, 1))) {
            if (C) free(C->entry_of);
            free(C);
            return E_NOMEM;
        }
        memset(C->entry_of, 0xFF, (size_t)T->nnodes * sizeof(int32_t));
        T->scans = C;
    }
    if (C->entry_of[t] >= 0 || C->nfacts >= SCAN_CACHE_MAX || C->njumps >= SCAN_CACHE_MAX || C->nruns >= SCAN_CACHE_MAX)
        return 0;
    /* a root is recorded the second time a walk scans it: one no other grammar reaches (a schema's own
     * keys) costs the recording nothing (~4 ns a node: +10% on a first schema's walk, recording all) */
    if (!C->seen[t]) {
        C->seen[t] = 1;
        return 0;
    }
    if (!W->rec_seen && !(W->rec_seen = malloc(SCAN_DEAD * 4 * sizeof(uint64_t)))) return E_NOMEM;
    scan_rec_label(W, root); /* label 0 (D is not the empty set) */
    return 1;
}

static int scan_rec_fact(Walk *W, int lp, int b, int ln) {
    uint64_t *seen = W->rec_seen + 4 * (int64_t)lp, bit = 1ULL << (b & 63);
    if (seen[b >> 6] & bit) return 0;
    seen[b >> 6] |= bit;
    if (grow((void **)&W->rec_facts, &W->rec_factcap, W->rec_nfacts + 1, sizeof(uint32_t)) < 0) return E_NOMEM;
    W->rec_facts[W->rec_nfacts++] = (uint32_t)lp << 16 | (uint32_t)b << 8 | (uint32_t)ln;
    return 0;
}

static int scan_rec_run(Walk *W, int32_t lo, int32_t hi, int label) {
    if (hi <= lo) return 0;
    ScanRun *last = W->rec_nruns ? W->rec_runs + W->rec_nruns - 1 : NULL;
    if (last && last->hi == lo && last->label == label) {
        last->hi = hi;
        return 0;
    }
    if (grow((void **)&W->rec_runs, &W->rec_runcap, W->rec_nruns + 1, sizeof(ScanRun)) < 0) return E_NOMEM;
    W->rec_runs[W->rec_nruns++] = (ScanRun){lo, hi, label};
    return 0;
}

static int scan_rec_jump(Walk *W, int32_t node, int label) {
    if (grow((void **)&W->rec_jumps, &W->rec_jumpcap, W->rec_njumps + 1, sizeof(ScanJump)) < 0) return E_NOMEM;
    W->rec_jumps[W->rec_njumps++] = (ScanJump){node, label};
    return 0;
}

/* The recorded scan of t, finished: kept as t's entry */
static int scan_rec_commit(Walk *W, int32_t t) {
    ScanCache *C = W->T->scans;
    if (grow((void **)&C->entries, &C->entcap, C->nentries + 1, sizeof(ScanEntry)) < 0 ||
        grow((void **)&C->facts, &C->factcap, C->nfacts + W->rec_nfacts, sizeof(uint32_t)) < 0 ||
        grow((void **)&C->jumps, &C->jumpcap, C->njumps + W->rec_njumps, sizeof(ScanJump)) < 0 ||
        grow((void **)&C->runs, &C->runcap, C->nruns + W->rec_nruns, sizeof(ScanRun)) < 0)
        return E_NOMEM;
    ScanEntry *e = C->entries + C->nentries;
    *e = (ScanEntry){C->nfacts, W->rec_nfacts, C->njumps, W->rec_njumps, C->nruns, W->rec_nruns};
    memcpy(C->facts + C->nfacts, W->rec_facts, (size_t)W->rec_nfacts * sizeof(uint32_t));
    memcpy(C->jumps + C->njumps, W->rec_jumps, (size_t)W->rec_njumps * sizeof(ScanJump));
    memcpy(C->runs + C->nruns, W->rec_runs, (size_t)W->rec_nruns * sizeof(ScanRun));
    C->nfacts += W->rec_nfacts;
    C->njumps += W->rec_njumps;
    C->nruns += W->rec_nruns;
    C->entry_of[t] = (int32_t)C->nentries++;
    return 0;
}

/* The entry of t applied from the slot `root` (its set D): 1 where every fact holds in this walk's step
 * memo (the subtree's tokens written and counted as walk_scan_ranges does), 0 where one does not (nothing
 * written; SCAN_UNSTEPPED where a fact's step is not in the memo yet), < 0 on error. */
#define SCAN_UNSTEPPED 2
static int scan_apply(Walk *W, int root, int32_t t, const ScanEntry *e) {
    int unstepped = 0;
    ScanCache *C = W->T->scans;
    Words *S = W->S;
    int64_t natoms = S->natoms;
    int16_t slot_of[SCAN_DEAD + 1];
    memset(slot_of, 0xFF, sizeof(slot_of));
    slot_of[0] = (int16_t)root;
    const uint32_t *facts = C->facts + e->f0;
    for (int64_t i = 0; i < e->nf; i++) {
        int lp = (int)(facts[i] >> 16), b = (int)(facts[i] >> 8) & 255, ln = (int)facts[i] & 255;
        int ps = slot_of[lp];
        if (ps < 0) goto refused;
        int64_t a = W->atom_of[b];
        int nx = W->scan_next[ps * natoms + a];
        if (nx < 0) {
            int32_t r = memo_get(&S->sm, (uint64_t)W->scan_state[ps] * (uint64_t)natoms + (uint64_t)a);
            if (r < 0) { /* not stepped yet: the walk will */
                unstepped = 1;
                goto refused;
            }
            nx = scan_slot_of(W, r);
            if (nx < 0) {
                if (nx == -1) goto refused;
                return nx;
            }
            W->scan_next[ps * natoms + a] = (int16_t)nx;
        }
        int dead = W->scan_state[nx] == W_EMPTY;
        if (dead != (ln == SCAN_DEAD)) goto refused;
        if (dead) continue;
        if (slot_of[ln] < 0)
            slot_of[ln] = (int16_t)nx;
        else if (slot_of[ln] != nx)
            goto refused;
    }
    const ScanJump *jumps = C->jumps + e->j0;
    for (int64_t i = 0; i < e->nj; i++) {
        int slot = slot_of[jumps[i].label];
        if (slot < 0) goto refused;
        int32_t ls = W->scan_loop[slot];
        if (ls < 0 && (ls = W->scan_loop[slot] = walk_loop_slot(W, W->scan_state[slot])) < 0) return ls;
        if (!walk_skips(W, W->scan_state[slot], ls, jumps[i].node)) goto refused;
    }
    const ScanRun *runs = C->runs + e->r0;
    int64_t dead = 0;
    for (int64_t i = 0; i < e->nr; i++) {
        if (runs[i].label == SCAN_DEAD) {
            dead += runs[i].hi - runs[i].lo;
            continue;
        }
        int64_t st = W->scan_state[slot_of[runs[i].label]];
        walk_write(W, runs[i].lo, runs[i].hi, st);
        walk_range(W, runs[i].lo, runs[i].hi, st);
    }
    int64_t tokens = W->T->tptr[W->T->send[t]] - W->T->tptr[t + 1];
    W->dead_skipped += dead;
    W->done_tokens += tokens;
    W->skipped_tokens += tokens;
    W->scanned_tokens += tokens;
    C->reused++;
    return 1;
refused:
    C->refused++;
    return unstepped ? SCAN_UNSTEPPED : 0;
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
    /* the scan cache: t's entry where it holds; else the scan, recorded where t has none */
    int32_t entry = T->scans ? T->scans->entry_of[t] : -1;
    if (entry >= 0) {
        /* Refused for a step the memo lacks, the scan would stop at that step too (the facts are the pairs
         * it meets first, in its order: 0 of 166,720 such scans finished over 200 median MaskBench files):
         * left to the walk, which steps it. Exact either way: a scan computes no step. */
        int r = scan_apply(W, root, t, T->scans->entries + entry);
        if (r == SCAN_UNSTEPPED) return 0;
        if (r != 0) return r;
    }
    int rec = entry < 0 ? scan_rec_begin(W, t, root) : 0;
    if (rec < 0) return rec;
    uint8_t *at = W->scan_at;
    at[0] = (uint8_t)root;
    int64_t dead = 0;
    const int32_t *tptr = T->tptr;
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
        int ln = 0; /* nx's label in the recording */
        if (rec) {
            ln = scan_rec_label(W, nx);
            if (ln < 0) /* past the labels a fact holds: not recorded */
                rec = 0;
            else if (scan_rec_fact(W, W->rec_label[ps], T->pbyte[u], ln) < 0)
                return E_NOMEM;
        }
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
                if (whole && rec && scan_rec_jump(W, u, ln) < 0) return E_NOMEM;
            }
            if (whole) last = T->send[u];
        }
        int32_t lo = tptr[u], hi = tptr[last];
        if (rec && scan_rec_run(W, lo, hi, ln) < 0) return E_NOMEM;
        if (st == W_EMPTY) {
            dead += hi - lo;
        } else {
            walk_write(W, lo, hi, st);
            walk_range(W, lo, hi, st);
        }
        u = last - 1;
    }
    int64_t tokens = tptr[end] - tptr[t + 1];
    W->dead_skipped += dead;
    W->done_tokens += tokens;
    W->skipped_tokens += tokens;
    W->scanned_tokens += tokens;
    if (rec && scan_rec_commit(W, t) < 0) return E_NOMEM;
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
 * `assigned`. Lazy, with the ranges kept, the live and fallback tokens are counted from the ranges
 * (the walk wrote no mark for them; a fallback token is never in a live range: its key's step is
 * not in the step memo, so no skip or scan reached it) and `assigned` holds walk_assign's dead ones. */
static int walk_dead_check(Walk *W) {
    const VocabTrie *T = W->T;
    const int64_t ntok = T->ntok;
    const uint8_t *fallback = W->fallback, *eligible = T->eligible_of;
    const uint64_t *assigned = W->assigned;
    int64_t written = 0, fallen = 0;
    for (int64_t w = 0; w <= ntok >> 6; w++) written += __builtin_popcountll(assigned[w]);
    for (int64_t i = 0; W->lazy_nodes && i < W->nranges; i++) {
        const Range *r = W->ranges + i;
        if (r->node >= 0) written += r->hi - r->lo;
        else fallen += r->hi - r->lo;
    }
    for (int64_t base = 0; !W->lazy_nodes && base < ntok; base += 8) {
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
    W.cancel_at = walk_clock() + CANCEL_SECONDS;
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
    memset(W.rec_label, 0xFF, sizeof(W.rec_label));
    if (!lazy) walk_prefill(&W);
    W.path[0] = (int32_t)initial;
    W.valid = 1;
    if (S && cancel != Py_None) { /* a step's unions ask too (a step can take seconds) */
        S->poll = walk_poll;
        S->poll_arg = &W;
    }
    int64_t r = walk_push(&W, 0, 0);
    if (r == 0) r = walk_visit(&W, 0, 1, 0);
    if (S) {
        S->limit = NO_LIMIT;
        S->poll = NULL;
        S->poll_arg = NULL;
    }
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
    free(W.rec_seen);
    free(W.rec_facts);
    free(W.rec_jumps);
    free(W.rec_runs);
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
PyObject *words_classify(Words *S, PyObject *args) {
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
PyObject *k_classify_steps(PyObject *self, PyObject *args) {
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
