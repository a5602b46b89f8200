/* The native matcher's next-token mask of one state in one call (cfgzip_lab.native.matcher's
 * fill_next_token_bitmask; its Python path, walker.class_mask then rows.vocab_row, is the reference).
 *
 *   filler_new   the trie, the compiled store and the near rows (expand.c) of one engine, and the rows made
 *   fill_state   a state's packed vocabulary row written into a bitmask row
 *
 * The Python path pays ~2 µs a step around the work (a 4,000-bit int made from the trie's words and
 * hashed twice for the row memo, the numpy view and the copy); here a state met before is one lookup
 * and a 16 KB copy, a new state the trie walk, one hash of its class set's words and, for a new set, a
 * row from the nearest of the last ones (expand.c). Rows are kept per class set, states point at them;
 * both tables are dropped whole when the rows reach their bound (they hold finished rows only, so
 * dropping them never changes an answer).
 */
#include "native_rows.h"
#include "words.h"

/* A new class set's row is made from the nearest of this many of the last rows made (expand.c's
 * near_rows_make), read where they lie: no ring of copies. 48 rather than 16 (c_like and bython's
 * sample steps, Llama-3): 35-42% fewer classes XORed a row and a third fewer rows from scratch. */
#define FILL_NEAR 48
/* The state table's first size (entries; it doubles as states come, up to the bound's) */
#define FILL_STATES0 256

typedef struct {
    PyObject *trie, *store, *near; /* held: the capsules and the Words object */
    Py_ssize_t n64, words;         /* a class set's uint64 words, a row's int32 words */
    int64_t stop_class;            /* -1: none */
    Py_ssize_t n, cap, max_rows;   /* rows made, room for, bound */
    int32_t *rows;                 /* cap * words */
    uint64_t *sets;                /* cap * n64: each row's class set */
    uint64_t *hashes;              /* cap: each row's set hash */
    int64_t *skeys;                /* state table: keys (state, -1 free) and row slots */
    int32_t *svals;
    Py_ssize_t smask, sused, sfull; /* sfull: its size at the bound (both tables dropped past half of it) */
    int32_t *htab; /* set table: row slots (-1 free), by hash; at least twice the rows' room (cap) */
    Py_ssize_t hmask;
    uint64_t *scratch; /* n64 */
    int64_t state_hits, set_hits, made, drops;
} Filler;

static void filler_release(Filler *F) {
    Py_XDECREF(F->trie);
    Py_XDECREF(F->store);
    Py_XDECREF(F->near);
    PyMem_Free(F->rows);
    PyMem_Free(F->sets);
    PyMem_Free(F->hashes);
    PyMem_Free(F->skeys);
    PyMem_Free(F->svals);
    PyMem_Free(F->htab);
    PyMem_Free(F->scratch);
    PyMem_Free(F);
}

static void filler_free(PyObject *capsule) {
    Filler *F = (Filler *)PyCapsule_GetPointer(capsule, "cfgzip_filler");
    if (F) filler_release(F);
}

/* Both tables empty (the rows stay allocated, to be written again). */
static void filler_drop(Filler *F) {
    for (Py_ssize_t i = 0; i <= F->smask; i++) F->skeys[i] = -1;
    for (Py_ssize_t i = 0; i <= F->hmask; i++) F->htab[i] = -1;
    F->n = F->sused = 0;
}

/* filler_new(trie, store, near_rows, num_classes, vocab_words, stop_class, max_rows) -> capsule
 *   trie        trie_new's capsule; store: the compiled Words the states are nodes of
 *   near_rows   near_rows_new's capsule: its tables (the rows are made from this filler's own last ones)
 *   stop_class  the class whose bit a state that accepts the empty word gets (-1: none)
 *   max_rows    rows kept before both tables are dropped (each vocab_words int32) */
PyObject *filler_new(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *trie, *near;
    Words *store;
    Py_ssize_t k, words, max_rows;
    long long stop_class;
    if (!PyArg_ParseTuple(args, "OO!OnnLn", &trie, &WordsType, &store, &near, &k, &words, &stop_class, &max_rows))
        return NULL;
    if (!PyCapsule_IsValid(trie, "cfgzip_trie") || !PyCapsule_IsValid(near, "cfgzip_near_rows") || k < 1 ||
        words < 1 || max_rows < 1 || stop_class < -1 || stop_class >= k) {
        PyErr_SetString(PyExc_ValueError, "filler_new: not a trie and near rows, or sizes out of range");
        return NULL;
    }
    Filler *F = PyMem_Calloc(1, sizeof(Filler));
    if (!F) return PyErr_NoMemory();
    F->n64 = (k + 63) / 64;
    F->words = words;
    F->stop_class = stop_class;
    F->max_rows = max_rows;
    F->cap = max_rows < 64 ? max_rows : 64;
    /* Both tables start small and grow with the rows and states (the set table with the rows' room, the state
     * table by doubling): sized and cleared for the bound at once (4,096 rows with Llama-3: 416 KB written
     * before the first mask), they were 64 of a small schema's ~80 µs to make a filler in a warm worker. The
     * drops happen where they did: at the bound's sizes (sfull), whatever the tables' sizes now. */
    Py_ssize_t hsize = 1;
    while (hsize < 2 * F->cap) hsize <<= 1;
    Py_ssize_t ssize = 1;
    while (ssize < 8 * max_rows) ssize <<= 1;
    F->sfull = ssize;
    if (ssize > FILL_STATES0) ssize = FILL_STATES0;
    F->hmask = hsize - 1;
    F->smask = ssize - 1;
    F->rows = PyMem_Malloc((size_t)F->cap * words * 4);
    F->sets = PyMem_Malloc((size_t)F->cap * F->n64 * 8);
    F->hashes = PyMem_Malloc((size_t)F->cap * 8);
    F->skeys = PyMem_Malloc((size_t)ssize * 8);
    F->svals = PyMem_Malloc((size_t)ssize * 4);
    F->htab = PyMem_Malloc((size_t)hsize * 4);
    F->scratch = PyMem_Malloc((size_t)F->n64 * 8);
    if (!F->rows || !F->sets || !F->hashes || !F->skeys || !F->svals || !F->htab || !F->scratch) {
        filler_release(F);
        return PyErr_NoMemory();
    }
    F->trie = Py_NewRef(trie);
    F->store = Py_NewRef((PyObject *)store);
    F->near = Py_NewRef(near);
    filler_drop(F);
    PyObject *capsule = PyCapsule_New(F, "cfgzip_filler", filler_free);
    if (!capsule) filler_release(F);
    return capsule;
}

static uint64_t set_hash(const uint64_t *s, Py_ssize_t n64) {
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    for (Py_ssize_t w = 0; w < n64; w++) h = mix64(h ^ s[w]) + (uint64_t)w;
    return h;
}

/* The set table rebuilt at twice the rows' room `cap` from the rows' hashes; -1 when out of memory. */
static int grow_set_table(Filler *F, Py_ssize_t cap) {
    Py_ssize_t hsize = 1;
    while (hsize < 2 * cap) hsize <<= 1;
    if (hsize <= F->hmask + 1) return 0;
    int32_t *htab = PyMem_Malloc((size_t)hsize * 4);
    if (!htab) return -1;
    for (Py_ssize_t i = 0; i < hsize; i++) htab[i] = -1;
    for (Py_ssize_t r = 0; r < F->n; r++) {
        Py_ssize_t i = (Py_ssize_t)(F->hashes[r] & (uint64_t)(hsize - 1));
        while (htab[i] >= 0) i = (i + 1) & (hsize - 1);
        htab[i] = (int32_t)r;
    }
    PyMem_Free(F->htab);
    F->htab = htab;
    F->hmask = hsize - 1;
    return 0;
}

/* The state table at twice its size, its entries placed again; -1 when out of memory. */
static int grow_state_table(Filler *F) {
    Py_ssize_t size = 2 * (F->smask + 1), mask = size - 1;
    int64_t *keys = PyMem_Malloc((size_t)size * 8);
    int32_t *vals = PyMem_Malloc((size_t)size * 4);
    if (!keys || !vals) {
        PyMem_Free(keys);
        PyMem_Free(vals);
        return -1;
    }
    for (Py_ssize_t i = 0; i < size; i++) keys[i] = -1;
    for (Py_ssize_t j = 0; j <= F->smask; j++) {
        if (F->skeys[j] < 0) continue;
        Py_ssize_t i = (Py_ssize_t)(mix64((uint64_t)F->skeys[j]) & (uint64_t)mask);
        while (keys[i] >= 0) i = (i + 1) & mask;
        keys[i] = F->skeys[j];
        vals[i] = F->svals[j];
    }
    PyMem_Free(F->skeys);
    PyMem_Free(F->svals);
    F->skeys = keys;
    F->svals = vals;
    F->smask = mask;
    return 0;
}

/* The row slot of class set s (hash h), made now where no row has it; -1 with the exception set. */
static Py_ssize_t row_of_set(Filler *F, const uint64_t *s, uint64_t h) {
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)F->hmask);
    for (; F->htab[i] >= 0; i = (i + 1) & F->hmask) {
        int32_t r = F->htab[i];
        if (F->hashes[r] == h && !memcmp(F->sets + (size_t)r * F->n64, s, (size_t)F->n64 * 8)) {
            F->set_hits++;
            return r;
        }
    }
    if (F->n == F->cap) { /* room for twice as many rows, up to the bound */
        Py_ssize_t cap = F->cap * 2 < F->max_rows ? F->cap * 2 : F->max_rows;
        int32_t *rows = PyMem_Realloc(F->rows, (size_t)cap * F->words * 4);
        if (rows) F->rows = rows;
        uint64_t *sets = rows ? PyMem_Realloc(F->sets, (size_t)cap * F->n64 * 8) : NULL;
        if (sets) F->sets = sets;
        uint64_t *hashes = sets ? PyMem_Realloc(F->hashes, (size_t)cap * 8) : NULL;
        if (hashes) F->hashes = hashes;
        if (!hashes || grow_set_table(F, cap) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        F->cap = cap;
        i = (Py_ssize_t)(h & (uint64_t)F->hmask); /* the set is in no row: its free slot in the table now */
        while (F->htab[i] >= 0) i = (i + 1) & F->hmask;
    }
    Py_ssize_t r = F->n, ncand = 0;
    const uint64_t *cs[FILL_NEAR];
    const int32_t *cr[FILL_NEAR];
    for (Py_ssize_t c = r - 1; c >= 0 && ncand < FILL_NEAR; c--, ncand++) { /* the last rows made, newest first */
        cs[ncand] = F->sets + (size_t)c * F->n64;
        cr[ncand] = F->rows + (size_t)c * F->words;
    }
    if (near_rows_make(F->near, s, F->n64, F->rows + (size_t)r * F->words, F->words, cs, cr, ncand) < -1) return -1;
    memcpy(F->sets + (size_t)r * F->n64, s, (size_t)F->n64 * 8);
    F->hashes[r] = h;
    F->htab[i] = (int32_t)r;
    F->n++;
    F->made++;
    return r;
}

/* The row slot of `state`: looked up, else its class set walked and its row found or made (the tables
 * dropped first where the rows reached their bound); -1 with the exception set. */
static Py_ssize_t row_of_state(Filler *F, int64_t state) {
    Py_ssize_t i = (Py_ssize_t)(mix64((uint64_t)state) & (uint64_t)F->smask);
    for (; F->skeys[i] >= 0; i = (i + 1) & F->smask)
        if (F->skeys[i] == state) {
            F->state_hits++;
            return F->svals[i];
        }
    Words *S = (Words *)F->store;
    if (trie_class_set(F->trie, S, state, F->scratch, F->n64) < 0) return -1;
    if (F->stop_class >= 0 && S->acc[state]) F->scratch[F->stop_class >> 6] |= (uint64_t)1 << (F->stop_class & 63);
    uint64_t h = set_hash(F->scratch, F->n64);
    if (F->n == F->max_rows || 2 * (F->sused + 1) > F->sfull) { /* full: both tables start again */
        filler_drop(F);
        F->drops++;
        i = (Py_ssize_t)(mix64((uint64_t)state) & (uint64_t)F->smask);
    } else if (2 * (F->sused + 1) > F->smask + 1) { /* not full, but the state table is at half: twice as large */
        if (grow_state_table(F) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        i = (Py_ssize_t)(mix64((uint64_t)state) & (uint64_t)F->smask);
        while (F->skeys[i] >= 0) i = (i + 1) & F->smask;
    }
    Py_ssize_t r = row_of_set(F, F->scratch, h);
    if (r < 0) return -1;
    F->skeys[i] = state;
    F->svals[i] = (int32_t)r;
    F->sused++;
    return r;
}

/* fill_state(filler, state, bitmask, index) -> None: row `index` of bitmask (a writable C-contiguous 2-D
 * int32 buffer, rows of at least vocab_words words) starts with the packed vocabulary row of `state` (a
 * node of the store): the classes the trie walk gives, the stop class where the state accepts the empty
 * word (walker.class_mask, then rows.vocab_row); the rest of the bitmask row is left as it is. */
PyObject *fill_state(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self; /* METH_FASTCALL: no argument tuple, so a warm fill allocates no tracked object */
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "fill_state(filler, state, bitmask, index) takes 4 arguments");
        return NULL;
    }
    PyObject *capsule = args[0], *bitmask = args[2];
    long long state = PyLong_AsLongLong(args[1]);
    if (state == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t index = PyLong_AsSsize_t(args[3]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(bitmask, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Filler *F = (Filler *)PyCapsule_GetPointer(capsule, "cfgzip_filler");
    PyObject *result = NULL;
    Py_ssize_t nrows = out.ndim == 2 && out.shape ? out.shape[0] : -1;
    if (F && (nrows < 0 || out.itemsize != 4 || out.shape[1] < F->words || index < 0 || index >= nrows)) {
        PyErr_SetString(PyExc_ValueError, "fill_state: the bitmask is not a 2-D int32 array with that row");
    } else if (F) {
        Py_ssize_t r = row_of_state(F, state);
        if (r >= 0) {
            memcpy((int32_t *)out.buf + (size_t)index * out.shape[1], F->rows + (size_t)r * F->words,
                   (size_t)F->words * 4);
            result = Py_NewRef(Py_None);
        }
    }
    PyBuffer_Release(&out);
    return result;
}

/* filler_stats(filler) -> (state_hits, set_hits, rows_made, drops) */
PyObject *filler_stats(PyObject *self, PyObject *capsule) {
    (void)self;
    Filler *F = (Filler *)PyCapsule_GetPointer(capsule, "cfgzip_filler");
    if (!F) return NULL;
    return Py_BuildValue("LLLL", (long long)F->state_hits, (long long)F->set_hits, (long long)F->made,
                         (long long)F->drops);
}
