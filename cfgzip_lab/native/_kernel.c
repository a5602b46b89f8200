/* The native engine's compiled kernel: the mask of a parser state, in two parts, and its use.
 *
 *   trie_new / trie_mask  the class set of a state: its word DAG walked with the sigma_in trie
 *                         (used by cfgzip_lab.native.walk; the Python product walk is the reference)
 *   trie_arrays           the arrays trie_new takes, from the index's own (SigmaInIndex.kernel_arrays
 *                         is the reference)
 *   expand_row            a class set -> XGrammar's packed int32 vocabulary row
 *                         (used by cfgzip_lab.native.rows; the numpy path is the reference)
 *   expansion_tables      the tables expand_row reads, from class_of in two passes
 *                         (cfgzip_lab.kernels.union_tables is the reference)
 *   mask_logits           a packed vocabulary mask applied to CPU logits in place, for every engine
 *                         (used by cfgzip_lab.expand.apply_vocab_bitmask_inplace; XGrammar's CPU
 *                         apply_token_bitmask_inplace is the reference)
 *
 * Optional (the Python paths run where this module is absent, and the tests compare them bit for
 * bit). Built by `pip install -e .` / the wheel build (pyproject.toml,
 * tool.setuptools ext-modules, optional = true): a machine without a C compiler still installs.
 *
 * The same split as cfgzip_lab.kernels.cpu, without numpy's per-call costs and its 128k-byte
 * scratch row: the large classes are packed four at a time into tables of all 16 unions of their
 * rows (one OR of W words per group of four, none for a group with no class in the set), and the
 * small classes set (or clear, whichever touches fewer words) their bits directly in the packed row,
 * one precomputed (word, bits) pair per class and word.
 * Measured with Llama-3 (bython, 3,015 classes, 9,180 small-class tokens): see rows.py.
 */
#include "_kernel.h"

#include <string.h>
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

static PyObject *expand_row(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer set, groups, tables, indptr, words_b, bits_b, all_b, out, built = {0}, co_b = {0};
    PyObject *tables_obj, *built_obj = Py_None, *co_obj = Py_None;
    if (!PyArg_ParseTuple(args, "y*y*Oy*y*y*y*w*|OO", &set, &groups, &tables_obj, &indptr, &words_b, &bits_b, &all_b,
                          &out, &built_obj, &co_obj))
        return NULL;
    int lazy = built_obj != Py_None;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(tables_obj, &tables, lazy ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&set);
        PyBuffer_Release(&groups);
        PyBuffer_Release(&indptr);
        PyBuffer_Release(&words_b);
        PyBuffer_Release(&bits_b);
        PyBuffer_Release(&all_b);
        PyBuffer_Release(&out);
        return NULL;
    }
    if (lazy && PyObject_GetBuffer(built_obj, &built, PyBUF_WRITABLE) < 0) goto done;
    if (co_obj != Py_None && PyObject_GetBuffer(co_obj, &co_b, PyBUF_SIMPLE) < 0) goto done;
    Py_ssize_t words = out.len / 4, ngroups = groups.len / 16, nclasses = indptr.len / 4 - 1;
    const int32_t *ip = (const int32_t *)indptr.buf;
    if (tables.len != ngroups * 16 * words * 4 || all_b.len != out.len || words_b.len != bits_b.len || nclasses < 0 ||
        ip[nclasses] != words_b.len / 4 || set.len * 8 < nclasses || (lazy && built.len != ngroups * 16) ||
        (co_b.obj && (co_b.len % 4 || co_b.len / 4 > words * 32))) {
        PyErr_SetString(PyExc_ValueError, "expand_row: the tables do not fit each other or the output row");
        goto done;
    }
    const uint8_t *s = (const uint8_t *)set.buf;
    const int32_t *g = (const int32_t *)groups.buf;
    int32_t *t = (int32_t *)tables.buf; /* written only where `built` says a union row is not made yet */
    uint8_t *made = lazy ? (uint8_t *)built.buf : NULL;
    const int32_t *pw = (const int32_t *)words_b.buf, *pb = (const int32_t *)bits_b.buf;
    const int32_t *all = (const int32_t *)all_b.buf;
    int32_t *restrict row = (int32_t *)out.buf;
    Py_ssize_t set_len = set.len;
    int filled = 0;
    for (Py_ssize_t k = 0; k < ngroups; k++) {
        int code = in_set(s, set_len, g[4 * k]) | in_set(s, set_len, g[4 * k + 1]) << 1 |
                   in_set(s, set_len, g[4 * k + 2]) << 2 | in_set(s, set_len, g[4 * k + 3]) << 3;
        if (!code) continue;
        if (made && !made[k * 16 + code]) { /* first needed now: a deferred single, or a union */
            for (int rest = code; rest; rest &= rest - 1) {
                int low = rest & -rest;
                if (made[k * 16 + low]) continue;
                if (!co_b.obj) {
                    PyErr_SetString(PyExc_ValueError, "expand_row: a deferred single row needs class_of");
                    goto done;
                }
                single_row(t + ((size_t)k * 16 + low) * words, words, (const int32_t *)co_b.buf, co_b.len / 4,
                           g[4 * k + __builtin_ctz((unsigned)low)]);
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
        const int32_t *restrict src = t + ((size_t)k * 16 + code) * words;
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
    result = Py_None;
    Py_INCREF(result);
done:
    if (lazy && built.obj) PyBuffer_Release(&built);
    if (co_b.obj) PyBuffer_Release(&co_b);
    PyBuffer_Release(&set);
    PyBuffer_Release(&groups);
    PyBuffer_Release(&tables);
    PyBuffer_Release(&indptr);
    PyBuffer_Release(&words_b);
    PyBuffer_Release(&bits_b);
    PyBuffer_Release(&all_b);
    PyBuffer_Release(&out);
    return result;
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
 * built in one pass over class_of (three where no class holds most of the vocabulary, see below): the union tables of the `most` largest classes with at least
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

static PyObject *expansion_tables(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer co_b = {0}, defer_b = {0}, listed_b = {0}, lc_b = {0};
    Py_ssize_t k, most, min_tokens, words, vocab_size = -1;
    int lazy = 0;
    PyObject *co_obj, *defer_obj = Py_None, *listed_obj = Py_None, *lc_obj = Py_None;
    if (!PyArg_ParseTuple(args, "Onnnn|pOOOn", &co_obj, &k, &most, &min_tokens, &words, &lazy, &defer_obj, &listed_obj,
                          &lc_obj, &vocab_size))
        return NULL;
    if (co_obj != Py_None && PyObject_GetBuffer(co_obj, &co_b, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *defer = NULL;
    const int32_t *given = NULL; /* the caller's ids outside class 0 (see below) */
    const int32_t *given_classes = NULL; /* and their classes, where it gives no class_of */
    Py_ssize_t ngiven = 0;
    int from_given = 0;
    PyObject *result = NULL, *groups = NULL, *tables = NULL, *indptr = NULL, *pw = NULL, *pb = NULL, *all = NULL;
    PyObject *built = NULL;
    int64_t *sizes = NULL;
    int32_t *slot = NULL, *last = NULL, *fill = NULL, *rest = NULL, guess = 0;
    uint32_t *guess_bits = NULL;
    Py_ssize_t rest_cap = 0, nrest = 0;
    SizedClass *cand = NULL;
    const int32_t *co = (const int32_t *)co_b.buf;
    Py_ssize_t v = co_b.obj ? co_b.len / 4 : vocab_size;
    if ((co_b.obj && co_b.len % 4) || v < 0 || k < 0 || most < 0 || words < 0 || v > words * 32) {
        PyErr_SetString(PyExc_ValueError, "expansion_tables: class_of is not int32, or does not fit the row's words");
        goto done;
    }
    if (defer_obj != Py_None) {
        if (PyObject_GetBuffer(defer_obj, &defer_b, PyBUF_SIMPLE) < 0) goto done;
        if (!lazy || defer_b.len != k) {
            PyErr_SetString(PyExc_ValueError, "expansion_tables: defer needs lazy and one byte per class");
            goto done;
        }
        defer = (const uint8_t *)defer_b.buf;
    }
    if (listed_obj != Py_None) {
        if (PyObject_GetBuffer(listed_obj, &listed_b, PyBUF_SIMPLE) < 0) goto done;
        if (listed_b.len % 4) {
            PyErr_SetString(PyExc_ValueError, "expansion_tables: listed is not int32");
            goto done;
        }
        given = (const int32_t *)listed_b.buf;
        ngiven = listed_b.len / 4;
    }
    if (lc_obj != Py_None) {
        if (PyObject_GetBuffer(lc_obj, &lc_b, PyBUF_SIMPLE) < 0) goto done;
        if (!given || lc_b.len != listed_b.len) {
            PyErr_SetString(PyExc_ValueError, "expansion_tables: listed_classes needs listed, one class per id");
            goto done;
        }
        given_classes = (const int32_t *)lc_b.buf;
    }
    if (!co_b.obj && !given_classes) {
        PyErr_SetString(PyExc_ValueError, "expansion_tables: without class_of, listed and listed_classes are needed");
        goto done;
    }
    sizes = PyMem_Calloc((size_t)(k ? k : 1), sizeof(int64_t));
    slot = PyMem_Malloc((size_t)(k ? k : 1) * sizeof(int32_t));
    last = PyMem_Malloc((size_t)(k ? k : 1) * sizeof(int32_t));
    cand = PyMem_Malloc((size_t)(k ? k : 1) * sizeof(SizedClass));
    fill = PyMem_Malloc((size_t)(k ? k : 1) * sizeof(int32_t));
    if (!sizes || !slot || !last || !cand || !fill) {
        PyErr_NoMemory();
        goto done;
    }
    /* One pass over class_of: the tokens of the likeliest largest class `guess` (the commonest of 64
     * evenly spaced ids: most of a small grammar's vocabulary is one class) as each word's bits in
     * guess_bits, found by one branch-free comparison of its 32 ids, and the other tokens' ids in
     * `rest` (sorted, as the scan meets them), each checked and counted. The passes below then read
     * those, not class_of again. Where the guess leaves more than `rest` holds (a vocabulary with no
     * dominant class), `rest` is dropped and they scan class_of as before (FOR_WORDS). */
    guess_bits = PyMem_Malloc((size_t)(words ? words : 1) * sizeof(uint32_t));
    rest_cap = v / 8 + 64;
    rest = PyMem_Malloc((size_t)rest_cap * sizeof(int32_t));
    if (!guess_bits || !rest) {
        PyErr_NoMemory();
        goto done;
    }
    memset(guess_bits, 0, (size_t)(words ? words : 1) * sizeof(uint32_t));
    if (given && k > 0 && (ngiven <= rest_cap || given_classes)) {
        /* The caller lists the ids outside class 0, ascending (classing's numbering knows them): they
         * are `rest`, class 0 the guess, and class_of is read at them alone, not scanned (a small
         * grammar's class map is then read on the few pages it wrote: zero pages are never touched). */
        guess = 0;
        for (Py_ssize_t w = 0; w < words; w++) {
            guess_bits[w] = word_lanes(word_ids(v, w << 5));
        }
        for (Py_ssize_t i = 0; i < ngiven; i++) {
            int32_t t = given[i], c;
            if (t < 0 || t >= v || (i && t <= given[i - 1]) || (c = given_classes ? given_classes[i] : co[t]) == 0) {
                PyErr_SetString(PyExc_ValueError, "expansion_tables: listed ids are not class_of's ids outside class 0");
                goto done;
            }
            if ((uint32_t)c >= (uint32_t)k) {
                PyErr_SetString(PyExc_ValueError, "expansion_tables: class_of has ids outside [0, num_classes)");
                goto done;
            }
            sizes[c]++;
            if (i < rest_cap) rest[i] = t;
            guess_bits[t >> 5] &= ~((uint32_t)1 << (t & 31));
        }
        nrest = ngiven;
        sizes[0] += v - nrest;
        from_given = 1;
    } else {
        int32_t seen[64];
        int nseen = 0, best = 0;
        for (int i = 0; i < 64 && v; i++) {
            int32_t c = co[(Py_ssize_t)((double)i * (double)v / 64.0)];
            if ((uint32_t)c < (uint32_t)k) seen[nseen++] = c;
        }
        for (int i = 0; i < nseen; i++) {
            int n = 0;
            for (int j = 0; j < nseen; j++) n += seen[j] == seen[i];
            if (n > best || (n == best && seen[i] < guess)) {
                best = n;
                guess = seen[i];
            }
        }
    }
    if (!from_given) {
        int32_t bad = k == 0 && v > 0;
        for (Py_ssize_t base = 0; base < v && !bad; base += 32) {
            Py_ssize_t n = word_ids(v, base);
            uint32_t m = equal_bits(co + base, n, guess);
            guess_bits[base >> 5] = m;
            uint32_t others = ~m & word_lanes(n);
            while (others) {
                int j = __builtin_ctz(others);
                others &= others - 1;
                int32_t c = co[base + j];
                if ((uint32_t)c >= (uint32_t)k) {
                    bad = 1;
                    break;
                }
                sizes[c]++;
                if (nrest < rest_cap) rest[nrest] = (int32_t)(base + j);
                nrest++;
            }
        }
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "expansion_tables: class_of has ids outside [0, num_classes)");
            goto done;
        }
        if (k) sizes[guess] += v - nrest; /* every other id was counted in its class */
    }
    int listed = nrest <= rest_cap || (from_given && given_classes); /* the passes below read guess_bits and rest */
    /* rest's ids and classes: the caller's where it gave them, else rest and class_of */
#define REST_ID(i) (given_classes && from_given ? given[i] : rest[i])
#define REST_CLASS(i) (given_classes && from_given ? given_classes[i] : co[rest[i]])
    /* the large classes: among those with min_tokens or more, the `most` largest */
    Py_ssize_t ncand = 0;
    for (Py_ssize_t c = 0; c < k; c++) {
        slot[c] = -1;
        if (sizes[c] >= min_tokens) {
            cand[ncand].size = sizes[c];
            cand[ncand++].id = (int32_t)c;
        }
    }
    qsort(cand, (size_t)ncand, sizeof(SizedClass), cmp_sized);
    Py_ssize_t nlarge = ncand < most ? ncand : most, ngroups = (nlarge + 3) / 4;
    char *gd = NULL, *td = NULL, *ipd = NULL, *pwd = NULL, *pbd = NULL, *ad = NULL;
    groups = new_bytes(ngroups * 16, &gd);
    /* rows 0 and 1 << b zeroed below, the other codes all written (lazy: by expand_row when first needed,
     * `built` saying which are; a writable bytearray then; row 0, never read, left as it is) */
    tables = lazy ? PyByteArray_FromStringAndSize(NULL, ngroups * 16 * words * 4)
                  : PyBytes_FromStringAndSize(NULL, ngroups * 16 * words * 4);
    if (tables) td = lazy ? PyByteArray_AS_STRING(tables) : PyBytes_AS_STRING(tables);
    if (lazy && !(built = PyByteArray_FromStringAndSize(NULL, ngroups * 16))) goto done;
    indptr = new_bytes((k + 1) * 4, &ipd);
    all = new_bytes(words * 4, &ad);
    if (!groups || !tables || !indptr || !all) goto done;
    int32_t *g = (int32_t *)gd, *tab = (int32_t *)td, *ip = (int32_t *)ipd, *allw = (int32_t *)ad;
    for (Py_ssize_t i = 0; i < ngroups * 4; i++) g[i] = cand[i < nlarge ? i : nlarge - 1].id;
    char *bd = lazy ? PyByteArray_AS_STRING(built) : NULL;
    for (Py_ssize_t gi = 0; gi < ngroups; gi++)
        for (int code = 0; code < 16; code++) {
            int single = code && !(code & (code - 1));
            int make = single ? !(defer && defer[g[gi * 4 + __builtin_ctz((unsigned)code)]]) : code == 0 && !lazy;
            if (bd) bd[gi * 16 + code] = (char)(single && make); /* the singles, but deferred classes' */
            if (make) memset(tab + ((size_t)gi * 16 + code) * words, 0, (size_t)words * 4);
        }
    for (Py_ssize_t i = 0; i < nlarge; i++) slot[cand[i].id] = (int32_t)i;
    /* one pass: the large classes' single rows (table row 1 << member), the others' pair counts */
    for (Py_ssize_t c = 0; c < k; c++) last[c] = -1;
    /* Word by word: the tokens of the largest class (often most of the vocabulary) found by one
     * branch-free comparison of the word's 32 ids, the others one by one. */
    int32_t top = 0;
    for (Py_ssize_t c = 1; c < k; c++)
        if (sizes[c] > sizes[top]) top = (int32_t)c;
#define FOR_WORDS(TOKEN, TOP)                                                          \
    for (Py_ssize_t base = 0; base < v; base += 32) {                                  \
        int32_t w = (int32_t)(base >> 5);                                              \
        Py_ssize_t n = word_ids(v, base);                                              \
        uint32_t m = equal_bits(co + base, n, top);                                    \
        if (m) TOP(top, m, w);                                                         \
        uint32_t rest = ~m & word_lanes(n);                                            \
        while (rest) {                                                                 \
            int j = __builtin_ctz(rest);                                               \
            rest &= rest - 1;                                                          \
            TOKEN(co[base + j], (uint32_t)1 << j, w);                                  \
        }                                                                              \
    }
#define FLUSH_ROWS(c, bits, w)                                                         \
    do {                                                                               \
        int32_t s_ = slot[c];                                                          \
        if (s_ >= 0) {                                                                 \
            if (!defer || !defer[c])                                                   \
                tab[((size_t)(s_ >> 2) * 16 + ((size_t)1 << (s_ & 3))) * words + (w)] |= (int32_t)(bits); \
        } else {                                                                       \
            allw[w] |= (int32_t)(bits);                                                \
            if (last[c] != (w)) {                                                      \
                last[c] = (w);                                                         \
                ip[(c) + 1]++;                                                         \
            }                                                                          \
        }                                                                              \
    } while (0)
/* Each token once, word by word, as FLUSH(class, bits, word): from guess_bits and rest where the first
 * pass listed them, else by scanning class_of again (FOR_WORDS). */
#define FOR_TOKENS(FLUSH)                                                                                      \
    if (k && listed) {                                                                                         \
        for (Py_ssize_t w = 0; w < words && w * 32 < v; w++)                                                   \
            if (guess_bits[w]) FLUSH(guess, guess_bits[w], (int32_t)w);                                        \
        for (Py_ssize_t i = 0; i < nrest; i++) FLUSH(REST_CLASS(i), (uint32_t)1 << (REST_ID(i) & 31), REST_ID(i) >> 5); \
    } else if (k) {                                                                                            \
        FOR_WORDS(FLUSH, FLUSH)                                                                                \
    }
    FOR_TOKENS(FLUSH_ROWS)
    /* the repeated last class: its row again (a deferred one's each made from class_of when needed) */
    for (Py_ssize_t i = nlarge; i < ngroups * 4 && !(defer && defer[cand[nlarge - 1].id]); i++)
        memcpy(tab + ((size_t)(i >> 2) * 16 + ((size_t)1 << (i & 3))) * words,
               tab + ((size_t)((nlarge - 1) >> 2) * 16 + ((size_t)1 << ((nlarge - 1) & 3))) * words, (size_t)words * 4);
    for (Py_ssize_t gi = 0; gi < ngroups && !lazy; gi++)
        for (int code = 3; code < 16; code++) {
            if (!(code & (code - 1))) continue;
            int32_t *dst = tab + ((size_t)gi * 16 + code) * words;
            const int32_t *a = tab + ((size_t)gi * 16 + (code & (code - 1))) * words;
            const int32_t *b = tab + ((size_t)gi * 16 + (code & -code)) * words;
            for (Py_ssize_t w = 0; w < words; w++) dst[w] = a[w] | b[w];
        }
    for (Py_ssize_t c = 0; c < k; c++) ip[c + 1] += ip[c];
    Py_ssize_t npairs = ip[k];
    pw = new_bytes(npairs * 4, &pwd);
    pb = new_bytes(npairs * 4, &pbd);
    if (!pw || !pb) goto done;
    int32_t *pwords = (int32_t *)pwd, *pbits = (int32_t *)pbd;
    for (Py_ssize_t c = 0; c < k; c++) {
        last[c] = -1;
        fill[c] = ip[c];
    }
#define FLUSH_PAIRS(c, bits, w)                                                        \
    do {                                                                               \
        if (slot[c] < 0) {                                                             \
            if (last[c] != (w)) {                                                      \
                last[c] = (w);                                                         \
                pwords[fill[c]] = (w);                                                 \
                pbits[fill[c]++] = (int32_t)(bits);                                    \
            } else {                                                                   \
                pbits[fill[c] - 1] |= (int32_t)(bits);                                 \
            }                                                                          \
        }                                                                              \
    } while (0)
    FOR_TOKENS(FLUSH_PAIRS)
#undef FOR_WORDS
#undef FOR_TOKENS
#undef REST_ID
#undef REST_CLASS
#undef FLUSH_ROWS
#undef FLUSH_PAIRS
    result = lazy ? PyTuple_Pack(7, groups, tables, indptr, pw, pb, all, built)
                  : PyTuple_Pack(6, groups, tables, indptr, pw, pb, all);
done:
    Py_XDECREF(built);
    Py_XDECREF(groups);
    Py_XDECREF(tables);
    Py_XDECREF(indptr);
    Py_XDECREF(pw);
    Py_XDECREF(pb);
    Py_XDECREF(all);
    PyMem_Free(sizes);
    PyMem_Free(slot);
    PyMem_Free(last);
    PyMem_Free(cand);
    PyMem_Free(fill);
    PyMem_Free(rest);
    PyMem_Free(guess_bits);
    if (defer_b.obj) PyBuffer_Release(&defer_b);
    if (listed_b.obj) PyBuffer_Release(&listed_b);
    if (lc_b.obj) PyBuffer_Release(&lc_b);
    if (co_b.obj) PyBuffer_Release(&co_b);
    return result;
}

/* ---- the class mask of a parser state: the product walk of its word DAG with the sigma_in trie ----
 *
 * trie_new(ptr, syms, kids, dense_idx, dense, list_ptr, list_cls, words) keeps the trie as arrays
 * (cfgzip_lab.native.walk builds them from the SigmaInIndex): node t's children are syms/kids[ptr[t]:ptr[t+1]],
 * sorted by symbol; its class set is the dense row dense[dense_idx[t] * words : ...] (uint64) when
 * dense_idx[t] >= 0, else the classes list_cls[list_ptr[t]:list_ptr[t+1]].
 * trie_mask(trie, nodes, state, out) ORs into out (uint64[words], zeroed first) the class sets of every
 * trie node that a word of `state` spells from the root: the store's nodes (a list of (accepts, ((symbol,
 * child), ...)) tuples, edges sorted by symbol) are read, never written. The DAG is deterministic and the
 * trie a tree, so each (DAG node, trie node) pair is reached by one path only: no memo, no visited set.
 */
/* Release a trie's buffers and the trie itself (the capsule's destructor, or a failed trie_new). */
static void trie_release(Trie *t) {
    PyBuffer_Release(&t->ptr);
    PyBuffer_Release(&t->syms);
    PyBuffer_Release(&t->kids);
    PyBuffer_Release(&t->dense_idx);
    PyBuffer_Release(&t->dense);
    PyBuffer_Release(&t->list_ptr);
    PyBuffer_Release(&t->list_cls);
    PyMem_Free(t);
}

static void trie_free(PyObject *capsule) {
    Trie *t = (Trie *)PyCapsule_GetPointer(capsule, "cfgzip_trie");
    if (t) trie_release(t);
}

static PyObject *trie_new(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t words;
    Trie *t = PyMem_Calloc(1, sizeof(Trie));
    if (!t) return PyErr_NoMemory();
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*n", &t->ptr, &t->syms, &t->kids, &t->dense_idx, &t->dense, &t->list_ptr,
                          &t->list_cls, &words)) {
        PyMem_Free(t);
        return NULL;
    }
    t->words = words;
    t->nodes = t->ptr.len / 4 - 1;
    const int32_t *ptr = (const int32_t *)t->ptr.buf, *lp = (const int32_t *)t->list_ptr.buf;
    const int32_t *kids = (const int32_t *)t->kids.buf, *di = (const int32_t *)t->dense_idx.buf;
    const int32_t *lc = (const int32_t *)t->list_cls.buf;
    Py_ssize_t ne = t->syms.len / 4, nd = words > 0 ? t->dense.len / 8 / words : 0, nl = t->list_cls.len / 4;
    int ok = t->nodes >= 1 && words > 0 && t->kids.len == t->syms.len && t->dense_idx.len == t->nodes * 4 &&
             t->list_ptr.len == t->ptr.len && ptr[0] == 0 && ptr[t->nodes] == ne && lp[0] == 0 && lp[t->nodes] == nl &&
             t->dense.len == nd * words * 8;
    for (Py_ssize_t i = 0; ok && i < t->nodes; i++)
        ok = ptr[i] <= ptr[i + 1] && lp[i] <= lp[i + 1] && di[i] < nd;
    for (Py_ssize_t i = 0; ok && i < ne; i++) ok = kids[i] > 0 && kids[i] < t->nodes;
    for (Py_ssize_t i = 0; ok && i < nl; i++) ok = lc[i] >= 0 && lc[i] < words * 64;
    PyObject *capsule = ok ? PyCapsule_New(t, "cfgzip_trie", trie_free) : NULL;
    if (!capsule) {
        if (!ok) PyErr_SetString(PyExc_ValueError, "trie_new: the trie arrays do not fit each other");
        trie_release(t);
    }
    return capsule;
}

/* trie_arrays(edges, indptr, classes, nodes, dense_classes, words) -> (ptr, syms, kids, dense_idx, rows,
 * list_ptr, list_cls) as bytes, the arrays trie_new takes, from a SigmaInIndex's own arrays in one pass
 * each (cfgzip_lab.native.index.SigmaInIndex.kernel_arrays is the reference, equal array for array;
 * its numpy passes and the bool matrix of the dense rows took 4 ms of sql_select's engine):
 *   edges    int32[E * 3]: (parent, symbol, child), sorted by parent then symbol (None if they are not:
 *            the caller sorts them in numpy)
 *   indptr   int64[nodes + 1], classes int32[F]: node t's classes, classes[indptr[t]:indptr[t+1]]
 * A node with dense_classes classes or more gets a dense row of `words` uint64 (bit k: class k). */
static PyObject *trie_arrays(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer eb, ib, cb;
    Py_ssize_t nodes, dense_classes, words;
    if (!PyArg_ParseTuple(args, "y*y*y*nnn", &eb, &ib, &cb, &nodes, &dense_classes, &words)) return NULL;
    PyObject *result = NULL, *out[7] = {NULL};
    const int32_t *e = (const int32_t *)eb.buf, *cls = (const int32_t *)cb.buf;
    const int64_t *ip = (const int64_t *)ib.buf;
    Py_ssize_t ne = eb.len / 12, nc = cb.len / 4;
    if (eb.len % 12 || ib.len != (nodes + 1) * 8 || cb.len % 4 || nodes < 1 || words < 1 || ip[0] != 0 ||
        ip[nodes] != nc) {
        PyErr_SetString(PyExc_ValueError, "trie_arrays: the index arrays do not fit each other");
        goto done;
    }
    for (Py_ssize_t i = 0; i < ne; i++) {
        int32_t p = e[3 * i], k = e[3 * i + 2];
        if (p < 0 || p >= nodes || k <= 0 || k >= nodes) {
            PyErr_SetString(PyExc_ValueError, "trie_arrays: an edge names a node the index does not have");
            goto done;
        }
        if (i && (p < e[3 * i - 3] || (p == e[3 * i - 3] && e[3 * i + 1] < e[3 * i - 2]))) {
            result = Py_NewRef(Py_None); /* not sorted */
            goto done;
        }
    }
    Py_ssize_t ndense = 0, nlist = 0;
    for (Py_ssize_t t = 0; t < nodes; t++) {
        int64_t c = ip[t + 1] - ip[t];
        if (c < 0) {
            PyErr_SetString(PyExc_ValueError, "trie_arrays: the class lists are not in order");
            goto done;
        }
        if (c >= dense_classes) ndense++;
        else nlist += c;
    }
    for (Py_ssize_t i = 0; i < nc; i++)
        if (cls[i] < 0 || cls[i] >= words * 64) {
            PyErr_SetString(PyExc_ValueError, "trie_arrays: a class past the rows' words");
            goto done;
        }
    char *d[7];
    Py_ssize_t sizes[7] = {(nodes + 1) * 4, ne * 4, ne * 4, nodes * 4, ndense * words * 8, (nodes + 1) * 4, nlist * 4};
    for (int a = 0; a < 7; a++) {
        out[a] = PyBytes_FromStringAndSize(NULL, sizes[a]);
        if (!out[a]) goto done;
        d[a] = PyBytes_AS_STRING(out[a]);
    }
    int32_t *ptr = (int32_t *)d[0], *syms = (int32_t *)d[1], *kids = (int32_t *)d[2], *di = (int32_t *)d[3];
    uint64_t *rows = (uint64_t *)d[4];
    int32_t *lptr = (int32_t *)d[5], *lcls = (int32_t *)d[6];
    memset(ptr, 0, (size_t)sizes[0]);
    memset(rows, 0, (size_t)sizes[4]);
    for (Py_ssize_t i = 0; i < ne; i++) {
        ptr[e[3 * i] + 1]++;
        syms[i] = e[3 * i + 1];
        kids[i] = e[3 * i + 2];
    }
    for (Py_ssize_t t = 0; t < nodes; t++) ptr[t + 1] += ptr[t];
    Py_ssize_t nd = 0, nl = 0;
    lptr[0] = 0;
    for (Py_ssize_t t = 0; t < nodes; t++) {
        if (ip[t + 1] - ip[t] >= dense_classes) {
            uint64_t *row = rows + (size_t)nd * words;
            for (int64_t j = ip[t]; j < ip[t + 1]; j++) row[cls[j] >> 6] |= (uint64_t)1 << (cls[j] & 63);
            di[t] = (int32_t)nd++;
        } else {
            di[t] = -1;
            for (int64_t j = ip[t]; j < ip[t + 1]; j++) lcls[nl++] = cls[j];
        }
        lptr[t + 1] = (int32_t)nl;
    }
    result = PyTuple_New(7);
    if (result)
        for (int a = 0; a < 7; a++) {
            PyTuple_SET_ITEM(result, a, out[a]);
            out[a] = NULL;
        }
done:
    for (int a = 0; a < 7; a++) Py_XDECREF(out[a]);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&ib);
    PyBuffer_Release(&cb);
    return result;
}

static int bad_store(void) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "trie_mask: not a word store node list");
    return -1;
}

static int trie_walk(const Trie *t, PyObject *nodes, Py_ssize_t node, Py_ssize_t tn, uint64_t *out) {
    if (node < 0 || node >= PyList_GET_SIZE(nodes)) return bad_store();
    PyObject *entry = PyList_GET_ITEM(nodes, node);
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) return bad_store();
    PyObject *edges = PyTuple_GET_ITEM(entry, 1);
    if (!PyTuple_Check(edges)) return bad_store();
    const int32_t *ptr = (const int32_t *)t->ptr.buf, *syms = (const int32_t *)t->syms.buf;
    const int32_t *kids = (const int32_t *)t->kids.buf, *di = (const int32_t *)t->dense_idx.buf;
    const int32_t *lp = (const int32_t *)t->list_ptr.buf, *lc = (const int32_t *)t->list_cls.buf;
    const uint64_t *dense = (const uint64_t *)t->dense.buf;
    Py_ssize_t ne = PyTuple_GET_SIZE(edges), j = ptr[tn], jend = ptr[tn + 1];
    for (Py_ssize_t i = 0; i < ne && j < jend; i++) {
        PyObject *e = PyTuple_GET_ITEM(edges, i);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) return bad_store();
        long sym = PyLong_AsLong(PyTuple_GET_ITEM(e, 0));
        if (sym == -1 && PyErr_Occurred()) return -1;
        while (j < jend && syms[j] < sym) j++; /* both sides sorted by symbol */
        if (j == jend || syms[j] != sym) continue;
        Py_ssize_t nt = kids[j];
        if (di[nt] >= 0) {
            const uint64_t *row = dense + (size_t)di[nt] * t->words;
            for (Py_ssize_t w = 0; w < t->words; w++) out[w] |= row[w];
        } else {
            for (Py_ssize_t k = lp[nt]; k < lp[nt + 1]; k++) out[lc[k] >> 6] |= (uint64_t)1 << (lc[k] & 63);
        }
        if (ptr[nt + 1] > ptr[nt]) {
            long child = PyLong_AsLong(PyTuple_GET_ITEM(e, 1));
            if (child == -1 && PyErr_Occurred()) return -1;
            if (child != 1 && trie_walk(t, nodes, child, nt, out) < 0) return -1; /* 1: the empty word */
        }
    }
    return 0;
}

static PyObject *trie_mask(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *nodes;
    Py_ssize_t state;
    Py_buffer out;
    if (!PyArg_ParseTuple(args, "OO!nw*", &capsule, &PyList_Type, &nodes, &state, &out)) return NULL;
    Trie *t = (Trie *)PyCapsule_GetPointer(capsule, "cfgzip_trie");
    PyObject *result = NULL;
    if (t && out.len != t->words * 8) PyErr_SetString(PyExc_ValueError, "trie_mask: out has the wrong size");
    if (t && !PyErr_Occurred()) {
        memset(out.buf, 0, out.len);
        if (trie_walk(t, nodes, state, 0, (uint64_t *)out.buf) == 0) {
            result = Py_None;
            Py_INCREF(result);
        }
    }
    PyBuffer_Release(&out);
    return result;
}

/* ---- a packed vocabulary mask applied to logits in place ----
 *
 * mask_logits(bitmask, bitmask_stride, logits, rows, width, elem, vocab, neg_inf)
 *   bitmask         int32 words, XGrammar's layout (bit t of the row: token t allowed)
 *   bitmask_stride  words from one bitmask row to the next (0: one row serves every logits row)
 *   logits          writable, C-contiguous rows x width elements of elem bytes (2: bf16/fp16, 4: fp32)
 *   vocab           positions [0, min(vocab, width, 32 * words of a row)) are masked; the rest stay
 *   neg_inf         the dtype's -inf bit pattern (its low elem bytes)
 * Writes -inf where a bit is 0 and leaves every other value as it was: a word of 32 refused tokens is
 * one run of 32 stores, a mixed word a select per byte of it (below). The GIL is released meanwhile, so
 * a decode loop's other thread (the next mask, the model) runs beside it.
 */
/* byte_lanes_T[b][i]: all ones where bit i of b is set. A mixed word is masked a byte (8 elements) at a
 * time through these, branch-free, which compilers vectorise with plain SSE2; a bit loop instead
 * mispredicts on real masks (bython with Llama-3: 92% of the words are mixed, a third of the bits 0). */
#define MASK_ROW(T)                                                                               \
    static T byte_lanes_##T[256][8];                                                              \
    static void init_lanes_##T(void) {                                                            \
        for (int b = 0; b < 256; b++)                                                             \
            for (int i = 0; i < 8; i++) byte_lanes_##T[b][i] = (b >> i) & 1 ? (T)~(T)0 : 0;       \
    }                                                                                             \
    static void mask_row_##T(T *restrict out, const int32_t *restrict bm, Py_ssize_t n, T neg) {  \
        Py_ssize_t full = n >> 5;                                                                 \
        for (Py_ssize_t w = 0; w < full; w++) {                                                   \
            uint32_t refused = ~(uint32_t)bm[w];                                                  \
            T *restrict base = out + (w << 5);                                                    \
            if (!refused) continue;                                                               \
            if (refused == 0xFFFFFFFFu) {                                                         \
                for (int i = 0; i < 32; i++) base[i] = neg;                                       \
                continue;                                                                         \
            }                                                                                     \
            for (int byte = 0; byte < 4; byte++) { /* fixed trip counts: vectorised */            \
                const T *restrict lanes = byte_lanes_##T[(refused >> (8 * byte)) & 0xFF];         \
                T *restrict p = base + 8 * byte;                                                  \
                for (int i = 0; i < 8; i++) p[i] = (p[i] & ~lanes[i]) | (neg & lanes[i]);         \
            }                                                                                     \
        }                                                                                         \
        if (n & 31) { /* the last, partial word: one store per refused position, none past n */  \
            uint32_t refused = ~(uint32_t)bm[full] & (((uint32_t)1 << (n & 31)) - 1);             \
            T *base = out + (full << 5);                                                          \
            while (refused) {                                                                     \
                base[__builtin_ctz(refused)] = neg;                                               \
                refused &= refused - 1;                                                           \
            }                                                                                     \
        }                                                                                         \
    }
MASK_ROW(uint16_t)
MASK_ROW(uint32_t)

static PyObject *mask_logits(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bitmask, logits;
    Py_ssize_t stride, rows, width, elem, vocab;
    unsigned long long neg;
    if (!PyArg_ParseTuple(args, "y*nw*nnnnK", &bitmask, &stride, &logits, &rows, &width, &elem, &vocab, &neg))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t words = stride > 0 ? stride : bitmask.len / 4;
    Py_ssize_t n = vocab < width ? vocab : width;
    if (n > 32 * words) n = 32 * words;
    if ((elem != 2 && elem != 4) || rows < 0 || width < 0 || vocab < 0 || stride < 0 ||
        logits.len != rows * width * elem || bitmask.len % 4 || (stride > 0 && bitmask.len < rows * stride * 4) ||
        (stride == 0 && rows > 0 && words == 0)) {
        PyErr_SetString(PyExc_ValueError, "mask_logits: the bitmask and logits do not fit each other");
        goto done;
    }
    const int32_t *bm = (const int32_t *)bitmask.buf;
    char *out = (char *)logits.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < rows && n > 0; r++) {
        const int32_t *row_bits = bm + r * stride;
        char *row = out + r * width * elem;
        if (elem == 2)
            mask_row_uint16_t((uint16_t *)row, row_bits, n, (uint16_t)neg);
        else
            mask_row_uint32_t((uint32_t *)row, row_bits, n, (uint32_t)neg);
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&bitmask);
    PyBuffer_Release(&logits);
    return result;
}

static PyMethodDef methods[] = {
    {"expand_row", expand_row, METH_VARARGS, "class set bytes -> packed int32 vocabulary row (see _kernel.c)"},
    {"expansion_tables", expansion_tables, METH_VARARGS, "class_of -> the tables expand_row reads (see _kernel.c)"},
    {"trie_new", trie_new, METH_VARARGS, "the sigma_in trie as arrays, for trie_mask (see _kernel.c)"},
    {"trie_arrays", trie_arrays, METH_VARARGS, "a SigmaInIndex's arrays -> the arrays trie_new takes (see _kernel.c)"},
    {"trie_mask", trie_mask, METH_VARARGS, "the class set of a parser state: its DAG walked with the trie (see _kernel.c)"},
    {"mask_logits", mask_logits, METH_VARARGS, "a packed vocabulary mask applied to CPU logits in place (see _kernel.c)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernel", "The native engine's compiled kernel (trie walk, expansion, masking logits).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernel(void) {
    init_lanes_uint16_t();
    init_lanes_uint32_t();
    PyObject *m = PyModule_Create(&module);
    if (m && words_add_to_module(m) < 0) Py_CLEAR(m);
    /* what cfgzip_lab/_binding.py checks: raise both together when the module's API changes */
    if (m && PyModule_AddIntConstant(m, "ABI_VERSION", 1) < 0) Py_CLEAR(m);
    return m;
}
