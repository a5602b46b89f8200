#ifndef CFGZIP_VOCAB_TRIE_H
#define CFGZIP_VOCAB_TRIE_H
#include "words.h"

/* The vocabulary as a trie over bytes (per vocabulary, grammar-independent): built by vocab_trie.c, walked by
 * classing.c (the displacement classes) and read by assemble.c (their numbering). */
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
    int32_t *trank; /* per trie position k: ttok[k]'s place in by_length, so a range's representative (the
                     * shortest, then the lowest id) is by_length[the least rank of a contiguous run] */
    int32_t *stop_ids;
    int64_t nstops, nfixed_blocked, fixed_blocked_min, stop_rep;
    int64_t nnormal; /* NORMAL tokens, empty ones too (the classes' metadata counts them) */
    struct ScanCache *scans; /* classing.c's scans kept for later grammars (NULL until the first) */
} VocabTrie;

extern PyTypeObject VocabTrieType;

/* What classing's walk (classing.c) hands the numbering (assemble.c): the trie's tokens ttok[lo:hi], one
 * displacement node for them all. */
typedef struct {
    int32_t lo, hi; /* ttok[lo:hi] */
    int64_t node;   /* their displacement node, or -1: fallback tokens */
} Range;
#define RANGES_MAX (1 << 16)

/* classing.c */
void scan_cache_free(struct ScanCache *c);
void scan_cache_info(const struct ScanCache *c, int64_t *kept, int64_t *reused, int64_t *refused, int64_t *bytes);

/* vocab_trie.c */
void vtrie_dealloc(VocabTrie *T);
int vtrie_init(VocabTrie *T, PyObject *args, PyObject *kwds);
PyObject *vtrie_same(VocabTrie *T, PyObject *args);
PyObject *vtrie_info(VocabTrie *T, PyObject *unused);

#endif
