/* A class set -> XGrammar's packed int32 vocabulary row, and the tables that takes.
 *
 *   expand_row            a class set -> XGrammar's packed int32 vocabulary row
 *                         (used by cfgzip_lab.native.rows; the numpy path is the reference)
 *   expand_near           the same row, made from the nearest of the last rows made (XOR of the classes
 *                         the two sets do not share) where that is cheaper (expand_row is the reference)
 *   expansion_tables      the tables expand_row reads, from class_of in two passes
 *                         (cfgzip_lab.kernels.union_tables is the reference)
 *
 * The same split as cfgzip_lab.kernels.cpu, without numpy's per-call costs and its 128k-byte
 * scratch row: the large classes are packed four at a time into tables of all 16 unions of their
 * rows (one OR of W words per group of four, none for a group with no class in the set), and the
 * small classes set (or clear, whichever touches fewer words) their bits directly in the packed row,
 * one precomputed (word, bits) pair per class and word.
 * Measured with Llama-3 (bython, 3,015 classes, 9,180 small-class tokens): see rows.py.
 */
#include "native_rows.h"
#include "words.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* How many of v ids the 32-id word from id `base` holds (32, fewer in the last word), and the mask of a
 * word's first n lanes (0 for none): the word loops over class_of below share them. */
static inline Py_ssize_t word_ids(Py_ssize_t v, Py_ssize_t base) { return v - base < 32 ? v - base : 32; }
static inline uint32_t word_lanes(Py_ssize_t n) { return n <= 0 ? 0 : n >= 32 ? 0xFFFFFFFFu : ((uint32_t)1 << n) - 1; }

/* The bits of the n <= 32 ids at p equal to x (bit j: p[j] == x). A whole word four ids a compare
 * with SSE2 (every x86-64 has it), which compilers do not make of the scalar loop (a Llama-3 scan
 * 0.15 -> ~0.05 ms); the short last word one by one. */
static inline uint32_t equal_bits(const int32_t *p, Py_ssize_t n, int32_t x) {
    uint32_t m = 0;
#if defined(__SSE2__)
    if (n == 32) {
        __m128i want = _mm_set1_epi32(x);
        for (int q = 0; q < 8; q++) {
            __m128i got = _mm_loadu_si128((const __m128i *)(p + 4 * q));
            m |= (uint32_t)_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(got, want))) << (4 * q);
        }
        return m;
    }
#endif
    for (Py_ssize_t j = 0; j < n; j++) m |= (uint32_t)(p[j] == x) << j;
    return m;
}

static int in_set(const uint8_t *set, Py_ssize_t set_len, int32_t c) {
    Py_ssize_t byte = c >> 3;
    return byte < set_len && ((set[byte] >> (c & 7)) & 1);
}

/* expand_row(class_set, groups, tables, indptr, pair_words, pair_bits, small_all, out, built=None, class_of=None)
 *   class_set   bytes: the class set, little endian (bit k = class k)
 *   groups      int32[G * 4]: the large classes of each group (a group may repeat its last class)
 *   tables      int32[G * 16 * W]: row (g, code) = OR of the rows of the members whose bit is in code
 *   indptr      int32[K + 1]: class k's (word, bits) pairs are pair_words/pair_bits[indptr[k]:indptr[k+1]]
 *               (empty for the classes in the tables)
 *   pair_words  int32[P], pair_bits int32[P]: the words of the packed row a small class's tokens sit in,
 *               and the OR of their bits in that word
 *   small_all   int32[W]: the bits of every small class's tokens
 *   out         writable int32[W]: overwritten with the packed vocabulary row
 *   built       expansion_tables(..., lazy=True)'s: the union rows not made yet are made (in tables,
 *               writable then) when first needed, as the eager build makes them
 *   class_of    int32[V]: where `built` leaves single rows too (expansion_tables' `defer`), each made
 *               from it when a class set first needs it (a row of an unknown id is refused, none read)
 * Small classes: when most of their pairs are in the set, start from small_all and clear the bits of
 * the classes not in it (a token is in one class only, so no table row holds those bits); otherwise
 * set the bits of the classes in it.
 */
/* The packed row of class c (the bits of the tokens class_of gives it) into dst[words], over the words
 * class_of spans (the rest zero): 32 ids compared per word, branch-free. */
static void single_row(int32_t *restrict dst, Py_ssize_t words, const int32_t *co, Py_ssize_t v, int32_t c) {
    memset(dst, 0, (size_t)words * 4);
    for (Py_ssize_t base = 0; base < v; base += 32) {
        dst[base >> 5] = (int32_t)equal_bits(co + base, word_ids(v, base), c);
    }
}

/* expand_row's and expand_near's tables (see above), their buffers held for one call. */
typedef struct {
    Py_buffer groups, tables, indptr, words_b, bits_b, all_b, built, co_b;
    Py_ssize_t words, ngroups, nclasses;
    const int32_t *g, *ip, *pw, *pb, *all;
    int32_t *t;    /* written only where `made` says a union row is not made yet */
    uint8_t *made; /* NULL: eager tables, every row made */
} Expansion;

static void expansion_release(Expansion *E) {
    Py_buffer *b[8] = {&E->groups, &E->tables, &E->indptr, &E->words_b, &E->bits_b, &E->all_b, &E->built, &E->co_b};
    for (int i = 0; i < 8; i++)
        if (b[i]->obj) PyBuffer_Release(b[i]);
}

/* The tables' buffers (objs: groups, tables, indptr, pair_words, pair_bits, small_all, built, class_of; the
 * last two Py_None when absent), checked against each other and a row of `words` words; -1 with the
 * exception set (E then released). */
static int expansion_get(Expansion *E, PyObject *const objs[8], Py_ssize_t words) {
    memset(E, 0, sizeof(*E));
    int lazy = objs[6] != Py_None;
    Py_buffer *b[8] = {&E->groups, &E->tables, &E->indptr, &E->words_b, &E->bits_b, &E->all_b, &E->built, &E->co_b};
    for (int i = 0; i < 8; i++) {
        if (objs[i] == Py_None && i >= 6) continue;
        int flags = (i == 1 || i == 6) && lazy ? PyBUF_WRITABLE : PyBUF_SIMPLE;
        if (PyObject_GetBuffer(objs[i], b[i], flags) < 0) {
            expansion_release(E);
            return -1;
        }
    }
    E->words = words;
    E->ngroups = E->groups.len / 16;
    E->nclasses = E->indptr.len / 4 - 1;
    E->ip = (const int32_t *)E->indptr.buf;
    if (E->tables.len != E->ngroups * 16 * words * 4 || E->all_b.len != words * 4 || E->words_b.len != E->bits_b.len ||
        E->nclasses < 0 || E->ip[E->nclasses] != E->words_b.len / 4 || (lazy && E->built.len != E->ngroups * 16) ||
        (E->co_b.obj && (E->co_b.len % 4 || E->co_b.len / 4 > words * 32))) {
        PyErr_SetString(PyExc_ValueError, "expand_row: the tables do not fit each other or the output row");
        expansion_release(E);
        return -1;
    }
    E->g = (const int32_t *)E->groups.buf;
    E->t = (int32_t *)E->tables.buf;
    E->made = lazy ? (uint8_t *)E->built.buf : NULL;
    E->pw = (const int32_t *)E->words_b.buf;
    E->pb = (const int32_t *)E->bits_b.buf;
    E->all = (const int32_t *)E->all_b.buf;
    return 0;
}

/* Table row (k, code) (a group's union of the members in code), made first where a lazy build left it:
 * its deferred singles from class_of, a union as the OR of its singles. NULL with ValueError where a
 * deferred single is needed and no class_of was given. */
static const int32_t *table_row(Expansion *E, Py_ssize_t k, int code) {
    Py_ssize_t words = E->words;
    int32_t *t = E->t;
    uint8_t *made = E->made;
    if (made && !made[k * 16 + code]) { /* first needed now: a deferred single, or a union */
        for (int rest = code; rest; rest &= rest - 1) {
            int low = rest & -rest;
            if (made[k * 16 + low]) continue;
            if (!E->co_b.obj) {
                PyErr_SetString(PyExc_ValueError, "expand_row: a deferred single row needs class_of");
                return NULL;
            }
            single_row(t + ((size_t)k * 16 + low) * words, words, (const int32_t *)E->co_b.buf, E->co_b.len / 4,
                       E->g[4 * k + __builtin_ctz((unsigned)low)]);
            made[k * 16 + low] = 1;
        }
    }
    if (made && !made[k * 16 + code]) { /* a union of two or more members, first needed now */
        int32_t *restrict dst = t + ((size_t)k * 16 + code) * words;
        const int32_t *a = t + ((size_t)k * 16 + (code & -code)) * words;
        memcpy(dst, a, (size_t)words * 4);
        for (int rest = code & (code - 1); rest; rest &= rest - 1) {
            const int32_t *b = t + ((size_t)k * 16 + (rest & -rest)) * words;
            for (Py_ssize_t w = 0; w < words; w++) dst[w] |= b[w];
        }
        made[k * 16 + code] = 1;
    }
    return t + ((size_t)k * 16 + code) * words;
}

/* row (E->words words) = the packed vocabulary row of class set s (set_len bytes); -1 with the exception set.
 * Small classes: when most of their pairs are in the set, start from small_all and clear the bits of
 * the classes not in it (a token is in one class only, so no table row holds those bits); otherwise
 * set the bits of the classes in it. */
static int expand_into(Expansion *E, const uint8_t *s, Py_ssize_t set_len, int32_t *restrict row) {
    Py_ssize_t words = E->words, nclasses = E->nclasses;
    const int32_t *g = E->g, *ip = E->ip, *pw = E->pw, *pb = E->pb, *all = E->all;
    int filled = 0;
    for (Py_ssize_t k = 0; k < E->ngroups; k++) {
        int code = in_set(s, set_len, g[4 * k]) | in_set(s, set_len, g[4 * k + 1]) << 1 |
                   in_set(s, set_len, g[4 * k + 2]) << 2 | in_set(s, set_len, g[4 * k + 3]) << 3;
        if (!code) continue;
        const int32_t *restrict src = table_row(E, k, code);
        if (!src) return -1;
        if (!filled) {
            memcpy(row, src, (size_t)words * 4);
            filled = 1;
        } else {
            for (Py_ssize_t w = 0; w < words; w++) row[w] |= src[w];
        }
    }
    if (!filled) memset(row, 0, (size_t)words * 4);
    Py_ssize_t in_pairs = 0, total = ip[nclasses];
    for (Py_ssize_t k = 0; k < nclasses; k++)
        if ((s[k >> 3] >> (k & 7)) & 1) in_pairs += ip[k + 1] - ip[k];
    int complement = 2 * in_pairs > total;
    if (complement)
        for (Py_ssize_t w = 0; w < words; w++) row[w] |= all[w];
    for (Py_ssize_t byte = 0; byte * 8 < nclasses; byte++) {
        unsigned v = complement ? (uint8_t)~s[byte] : s[byte];
        while (v) {
            Py_ssize_t k = byte * 8 + __builtin_ctz(v);
            v &= v - 1;
            if (k >= nclasses) break;
            Py_ssize_t end = ip[k + 1];
            if (complement)
                for (Py_ssize_t i = ip[k]; i < end; i++) row[pw[i]] &= ~pb[i];
            else
                for (Py_ssize_t i = ip[k]; i < end; i++) row[pw[i]] |= pb[i];
        }
    }
    return 0;
}

PyObject *expand_row(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer set, out;
    PyObject *objs[8] = {NULL, NULL, NULL, NULL, NULL, NULL, Py_None, Py_None};
    if (!PyArg_ParseTuple(args, "y*OOOOOOw*|OO", &set, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &out, &objs[6], &objs[7]))
        return NULL;
    Expansion E;
    PyObject *result = NULL;
    if (expansion_get(&E, objs, out.len / 4) == 0) {
        if (set.len * 8 < E.nclasses)
            PyErr_SetString(PyExc_ValueError, "expand_row: the tables do not fit each other or the output row");
        else if (expand_into(&E, (const uint8_t *)set.buf, set.len, (int32_t *)out.buf) == 0)
            result = Py_NewRef(Py_None);
        expansion_release(&E);
    }
    PyBuffer_Release(&set);
    PyBuffer_Release(&out);
    return result;
}

/* What expand_near weighs, in about one cycle a unit: a large class's table row costs a pass over the
 * row's words (four words an SSE2 operation), a small class its few (word, bits) pairs behind a branch
 * per class, a copy of the reference row half a pass. */
static inline Py_ssize_t row_pass(Py_ssize_t words) { return words / 4 + 1; }
#define SMALL_CLASS_COST 16

/* expand_near's choice: the candidate (sets cand[0..ncand-1]) whose row, XORed with the rows of the
 * classes its set and s do not share, costs least, or -1 where expanding s from scratch costs less.
 * Written once (always inline) and compiled twice below: with the popcnt instruction where the CPU has
 * it (without it GCC calls __popcountdi2 for each word, ~5 µs a search over 16 Llama-3 sets), and
 * without. */
static inline __attribute__((always_inline)) Py_ssize_t nearest_body(const Expansion *E, const uint64_t *s,
                                                                     const uint64_t *large,
                                                                     const uint64_t *const *cand,
                                                                     Py_ssize_t ncand, Py_ssize_t n64) {
    Py_ssize_t pass = row_pass(E->words), in_small = 0, small = 0, groups_hit = 0;
    for (Py_ssize_t w = 0; w < n64; w++) {
        in_small += __builtin_popcountll(s[w] & ~large[w]);
        small += __builtin_popcountll(~large[w]);
    }
    small -= n64 * 64 - E->nclasses; /* the bits past the last class */
    const uint8_t *sb = (const uint8_t *)s;
    for (Py_ssize_t k = 0; k < E->ngroups; k++)
        groups_hit += in_set(sb, n64 * 8, E->g[4 * k]) | in_set(sb, n64 * 8, E->g[4 * k + 1]) |
                      in_set(sb, n64 * 8, E->g[4 * k + 2]) | in_set(sb, n64 * 8, E->g[4 * k + 3]);
    Py_ssize_t best = -1, best_cost = groups_hit * pass +
                                       SMALL_CLASS_COST * (in_small < small - in_small ? in_small : small - in_small) +
                                       E->nclasses / 4;
    const Py_ssize_t least = pass < SMALL_CLASS_COST ? pass : SMALL_CLASS_COST; /* a class's cost at least */
    for (Py_ssize_t r = 0; r < ncand; r++) {
        const uint64_t *o = cand[r];
        Py_ssize_t d_all = 0, d_large = 0, w = 0;
        while (w < n64) { /* 16 words at a time, left once the classes so far cost more than the best */
            Py_ssize_t end = w + 16 < n64 ? w + 16 : n64;
            for (; w < end; w++) {
                uint64_t d = s[w] ^ o[w];
                d_all += __builtin_popcountll(d);
                if (large[w]) d_large += __builtin_popcountll(d & large[w]);
            }
            if (pass / 2 + d_all * least >= best_cost) break; /* a lower bound of the cost */
        }
        if (w < n64) continue;
        Py_ssize_t cost = pass / 2 + d_large * pass + (d_all - d_large) * SMALL_CLASS_COST;
        if (cost < best_cost) {
            best_cost = cost;
            best = r;
        }
    }
    return best;
}

static Py_ssize_t nearest_plain(const Expansion *E, const uint64_t *s, const uint64_t *large,
                                const uint64_t *const *cand, Py_ssize_t ncand, Py_ssize_t n64) {
    return nearest_body(E, s, large, cand, ncand, n64);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("popcnt"))) static Py_ssize_t nearest_popcnt(const Expansion *E, const uint64_t *s,
                                                                    const uint64_t *large,
                                                                    const uint64_t *const *cand,
                                                                    Py_ssize_t ncand, Py_ssize_t n64) {
    return nearest_body(E, s, large, cand, ncand, n64);
}
#endif

static Py_ssize_t nearest_entry(const Expansion *E, const uint64_t *s, const uint64_t *large,
                                const uint64_t *const *cand, Py_ssize_t ncand, Py_ssize_t n64) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("popcnt")) return nearest_popcnt(E, s, large, cand, ncand, n64);
#endif
    return nearest_plain(E, s, large, cand, ncand, n64);
}

/* row = ref XOR the rows of the classes in d (d_n64 words of class bits): exact, the classes being
 * disjoint sets of tokens; -1 with the exception set. */
static int xor_classes(Expansion *E, const int32_t *ref, const uint64_t *s, const uint64_t *o, Py_ssize_t n64,
                       const int32_t *large_slot, int32_t *restrict row) {
    Py_ssize_t words = E->words;
    const int32_t *ip = E->ip, *pw = E->pw, *pb = E->pb;
    memcpy(row, ref, (size_t)words * 4);
    for (Py_ssize_t w = 0; w < n64; w++) {
        for (uint64_t d = s[w] ^ o[w]; d; d &= d - 1) {
            Py_ssize_t k = w * 64 + __builtin_ctzll(d);
            if (k >= E->nclasses) break;
            int32_t at = large_slot[k];
            if (at >= 0) {
                if (at >= E->ngroups * 16) {
                    PyErr_SetString(PyExc_ValueError, "expand_near: large_slot names a row past the tables");
                    return -1;
                }
                const int32_t *restrict src = table_row(E, at / 16, at % 16);
                if (!src) return -1;
                for (Py_ssize_t i = 0; i < words; i++) row[i] ^= src[i];
            } else {
                for (Py_ssize_t i = ip[k], end = ip[k + 1]; i < end; i++) row[pw[i]] ^= pb[i];
            }
        }
    }
    return 0;
}

/* A NearRows capsule: expand_row's tables held for its life, and the ring of the last rows it made. */
typedef struct {
    Expansion E;
    Py_buffer large_b, ls_b;
    Py_ssize_t n64, ring, valid, slot;
    uint64_t *sets; /* ring * n64: the class sets of the ring's rows */
    int32_t *rows;  /* ring * E.words: their rows */
    int64_t near, scratch, classes; /* rows made near and from scratch; classes XORed into the near ones */
} NearRows;

static void near_release(NearRows *N) {
    expansion_release(&N->E);
    if (N->large_b.obj) PyBuffer_Release(&N->large_b);
    if (N->ls_b.obj) PyBuffer_Release(&N->ls_b);
    PyMem_Free(N->sets);
    PyMem_Free(N->rows);
    PyMem_Free(N);
}

static void near_free(PyObject *capsule) {
    NearRows *N = (NearRows *)PyCapsule_GetPointer(capsule, "cfgzip_near_rows");
    if (N) near_release(N);
}

/* near_rows_new(groups, tables, indptr, pair_words, pair_bits, small_all, built, class_of, large, large_slot,
 *               ring, words) -> capsule for expand_near
 *   the first eight   expand_row's tables (built and class_of None where absent), held while the capsule lives
 *   large             bytes, 8 * ceil(K / 64) of them: bit k set for the classes in the tables
 *   large_slot        int32[K]: a large class's own table row (group * 16 + (1 << member)), -1 for a small one
 *   ring              how many of the last rows made are kept to make new ones from; words: W, the row's words */
PyObject *near_rows_new(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[8], *large, *ls;
    Py_ssize_t ring, words;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOnn", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6],
                          &objs[7], &large, &ls, &ring, &words))
        return NULL;
    NearRows *N = PyMem_Calloc(1, sizeof(NearRows));
    if (!N) return PyErr_NoMemory();
    if (expansion_get(&N->E, objs, words) < 0) {
        PyMem_Free(N);
        return NULL;
    }
    if (PyObject_GetBuffer(large, &N->large_b, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(ls, &N->ls_b, PyBUF_SIMPLE) < 0)
        goto fail;
    N->n64 = N->large_b.len / 8;
    N->ring = ring;
    if (ring > NEAR_MAX + 1) {
        PyErr_SetString(PyExc_ValueError, "near_rows_new: a ring of more than NEAR_MAX + 1 rows");
        goto fail;
    }
    const int32_t *slots = (const int32_t *)N->ls_b.buf;
    int ok = N->large_b.len % 8 == 0 && N->n64 * 64 >= N->E.nclasses && N->ls_b.len == N->E.nclasses * 4 && ring >= 1 &&
             words >= 0;
    for (Py_ssize_t k = 0; ok && k < N->E.nclasses; k++) { /* each large class's own row, and no other */
        int32_t at = slots[k], code = at & 15;
        int large_bit = in_set((const uint8_t *)N->large_b.buf, N->large_b.len, (int32_t)k);
        ok = at == -1 ? !large_bit
                      : large_bit && at > 0 && at < N->E.ngroups * 16 && code && !(code & (code - 1)) &&
                            N->E.g[4 * (at / 16) + __builtin_ctz((unsigned)code)] == k;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "near_rows_new: the large classes do not fit the tables");
        goto fail;
    }
    /* the ring's rows (ring * W int32: 256 KB with Llama-3) are made by the first expand_near: the native
     * matcher's compiled fill (fill.c) makes its rows from its own, and never uses this ring */
    N->sets = PyMem_Calloc((size_t)(ring * N->n64 + 1), sizeof(uint64_t));
    if (!N->sets) {
        PyErr_NoMemory();
        goto fail;
    }
    PyObject *capsule = PyCapsule_New(N, "cfgzip_near_rows", near_free);
    if (capsule) return capsule;
fail:
    near_release(N);
    return NULL;
}

/* out (W words) = expand_row's row of the class set s (n64 words), made from the nearest of the ncand
 * candidates (class sets cand_sets[i], rows cand_rows[i]; at most NEAR_MAX) where that costs less than
 * expanding from scratch (their row XOR the rows of the classes the two sets do not share). Returns the
 * candidate it was made from, -1 (from scratch), or -2 with the exception set. Shared with fill.c, whose
 * candidates are its own last rows (native_rows.h). */
Py_ssize_t near_rows_make(PyObject *capsule, const uint64_t *s, Py_ssize_t n64, int32_t *out, Py_ssize_t words,
                          const uint64_t *const *cand_sets, const int32_t *const *cand_rows, Py_ssize_t ncand) {
    NearRows *N = (NearRows *)PyCapsule_GetPointer(capsule, "cfgzip_near_rows");
    if (!N) return -2;
    if (n64 != N->n64 || words != N->E.words || ncand < 0 || ncand > NEAR_MAX) {
        PyErr_SetString(PyExc_ValueError, "expand_near: the class set or the row has the wrong size");
        return -2;
    }
    const uint64_t *lg = (const uint64_t *)N->large_b.buf;
    Py_ssize_t near = nearest_entry(&N->E, s, lg, cand_sets, ncand, n64);
    int rc = near < 0 ? expand_into(&N->E, (const uint8_t *)s, n64 * 8, out)
                      : xor_classes(&N->E, cand_rows[near], s, cand_sets[near], n64, (const int32_t *)N->ls_b.buf, out);
    if (rc < 0) return -2;
    if (near < 0) N->scratch++;
    else {
        N->near++;
        for (Py_ssize_t w = 0; w < n64; w++) N->classes += __builtin_popcountll(s[w] ^ cand_sets[near][w]);
    }
    return near;
}

/* near_rows_make over the capsule's own ring (the last rows made through it), the new row written in
 * place of the oldest and copied to out. */
static Py_ssize_t near_rows_fill(NearRows *N, PyObject *capsule, const uint64_t *s, Py_ssize_t n64, int32_t *out,
                                 Py_ssize_t words) {
    if (n64 != N->n64 || words != N->E.words) {
        PyErr_SetString(PyExc_ValueError, "expand_near: the class set or the row has the wrong size");
        return -2;
    }
    if (!N->rows && !(N->rows = PyMem_Malloc((size_t)(N->ring * words + 1) * sizeof(int32_t)))) {
        PyErr_NoMemory(); /* (rows at or past `valid` are never read: no need to clear them) */
        return -2;
    }
    const uint64_t *cs[NEAR_MAX];
    const int32_t *cr[NEAR_MAX];
    Py_ssize_t slot = N->slot, ncand = 0;
    for (Py_ssize_t r = 0; r < N->valid && ncand < NEAR_MAX; r++)
        if (r != slot) {
            cs[ncand] = N->sets + r * n64;
            cr[ncand++] = N->rows + r * words;
        }
    int32_t *row = N->rows + slot * words;
    Py_ssize_t near = near_rows_make(capsule, s, n64, row, words, cs, cr, ncand);
    if (near < -1) {
        N->valid = 0; /* the entry is half written: the ring starts again */
        return -2;
    }
    memcpy(N->sets + slot * n64, s, (size_t)n64 * 8);
    memcpy(out, row, (size_t)words * 4);
    if (N->valid <= slot) N->valid = slot + 1;
    N->slot = (slot + 1) % N->ring;
    return near;
}

/* near_rows_stats(near_rows) -> (rows made near, rows made from scratch, classes XORed into the near ones) */
PyObject *near_rows_stats(PyObject *self, PyObject *capsule) {
    (void)self;
    NearRows *N = (NearRows *)PyCapsule_GetPointer(capsule, "cfgzip_near_rows");
    return N ? Py_BuildValue("LLL", (long long)N->near, (long long)N->scratch, (long long)N->classes) : NULL;
}

/* expand_near(near_rows, class_set, out) -> int: near_rows_fill for a class set given as bytes (8 *
 * ceil(K / 64) of them) and out an int32[W] buffer. Why: decoding meets class sets a few tokens apart
 * that differ in a handful of classes. */
PyObject *expand_near(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    Py_buffer set, out;
    if (!PyArg_ParseTuple(args, "Oy*w*", &capsule, &set, &out)) return NULL;
    Py_ssize_t near = -2;
    if (set.len % 8 || out.len % 4)
        PyErr_SetString(PyExc_ValueError, "expand_near: the class set or the row has the wrong size");
    else
    {
        NearRows *N = (NearRows *)PyCapsule_GetPointer(capsule, "cfgzip_near_rows");
        if (N) near = near_rows_fill(N, capsule, (const uint64_t *)set.buf, set.len / 8, (int32_t *)out.buf, out.len / 4);
    }
    PyBuffer_Release(&set);
    PyBuffer_Release(&out);
    return near < -1 ? NULL : PyLong_FromSsize_t(near);
}

/* expansion_tables(class_of, num_classes, most, min_tokens, words, lazy=False, defer=None, listed=None,
 *                  listed_classes=None, vocab_size=-1)
 *   class_of    int32[V]: each token's class (every id in [0, num_classes))
 *   lazy        the union rows of two or more members left to expand_row (made when a class set first
 *               needs one: up to 64 large classes make 4 MB of tables with Llama-3, and a decode meets
 *               a few of their 176 unions; c_like 1.02 -> 0.93 ms); tables is a bytearray then, and
 *               a seventh item `built` (bytearray, one per row) says which rows are made; row 0 of a
 *               group (no member in the set) is never read, so never written, nor marked made
 *   defer       lazy only: bytes[num_classes], nonzero for a class whose single row (and its copies in a
 *               short last group) is left to expand_row too, made from class_of when a set first holds
 *               it: the native engine's BLOCKED class, most of a small grammar's vocabulary and in no
 *               state's class set, then costs no 16 KB row written per grammar (Llama-3)
 *   listed      int32 ids, ascending: every id whose class is not 0, where the caller knows them (classing's
 *               short numbering): class_of is read at those ids alone instead of scanned; each is checked
 *               to be in class_of's range and outside class 0, and the ids in order (ValueError)
 *   listed_classes  int32, one per listed id: their classes, where class_of is None (a sparse map: every
 *               other id class 0; vocab_size then says how many ids there are); class_of is never read
 *   vocab_size  the number of ids, where class_of is None
 * -> (groups, tables, indptr, pair_words, pair_bits, small_all): bytes of int32, the arrays expand_row reads,
 * built in one pass over class_of (see below): the union tables of the `most` largest classes with at least
 * `min_tokens` tokens (largest first, ties by id; the last group repeats its last class), and the
 * (word, bits) pairs of every other class, by class and then word. The reference is
 * cfgzip_lab.kernels.union_tables (largest_classes, union_tables, pair_lists), equal array for array;
 * numpy needs ~1 ms of comparisons and sorts there for Llama-3, this ~0.1 ms. */
typedef struct {
    int64_t size;
    int32_t id;
} SizedClass;

static int cmp_sized(const void *x, const void *y) {
    const SizedClass *a = x, *b = y;
    if (a->size != b->size) return a->size > b->size ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static PyObject *new_bytes(Py_ssize_t n, char **data) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, n);
    if (b) {
        *data = PyBytes_AS_STRING(b);
        memset(*data, 0, (size_t)n);
    }
    return b;
}

/* expansion_tables' state: its arguments, the counts of the first pass, and the arrays it returns. */
typedef struct {
    Py_buffer co_b, defer_b, listed_b, lc_b;
    Py_ssize_t k, most, min_tokens, words, v;
    int lazy;
    const int32_t *co;
    const uint8_t *defer;
    const int32_t *given;         /* the caller's ids outside class 0 (see below) */
    const int32_t *given_classes; /* and their classes, where it gives no class_of */
    Py_ssize_t ngiven;
    int from_given;
    int64_t *sizes;
    int32_t *slot, *last, *fill, guess;
    uint32_t *guess_bits;
    /* the tokens outside the guess class, ascending: their ids and classes (the caller's arrays where it gave
     * both, else rest_ids / rest_classes, filled by the first pass); small_at: which of them are small */
    int32_t *rest_ids, *rest_classes, *small_at;
    const int32_t *rid, *rcls;
    Py_ssize_t nrest, nsmall;
    int32_t **row_of; /* fill_rows: each class's single row, or `scratch` (a small or deferred class) */
    uint8_t *small;   /* fill_rows: 1 for a class listed as pairs */
    int32_t *scratch;
    SizedClass *cand;
    Py_ssize_t nlarge, ngroups;
    PyObject *groups, *tables, *indptr, *pw, *pb, *all, *built;
    int32_t *g, *tab, *ip, *allw, *pwords, *pbits;
} Tables;

static void tables_free(Tables *T) {
    Py_XDECREF(T->built);
    Py_XDECREF(T->groups);
    Py_XDECREF(T->tables);
    Py_XDECREF(T->indptr);
    Py_XDECREF(T->pw);
    Py_XDECREF(T->pb);
    Py_XDECREF(T->all);
    PyMem_Free(T->sizes);
    PyMem_Free(T->slot);
    PyMem_Free(T->last);
    PyMem_Free(T->cand);
    PyMem_Free(T->fill);
    PyMem_Free(T->rest_ids);
    PyMem_Free(T->rest_classes);
    PyMem_Free(T->small_at);
    PyMem_Free(T->row_of);
    PyMem_Free(T->small);
    PyMem_Free(T->scratch);
    PyMem_Free(T->guess_bits);
    if (T->defer_b.obj) PyBuffer_Release(&T->defer_b);
    if (T->listed_b.obj) PyBuffer_Release(&T->listed_b);
    if (T->lc_b.obj) PyBuffer_Release(&T->lc_b);
    if (T->co_b.obj) PyBuffer_Release(&T->co_b);
}

/* The optional arguments' buffers, checked against each other; -1 with the exception set. */
static int tables_options(Tables *T, PyObject *defer_obj, PyObject *listed_obj, PyObject *lc_obj) {
    if (defer_obj != Py_None) {
        if (PyObject_GetBuffer(defer_obj, &T->defer_b, PyBUF_SIMPLE) < 0) return -1;
        if (!T->lazy || T->defer_b.len != T->k) {
            PyErr_SetString(PyExc_ValueError, "expansion_tables: defer needs lazy and one byte per class");
            return -1;
        }
        T->defer = (const uint8_t *)T->defer_b.buf;
    }
    if (listed_obj != Py_None) {
        if (PyObject_GetBuffer(listed_obj, &T->listed_b, PyBUF_SIMPLE) < 0) return -1;
        if (T->listed_b.len % 4) {
            PyErr_SetString(PyExc_ValueError, "expansion_tables: listed is not int32");
            return -1;
        }
        T->given = (const int32_t *)T->listed_b.buf;
        T->ngiven = T->listed_b.len / 4;
    }
    if (lc_obj != Py_None) {
        if (PyObject_GetBuffer(lc_obj, &T->lc_b, PyBUF_SIMPLE) < 0) return -1;
        if (!T->given || T->lc_b.len != T->listed_b.len) {
            PyErr_SetString(PyExc_ValueError, "expansion_tables: listed_classes needs listed, one class per id");
            return -1;
        }
        T->given_classes = (const int32_t *)T->lc_b.buf;
    }
    if (!T->co_b.obj && !T->given_classes) {
        PyErr_SetString(PyExc_ValueError, "expansion_tables: without class_of, listed and listed_classes are needed");
        return -1;
    }
    Py_ssize_t k1 = T->k ? T->k : 1;
    T->sizes = PyMem_Calloc((size_t)k1, sizeof(int64_t));
    T->slot = PyMem_Malloc((size_t)k1 * sizeof(int32_t));
    T->last = PyMem_Malloc((size_t)k1 * sizeof(int32_t));
    T->cand = PyMem_Malloc((size_t)k1 * sizeof(SizedClass));
    T->fill = PyMem_Malloc((size_t)k1 * sizeof(int32_t));
    T->guess_bits = PyMem_Calloc((size_t)(T->words ? T->words : 1), sizeof(uint32_t));
    /* every id at most once (only the pages written are touched) */
    size_t cap = (size_t)(T->v > T->ngiven ? T->v : T->ngiven) + 1;
    T->rest_ids = PyMem_Malloc(cap * sizeof(int32_t));
    T->rest_classes = PyMem_Malloc(cap * sizeof(int32_t));
    T->small_at = PyMem_Malloc(cap * sizeof(int32_t));
    T->row_of = PyMem_Malloc((size_t)k1 * sizeof(int32_t *));
    T->small = PyMem_Malloc((size_t)k1);
    T->scratch = PyMem_Malloc((size_t)(T->words ? T->words : 1) * sizeof(int32_t));
    if (!T->sizes || !T->slot || !T->last || !T->cand || !T->fill || !T->guess_bits || !T->rest_ids ||
        !T->rest_classes || !T->small_at || !T->row_of || !T->small || !T->scratch) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The caller lists the ids outside class 0, ascending (classing's numbering knows them): they are `rest`,
 * class 0 the guess, and class_of is read at them alone, not scanned (a small grammar's class map is then
 * read on the few pages it wrote: zero pages are never touched). */
static int count_listed(Tables *T) {
    const int32_t *given = T->given;
    T->guess = 0;
    for (Py_ssize_t w = 0; w < T->words; w++) T->guess_bits[w] = word_lanes(word_ids(T->v, w << 5));
    for (Py_ssize_t i = 0; i < T->ngiven; i++) {
        int32_t t = given[i], c;
        if (t < 0 || t >= T->v || (i && t <= given[i - 1]) ||
            (c = T->given_classes ? T->given_classes[i] : T->co[t]) == 0) {
            PyErr_SetString(PyExc_ValueError, "expansion_tables: listed ids are not class_of's ids outside class 0");
            return -1;
        }
        if ((uint32_t)c >= (uint32_t)T->k) {
            PyErr_SetString(PyExc_ValueError, "expansion_tables: class_of has ids outside [0, num_classes)");
            return -1;
        }
        T->sizes[c]++;
        if (!T->given_classes) { /* else the caller's arrays are read as they are */
            T->rest_ids[i] = t;
            T->rest_classes[i] = c;
        }
        T->guess_bits[t >> 5] &= ~((uint32_t)1 << (t & 31));
    }
    T->nrest = T->ngiven;
    T->rid = T->given_classes ? T->given : T->rest_ids; /* the caller's arrays where it gave both */
    T->rcls = T->given_classes ? T->given_classes : T->rest_classes;
    T->sizes[0] += T->v - T->nrest;
    T->from_given = 1;
    return 0;
}

/* The likeliest largest class: the commonest of 64 evenly spaced ids (ties to the lowest). */
static int32_t guess_class(const Tables *T) {
    int32_t seen[64], guess = 0;
    int nseen = 0, best = 0;
    for (int i = 0; i < 64 && T->v; i++) {
        int32_t c = T->co[(Py_ssize_t)((double)i * (double)T->v / 64.0)];
        if ((uint32_t)c < (uint32_t)T->k) seen[nseen++] = c;
    }
    for (int i = 0; i < nseen; i++) {
        int n = 0;
        for (int j = 0; j < nseen; j++) n += seen[j] == seen[i];
        if (n > best || (n == best && seen[i] < guess)) {
            best = n;
            guess = seen[i];
        }
    }
    return guess;
}

/* count_by_scan's loop over class_of: the counts and the list in locals (stores to sizes may alias T's fields);
 * -1: an id outside [0, k). */
static Py_ssize_t scan_class_map(Tables *T) {
    const int32_t *co = T->co, guess = T->guess;
    const Py_ssize_t v = T->v, k = T->k;
    int64_t *sizes = T->sizes;
    int32_t *ids = T->rest_ids, *classes = T->rest_classes;
    uint32_t *guess_bits = T->guess_bits;
    Py_ssize_t nrest = 0;
    for (Py_ssize_t base = 0; base < v; base += 32) {
        Py_ssize_t n = word_ids(v, base);
        uint32_t m = equal_bits(co + base, n, guess);
        guess_bits[base >> 5] = m;
        for (uint32_t others = ~m & word_lanes(n); others; others &= others - 1) {
            int j = __builtin_ctz(others);
            int32_t c = co[base + j];
            if ((uint32_t)c >= (uint32_t)k) return -1;
            sizes[c]++;
            ids[nrest] = (int32_t)(base + j);
            classes[nrest++] = c;
        }
    }
    return nrest;
}

/* One pass over class_of: the guess's tokens as each word's bits, every other token's id and class in
 * rest_ids / rest_classes, each checked and counted. */
static int count_by_scan(Tables *T) {
    Py_ssize_t nrest = T->k || !T->v ? scan_class_map(T) : -1;
    if (nrest < 0) {
        PyErr_SetString(PyExc_ValueError, "expansion_tables: class_of has ids outside [0, num_classes)");
        return -1;
    }
    T->nrest = nrest;
    if (T->k) T->sizes[T->guess] += T->v - T->nrest; /* every other id was counted in its class */
    T->rid = T->rest_ids;
    T->rcls = T->rest_classes;
    return 0;
}

/* The large classes: among those with min_tokens or more, the `most` largest. */
static void choose_large(Tables *T) {
    Py_ssize_t ncand = 0;
    for (Py_ssize_t c = 0; c < T->k; c++) {
        T->slot[c] = -1;
        if (T->sizes[c] >= T->min_tokens) {
            T->cand[ncand].size = T->sizes[c];
            T->cand[ncand++].id = (int32_t)c;
        }
    }
    qsort(T->cand, (size_t)ncand, sizeof(SizedClass), cmp_sized);
    T->nlarge = ncand < T->most ? ncand : T->most;
    T->ngroups = (T->nlarge + 3) / 4;
}

/* The arrays returned, rows 0 and 1 << b zeroed, the other codes all written later (lazy: by expand_row when
 * first needed, `built` saying which are; a writable bytearray then; row 0, never read, left as it is). */
static int make_outputs(Tables *T) {
    Py_ssize_t words = T->words, ngroups = T->ngroups, nlarge = T->nlarge;
    char *gd = NULL, *td = NULL, *ipd = NULL, *ad = NULL;
    T->groups = new_bytes(ngroups * 16, &gd);
    T->tables = T->lazy ? PyByteArray_FromStringAndSize(NULL, ngroups * 16 * words * 4)
                        : PyBytes_FromStringAndSize(NULL, ngroups * 16 * words * 4);
    if (T->tables) td = T->lazy ? PyByteArray_AS_STRING(T->tables) : PyBytes_AS_STRING(T->tables);
    if (T->lazy && !(T->built = PyByteArray_FromStringAndSize(NULL, ngroups * 16))) return -1;
    T->indptr = new_bytes((T->k + 1) * 4, &ipd);
    T->all = new_bytes(words * 4, &ad);
    if (!T->groups || !T->tables || !T->indptr || !T->all) return -1;
    int32_t *g = T->g = (int32_t *)gd, *tab = T->tab = (int32_t *)td;
    T->ip = (int32_t *)ipd;
    T->allw = (int32_t *)ad;
    for (Py_ssize_t i = 0; i < ngroups * 4; i++) g[i] = T->cand[i < nlarge ? i : nlarge - 1].id;
    char *bd = T->lazy ? PyByteArray_AS_STRING(T->built) : NULL;
    for (Py_ssize_t gi = 0; gi < ngroups; gi++)
        for (int code = 0; code < 16; code++) {
            int single = code && !(code & (code - 1));
            int make = single ? !(T->defer && T->defer[g[gi * 4 + __builtin_ctz((unsigned)code)]]) : code == 0 && !T->lazy;
            if (bd) bd[gi * 16 + code] = (char)(single && make); /* the singles, but deferred classes' */
            if (make) memset(tab + ((size_t)gi * 16 + code) * words, 0, (size_t)words * 4);
        }
    for (Py_ssize_t i = 0; i < nlarge; i++) T->slot[T->cand[i].id] = (int32_t)i;
    return 0;
}

/* A token (or a word of the guess class's tokens, `bits`) of class c in word w, as fill_rows counts it: a large
 * class's bits into its single row (unless deferred), a small class's into small_all and its pair count. */
static inline void flush_row(Tables *T, int32_t c, uint32_t bits, int32_t w) {
    int32_t s = T->slot[c];
    if (s >= 0) {
        if (!T->defer || !T->defer[c])
            T->tab[((size_t)(s >> 2) * 16 + ((size_t)1 << (s & 3))) * T->words + w] |= (int32_t)bits;
    } else {
        T->allw[w] |= (int32_t)bits;
        if (T->last[c] != w) {
            T->last[c] = w;
            T->ip[c + 1]++;
        }
    }
}

/* One pass over the tokens the first pass listed: the large classes' single rows (table row 1 << member),
 * the others' pair counts and which tokens are theirs (small_at); then the repeated last class's row and
 * (eager) the unions of every group. The rest's tokens branch-free (a class's row pointer and small flag
 * read per token: a branch on large / small per token cost more than the writes, ~8 ns a token). */
static void fill_rows(Tables *T) {
    const Py_ssize_t k = T->k, words = T->words, nlarge = T->nlarge, ngroups = T->ngroups;
    int32_t *tab = T->tab, *allw = T->allw, *ip = T->ip, *last = T->last, *small_at = T->small_at;
    int32_t **row_of = T->row_of;
    const uint8_t *small = T->small;
    for (Py_ssize_t c = 0; c < k; c++) {
        int32_t s = T->slot[c];
        last[c] = -1;
        T->small[c] = s < 0;
        row_of[c] = s >= 0 && !(T->defer && T->defer[c])
                        ? tab + ((size_t)(s >> 2) * 16 + ((size_t)1 << (s & 3))) * words : T->scratch;
    }
    for (Py_ssize_t w = 0; k && w < words && w * 32 < T->v; w++)
        if (T->guess_bits[w]) flush_row(T, T->guess, T->guess_bits[w], (int32_t)w);
    const int32_t *rid = T->rid, *rcls = T->rcls;
    Py_ssize_t nsmall = 0;
    for (Py_ssize_t i = 0; i < T->nrest; i++) {
        int32_t c = rcls[i], w = rid[i] >> 5, is_small = small[c];
        uint32_t bit = (uint32_t)1 << (rid[i] & 31);
        row_of[c][w] |= (int32_t)bit;
        allw[w] |= (int32_t)(bit & (0u - (uint32_t)is_small));
        ip[c + 1] += is_small & (last[c] != w);
        last[c] = w;
        small_at[nsmall] = (int32_t)i;
        nsmall += is_small;
    }
    T->nsmall = nsmall;
    /* the repeated last class: its row again (a deferred one's each made from class_of when needed) */
    for (Py_ssize_t i = nlarge; i < ngroups * 4 && !(T->defer && T->defer[T->cand[nlarge - 1].id]); i++)
        memcpy(tab + ((size_t)(i >> 2) * 16 + ((size_t)1 << (i & 3))) * words,
               tab + ((size_t)((nlarge - 1) >> 2) * 16 + ((size_t)1 << ((nlarge - 1) & 3))) * words, (size_t)words * 4);
    for (Py_ssize_t gi = 0; gi < ngroups && !T->lazy; gi++)
        for (int code = 3; code < 16; code++) {
            if (!(code & (code - 1))) continue;
            int32_t *dst = tab + ((size_t)gi * 16 + code) * words;
            const int32_t *a = tab + ((size_t)gi * 16 + (code & (code - 1))) * words;
            const int32_t *b = tab + ((size_t)gi * 16 + (code & -code)) * words;
            for (Py_ssize_t w = 0; w < words; w++) dst[w] = a[w] | b[w];
        }
    for (Py_ssize_t c = 0; c < k; c++) ip[c + 1] += ip[c];
}

/* A small class's token (or word of bits) in word w into its pairs, in word order. */
static inline void flush_pair(Tables *T, int32_t c, uint32_t bits, int32_t w) {
    if (T->last[c] != w) {
        T->last[c] = w;
        T->pwords[T->fill[c]] = w;
        T->pbits[T->fill[c]++] = (int32_t)bits;
    } else {
        T->pbits[T->fill[c] - 1] |= (int32_t)bits;
    }
}

/* The second pass, over the small classes' tokens alone (small_at; the guess class's words where it is
 * small): their (word, bits) pairs, by class and then word. */
static int fill_pairs(Tables *T) {
    Py_ssize_t npairs = T->ip[T->k];
    char *pwd = NULL, *pbd = NULL;
    T->pw = new_bytes(npairs * 4, &pwd);
    T->pb = new_bytes(npairs * 4, &pbd);
    if (!T->pw || !T->pb) return -1;
    T->pwords = (int32_t *)pwd;
    T->pbits = (int32_t *)pbd;
    for (Py_ssize_t c = 0; c < T->k; c++) {
        T->last[c] = -1;
        T->fill[c] = T->ip[c];
    }
    if (T->k && T->slot[T->guess] < 0)
        for (Py_ssize_t w = 0; w < T->words && w * 32 < T->v; w++)
            if (T->guess_bits[w]) flush_pair(T, T->guess, T->guess_bits[w], (int32_t)w);
    for (Py_ssize_t j = 0; j < T->nsmall; j++) {
        Py_ssize_t i = T->small_at[j];
        flush_pair(T, T->rcls[i], (uint32_t)1 << (T->rid[i] & 31), T->rid[i] >> 5);
    }
    return 0;
}

PyObject *expansion_tables(PyObject *self, PyObject *args) {
    (void)self;
    Tables T;
    memset(&T, 0, sizeof(T));
    T.v = -1;
    PyObject *co_obj, *defer_obj = Py_None, *listed_obj = Py_None, *lc_obj = Py_None, *result = NULL;
    if (!PyArg_ParseTuple(args, "Onnnn|pOOOn", &co_obj, &T.k, &T.most, &T.min_tokens, &T.words, &T.lazy, &defer_obj,
                          &listed_obj, &lc_obj, &T.v))
        return NULL;
    if (co_obj != Py_None && PyObject_GetBuffer(co_obj, &T.co_b, PyBUF_SIMPLE) < 0) return NULL;
    T.co = (const int32_t *)T.co_b.buf;
    if (T.co_b.obj) T.v = T.co_b.len / 4; /* else vocab_size */
    if ((T.co_b.obj && T.co_b.len % 4) || T.v < 0 || T.k < 0 || T.most < 0 || T.words < 0 || T.v > T.words * 32) {
        PyErr_SetString(PyExc_ValueError, "expansion_tables: class_of is not int32, or does not fit the row's words");
        goto done;
    }
    if (tables_options(&T, defer_obj, listed_obj, lc_obj) < 0) goto done;
    /* One pass over class_of: the tokens of the likeliest largest class `guess` (the commonest of 64 evenly
     * spaced ids: most of a small grammar's vocabulary is one class) as each word's bits in guess_bits, found
     * by one branch-free comparison of its 32 ids, and the other tokens' ids and classes in rest_ids /
     * rest_classes (ascending, as the scan meets them), each checked and counted. The passes below then read
     * those, not class_of again: fill_rows each listed token once, fill_pairs the small classes' alone. */
    if (T.given && T.k > 0) {
        if (count_listed(&T) < 0) goto done;
    } else {
        T.guess = guess_class(&T);
    }
    if (!T.from_given && count_by_scan(&T) < 0) goto done;
    choose_large(&T);
    if (make_outputs(&T) < 0) goto done;
    fill_rows(&T);
    if (fill_pairs(&T) < 0) goto done;
    result = T.lazy ? PyTuple_Pack(7, T.groups, T.tables, T.indptr, T.pw, T.pb, T.all, T.built)
                    : PyTuple_Pack(6, T.groups, T.tables, T.indptr, T.pw, T.pb, T.all);
done:
    tables_free(&T);
    return result;
}
