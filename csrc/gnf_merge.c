/* The normal form's merge of equivalent nonterminals (cfgzip_lab.grammar.gnf._merge_equivalent, the
 * reference; counted-repetition families merged too, through merge_table) and the stack adjacency it refines
 * over (gnf.stack_below: gnf_below.c's sorted sets, or the bitsets here where the sets are large;
 * below_sets_of without families): merge_equivalent, merge_table and below_sets_of. The other passes, and what the functions here share with
 * them (gnf_map, the node lists), are gnf_passes.c's; tests/test_gnf_passes.py compares each with its
 * Python walk. */
#include "gnf_passes.h"

/* stack_below's family rows: family f (item fitems[f]) is row n + f, read as F -> a T_X(a) F and
 * F -> a T_X(a): it ends its own tail and the item's last symbols end it, and it sits under them. */
static void below_families(uint64_t *below, uint64_t *ends, const uint64_t *lasts, const int32_t *dense,
                           int64_t **rows, const Py_ssize_t *lens, int64_t n, int64_t W, const int64_t *fitems,
                           int64_t nf) {
    for (int64_t f = 0; f < nf; f++) {
        int64_t me = n + f, item = fitems[f];
        ends[me * W + (me >> 6)] |= (uint64_t)1 << (me & 63);
        for (Py_ssize_t k = 0; k < lens[item]; k++) {
            const uint64_t *theirs = lasts + (int64_t)dense[rows[item][k]] * W;
            for (int64_t w = 0; w < W; w++) {
                ends[me * W + w] |= theirs[w];
                for (uint64_t bits = theirs[w]; bits; bits &= bits - 1)
                    below[(w * 64 + __builtin_ctzll(bits)) * W + (me >> 6)] |= (uint64_t)1 << (me & 63);
            }
        }
    }
}

/* gnf.stack_below over bitsets (rows[a]: the tails of a's row, lens[a] of them; family f, item fitems[f],
 * row n + f; bit nb = n + nf of a row stands for BOTTOM): below[Bi] holds B(i+1) for every word's
 * neighbours, and below[a] flows into below[b] for every b ending some word of a's tails. Over the tails'
 * nodes numbered children first (gnf_number_tails: dense, order, R). Returns 0 (*below_out: nb rows of
 * *W_out words), 1 past its memory bound (~128 MB: the caller takes the Python walk), -1 with a Python
 * error set. Reads the store only. gnf_below_sets's sets where they are large (gnf_below.c). */
int gnf_below_bits(Words *S, int64_t **rows, const Py_ssize_t *lens, int64_t n, const int64_t *fitems, int64_t nf,
                   int64_t start, const int32_t *dense, const int32_t *order, int64_t R, uint64_t **below_out,
                   int64_t *W_out) {
    int64_t nb = n + nf, W = (nb + 1 + 63) / 64;
    int rc = -1;
    uint64_t *below = NULL, *lasts = NULL, *ends = NULL;
    int64_t *queue = NULL;
    uint8_t *inq = NULL;
    if ((double)R * (double)W > 16e6 || (double)nb * (double)W > 16e6) { /* past ~128 MB: the Python walk */
        rc = 1;
        goto done;
    }
    below = calloc((size_t)nb * W + 1, sizeof(uint64_t));
    lasts = calloc((size_t)(R ? R : 1) * W, sizeof(uint64_t));
    ends = calloc((size_t)nb * W + 1, sizeof(uint64_t));
    if (!below || !lasts || !ends) goto nomem;
    below[start * W + nb / 64] |= (uint64_t)1 << (nb % 64);
    for (int64_t r = 0; r < R; r++) { /* children come before parents in `order` */
        int64_t node = order[r];
        uint64_t *mine = lasts + r * W;
        for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
            int64_t sym = below_key_of(S->esym[i], n, nf), c = S->ekid[i];
            if (S->acc[c]) mine[sym >> 6] |= (uint64_t)1 << (sym & 63);
            if (dense[c] >= 0) {
                const uint64_t *theirs = lasts + (int64_t)dense[c] * W;
                for (int64_t w = 0; w < W; w++) mine[w] |= theirs[w];
            }
            for (int64_t j = S->estart[c]; j < S->estart[c + 1]; j++) {
                int64_t next = below_key_of(S->esym[j], n, nf);
                below[sym * W + (next >> 6)] |= (uint64_t)1 << (next & 63);
            }
        }
    }
    for (int64_t a = 0; a < n; a++)
        for (Py_ssize_t k = 0; k < lens[a]; k++) {
            const uint64_t *theirs = lasts + (int64_t)dense[rows[a][k]] * W;
            for (int64_t w = 0; w < W; w++) ends[a * W + w] |= theirs[w];
        }
    below_families(below, ends, lasts, dense, rows, lens, n, W, fitems, nf);
    /* below[a] flows into below[b] for b in ends[a]: a worklist (FIFO, every a queued once to begin with)
     * until nothing grows; the least fixpoint, as the rounds over every a reached (fewer passes on chains) */
    queue = malloc((size_t)(nb + 1) * sizeof(int64_t));
    inq = malloc((size_t)nb + 1);
    if (!queue || !inq) goto nomem;
    for (int64_t a = 0; a < nb; a++) {
        queue[a] = a;
        inq[a] = 1;
    }
    for (int64_t head = 0, count = nb; count; count--, head = head + 1 == nb + 1 ? 0 : head + 1) {
        int64_t a = queue[head];
        inq[a] = 0;
        for (int64_t v = 0; v < W; v++)
            for (uint64_t bits = ends[a * W + v]; bits; bits &= bits - 1) {
                int64_t b = v * 64 + __builtin_ctzll(bits);
                int grew = 0;
                for (int64_t w = 0; w < W; w++) {
                    uint64_t more = below[a * W + w] & ~below[b * W + w];
                    if (more) {
                        below[b * W + w] |= more;
                        grew = 1;
                    }
                }
                if (grew && !inq[b]) {
                    inq[b] = 1;
                    int64_t tail = head + count;
                    queue[tail >= nb + 1 ? tail - (nb + 1) : tail] = b;
                    count++;
                }
            }
    }
    rc = 0;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    free(lasts);
    free(ends);
    free(queue);
    free(inq);
    if (rc == 0) {
        *below_out = below;
        *W_out = W;
    } else {
        free(below);
    }
    return rc;
}

/* A list of lists of node ids (mode 0) or of integers (mode 2) as C arrays: rows[a], lens[a]. */
static int gnf_rows(Words *S, PyObject *rows_obj, int64_t n, int mode, int64_t ***rows_out, Py_ssize_t **lens_out) {
    int64_t **rows = calloc((size_t)n + 1, sizeof(int64_t *));
    Py_ssize_t *lens = calloc((size_t)n + 1, sizeof(Py_ssize_t));
    *rows_out = rows;
    *lens_out = lens;
    if (!rows || !lens) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t a = 0; a < n; a++) {
        rows[a] = gnf_node_list(S, PyList_GET_ITEM(rows_obj, a), &lens[a], mode);
        if (!rows[a]) return -1;
    }
    return 0;
}

static void gnf_rows_free(int64_t **rows, Py_ssize_t *lens, int64_t n) {
    if (rows)
        for (int64_t a = 0; a < n; a++) free(rows[a]);
    free(rows);
    free(lens);
}

/* below_sets_of(rows, start, bottom) -> list of sets, or None past its memory bound: gnf.stack_below
 * for a table without families (rows[a]: the tails of a's row), `bottom` standing for BOTTOM. */
PyObject *words_below_sets_of(Words *S, PyObject *args) {
    PyObject *rows_obj, *bottom;
    long long start;
    if (!PyArg_ParseTuple(args, "O!LO", &PyList_Type, &rows_obj, &start, &bottom)) return NULL;
    int64_t n = PyList_GET_SIZE(rows_obj);
    if (start < 0 || start >= n) {
        PyErr_SetString(PyExc_ValueError, "below_sets_of: start out of range");
        return NULL;
    }
    PyObject *out = NULL;
    int64_t *bstart = NULL, *blist = NULL, R = 0;
    int32_t *dense = NULL, *order = NULL;
    int64_t **rows;
    Py_ssize_t *lens;
    if (gnf_rows(S, rows_obj, n, 0, &rows, &lens) < 0) goto done;
    int rc = gnf_below_sets(S, rows, lens, n, NULL, 0, start, &bstart, &blist, &dense, &order, &R);
    if (rc < 0) goto done;
    if (rc == 1) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    out = PyList_New(n);
    for (int64_t a = 0; out && a < n; a++) {
        PyObject *set = PySet_New(NULL);
        if (!set) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, a, set);
        for (int64_t j = bstart[a]; j < bstart[a + 1]; j++) {
            int64_t b = blist[j];
            PyObject *x = b == n ? Py_NewRef(bottom) : PyLong_FromLongLong(b);
            if (!x || PySet_Add(set, x) < 0) {
                Py_XDECREF(x);
                Py_CLEAR(out);
                break;
            }
            Py_DECREF(x);
        }
    }
done:
    gnf_rows_free(rows, lens, n);
    free(bstart);
    free(blist);
    free(dense);
    free(order);
    return out;
}

/* merge_equivalent(atoms, tails, start) -> (block, merged) or None: gnf._merge_equivalent for a table
 * without families (atoms[a], tails[a]: a's row in its dict order), None past the stack adjacency's memory
 * bound (gnf_below_bits: the Python walk). The same rounds as the Python walk: blocks first keyed by (a is the
 * start, a's atoms); a signature is (the blocks of a's below-set, BOTTOM as -1; a's tails renamed through
 * the blocks, gnf_map) and each touched block splits by signature, its first part (in nonterminal order)
 * keeping the id, the others numbered on in order; the renamed tails that read a moved nonterminal (and their
 * ancestors) are forgotten, and the nonterminals owning them or holding a moved one in their below-set are
 * signed again in nonterminal order (tails in row order: the nodes are made in the Python walk's order).
 * Then blocks numbered by first appearance, and every a's tails renamed through them in nonterminal order
 * with a fresh memo. `block`: that numbering per nonterminal; `merged[b]`: the renamed tails (row order) of
 * b's last member. */
/* The rows of a table (a list of dicts {atom: tail}) as C arrays, in each dict's order. */
static int gnf_dict_rows(Words *S, PyObject *table, int64_t n, int64_t ***atoms_out, Py_ssize_t **alens_out,
                         int64_t ***tails_out, Py_ssize_t **lens_out) {
    int64_t **atoms = calloc((size_t)n + 1, sizeof(int64_t *)), **tails = calloc((size_t)n + 1, sizeof(int64_t *));
    Py_ssize_t *alens = calloc((size_t)n + 1, sizeof(Py_ssize_t)), *lens = calloc((size_t)n + 1, sizeof(Py_ssize_t));
    *atoms_out = atoms;
    *alens_out = alens;
    *tails_out = tails;
    *lens_out = lens;
    if (!atoms || !tails || !alens || !lens) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t a = 0; a < n; a++) {
        PyObject *row = PyList_GET_ITEM(table, a);
        if (!PyDict_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "merge_table: a row is not a dict");
            return -1;
        }
        Py_ssize_t m = PyDict_GET_SIZE(row), pos = 0, k = 0;
        PyObject *key, *value;
        atoms[a] = malloc((size_t)(m ? m : 1) * sizeof(int64_t));
        tails[a] = malloc((size_t)(m ? m : 1) * sizeof(int64_t));
        if (!atoms[a] || !tails[a]) {
            PyErr_NoMemory();
            return -1;
        }
        alens[a] = lens[a] = m;
        while (PyDict_Next(row, &pos, &key, &value)) {
            long long atom = PyLong_AsLongLong(key), tail = PyLong_AsLongLong(value);
            if (((atom == -1 || tail == -1) && PyErr_Occurred()) || check_node(S, tail) < 0) return -1;
            atoms[a][k] = atom;
            tails[a][k] = tail;
            k++;
        }
    }
    return 0;
}

static PyObject *gnf_merge(Words *S, PyObject *atoms_obj, PyObject *tails_obj, PyObject *table, long long start);
static PyObject *gnf_merge_families(Words *S, PyObject *table, long long start, PyObject *items, PyObject *bounds);

PyObject *words_merge_equivalent(Words *S, PyObject *args) {
    PyObject *atoms_obj, *tails_obj;
    long long start;
    if (!PyArg_ParseTuple(args, "O!O!L", &PyList_Type, &atoms_obj, &PyList_Type, &tails_obj, &start)) return NULL;
    return gnf_merge(S, atoms_obj, tails_obj, NULL, start);
}

/* merge_table(table, start, family_items=(), family_bounds=()) -> (block, merged[, family_of]) or None:
 * merge_equivalent on a table of dicts (row order: each dict's), `merged[b]` a dict of b's last member's atoms
 * to the renamed tails: what gnf._merge_equivalent makes of merge_equivalent's answer, without the lists
 * between. With counted-repetition families (family f's item family_items[f], its bounds family_bounds[f] =
 * (min, max), max -1 when unbounded) they are merged as gnf._merge_equivalent merges them, and family_of
 * (the merged family of each) comes third. */
PyObject *words_merge_table(Words *S, PyObject *args) {
    PyObject *table, *items = NULL, *bounds = NULL;
    long long start;
    if (!PyArg_ParseTuple(args, "O!L|O!O!", &PyList_Type, &table, &start, &PyList_Type, &items, &PyList_Type, &bounds))
        return NULL;
    if (items && PyList_GET_SIZE(items)) {
        if (!bounds || PyList_GET_SIZE(bounds) != PyList_GET_SIZE(items)) {
            PyErr_SetString(PyExc_ValueError, "merge_table: one (min, max) per family item");
            return NULL;
        }
        return gnf_merge_families(S, table, start, items, bounds);
    }
    return gnf_merge(S, NULL, NULL, table, start);
}

/* gnf_merge's state: the rows, the stack adjacency, and the partition refinement's arrays (all freed by
 * merge_free; NULL is fine). */
typedef struct {
    Words *S;
    int64_t n, start;
    int64_t **atoms, **tails;
    Py_ssize_t *alens, *lens;
    int64_t *bls, *bll;       /* a's below-set: bll[bls[a] .. bls[a + 1]), ascending (gnf_below_sets) */
    int64_t R;                /* the tails' nodes, dense ids */
    int32_t *dense, *order;   /* node -> dense id (-1: none); dense id -> node */
    int64_t *off, *coff;      /* a's positions in perm / rt, its contexts in ctx */
    int64_t *perm, *rt, *ctx, *cl; /* row positions by atom; renamed tails; contexts, their count */
    uint64_t *sh;             /* a's hash: its first key, then its signature */
    int64_t *block, next_id;
    int64_t kcap, *keytab, *gtab, *grep, *gslot, *ghead, *gtail; /* keytab / gtab: open addressing, kcap */
    int64_t *mfirst, *mlast, *mnext, *mtmp; /* each block's members, ascending (linked) */
    /* over dense nodes: parents (p), the nodes with an edge on each nonterminal (b), the nonterminals whose
     * rows hold each node (o), those with each nonterminal in their below-set (u); CSR */
    int64_t *pstart, *plist, *bstart, *blist, *ostart, *olist, *ustart, *ulist, *fill;
    int64_t *touched, *moved, *affected, *stack, scap;
    uint32_t *seen, *amark, *bmark; /* round stamps */
    int32_t *memo;
    int64_t mlen;
    GnfPass P;
    int64_t *to_final, *last, nfinal;
    /* counted-repetition families: family f's item and bounds (max -1: unbounded), its representative (the
     * first family with its item's block and its bounds), those whose representative changed in a round,
     * the nodes with an edge on one of f's members (CSR over dense nodes), its merged family at the end */
    int64_t nf, nb, *fitems, *fmin, *fmax, *frep, *refam, nrefam, *fstart, *flist, *family_of, nfam_final;
} Merge;

static void merge_free(Merge *M) {
    gnf_rows_free(M->atoms, M->alens, M->n);
    gnf_rows_free(M->tails, M->lens, M->n);
    void *arrays[] = {M->bls, M->bll, M->dense,  M->order,  M->off,    M->perm,   M->block,    M->rt,     M->ctx,
                      M->coff,   M->cl,     M->sh,     M->keytab, M->gtab,   M->grep,     M->gslot,  M->ghead,
                      M->gtail,  M->mfirst, M->mlast,  M->mnext,  M->mtmp,   M->pstart,   M->plist,  M->bstart,
                      M->blist,  M->ostart, M->olist,  M->ustart, M->ulist,  M->fill,     M->touched, M->moved,
                      M->affected, M->stack, M->seen,  M->amark,  M->bmark,  M->memo,     M->to_final, M->last,
                      M->fitems, M->fmin,  M->fmax,  M->frep,   M->refam,  M->fstart,   M->flist,  M->family_of};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) free(arrays[i]);
}

/* The arrays of the refinement, each row's positions sorted by atom; -1 without memory. */
static int merge_alloc(Merge *M) {
    int64_t n = M->n, total = 0, ctotal = 0;
    M->off = malloc((size_t)(n + 1) * sizeof(int64_t));
    M->coff = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!M->off || !M->coff) return -1;
    for (int64_t a = 0; a < n; a++) {
        M->off[a] = total;
        total += M->lens[a];
        M->coff[a] = ctotal;
        ctotal += M->bls[a + 1] - M->bls[a];
    }
    M->off[n] = total;
    M->coff[n] = ctotal;
    M->kcap = 1;
    while (M->kcap < 2 * n + 2) M->kcap *= 2;
    size_t n1 = (size_t)(n + 1) * sizeof(int64_t);
    M->perm = malloc((size_t)(total + 1) * sizeof(int64_t));
    M->rt = malloc((size_t)(total + 1) * sizeof(int64_t));
    M->ctx = malloc((size_t)(ctotal + 1) * sizeof(int64_t));
    M->cl = calloc((size_t)n + 1, sizeof(int64_t));
    M->sh = calloc((size_t)n + 1, sizeof(uint64_t));
    M->keytab = malloc((size_t)M->kcap * sizeof(int64_t));
    M->gtab = malloc((size_t)M->kcap * sizeof(int64_t));
    int64_t **n_sized[] = {&M->block, &M->grep,  &M->gslot,   &M->ghead, &M->gtail,    &M->mfirst,
                           &M->mlast, &M->mnext, &M->mtmp,    &M->touched, &M->moved, &M->affected};
    for (size_t i = 0; i < sizeof(n_sized) / sizeof(n_sized[0]); i++)
        if (!(*n_sized[i] = malloc(n1))) return -1;
    M->amark = calloc((size_t)n + 1, sizeof(uint32_t));
    M->bmark = calloc((size_t)n + 1, sizeof(uint32_t));
    M->seen = calloc((size_t)M->R + 1, sizeof(uint32_t));
    M->memo = malloc((size_t)(M->S->n ? M->S->n : 1) * sizeof(int32_t));
    if (!M->perm || !M->rt || !M->ctx || !M->cl || !M->sh || !M->keytab || !M->gtab || !M->amark || !M->bmark ||
        !M->seen || !M->memo)
        return -1;
    M->mlen = M->S->n;
    memset(M->memo, 0xFF, (size_t)M->mlen * sizeof(int32_t));
    for (int64_t i = 0; i < M->kcap; i++) M->keytab[i] = M->gtab[i] = -1;
    for (int64_t a = 0; a < n; a++) { /* each row's positions sorted by atom (insertion sort: rows are short) */
        int64_t *p = M->perm + M->off[a];
        for (int64_t k = 0; k < M->lens[a]; k++) {
            int64_t j = k;
            while (j > 0 && M->atoms[a][p[j - 1]] > M->atoms[a][k]) {
                p[j] = p[j - 1];
                j--;
            }
            p[j] = k;
        }
    }
    return 0;
}

/* The first blocks: (a is the start, a's sorted atoms), numbered by first appearance. */
static void merge_first_blocks(Merge *M) {
    int64_t **atoms = M->atoms, *perm = M->perm, *off = M->off, start = M->start;
    uint64_t mask = (uint64_t)(M->kcap - 1);
    M->next_id = 0;
    for (int64_t a = 0; a < M->n; a++) {
        uint64_t h = mix64((uint64_t)(a == start) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)M->lens[a]);
        for (int64_t k = 0; k < M->lens[a]; k++) h = mix64(h ^ (uint64_t)atoms[a][perm[off[a] + k]]);
        M->sh[a] = h;
        for (uint64_t i = h & mask;; i = (i + 1) & mask) {
            int64_t r = M->keytab[i];
            if (r < 0) {
                M->keytab[i] = a;
                M->block[a] = M->next_id++;
                break;
            }
            if (M->sh[r] != h || (r == start) != (a == start) || M->lens[r] != M->lens[a]) continue;
            int same = 1;
            for (int64_t k = 0; same && k < M->lens[a]; k++)
                same = atoms[r][perm[off[r] + k]] == atoms[a][perm[off[a] + k]];
            if (same) {
                M->block[a] = M->block[r];
                break;
            }
        }
    }
}

/* BODY for every nonterminal b < n and family row n + f in a's below-set, ascending (BOTTOM, bit nb, left
 * out). */
#define FOR_BELOW(M, a, b, BODY)                                                                          \
    for (int64_t j_ = (M)->bls[a]; j_ < (M)->bls[(a) + 1]; j_++) {                                         \
        int64_t b = (M)->bll[j_];                                                                          \
        if (b < (M)->nb) BODY;                                                                             \
    }

/* The nodes (dense ids) with an edge on a member of each family f, CSR (fstart: nf + 1); -1 without memory. */
static int merge_family_index(Merge *M) {
    Words *S = M->S;
    int64_t nf = M->nf, R = M->R;
    M->fstart = calloc((size_t)nf + 2, sizeof(int64_t));
    if (!M->fstart) return -1;
    for (int64_t pass = 0; pass < 2; pass++) {
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = S->estart[M->order[r]]; i < S->estart[M->order[r] + 1]; i++) {
                int64_t key = below_key_of(S->esym[i], M->n, nf) - M->n;
                if (key < 0) continue;
                if (pass) M->flist[M->fill[key]++] = r; else M->fstart[key + 1]++;
            }
        if (pass) break;
        for (int64_t f = 0; f < nf; f++) M->fstart[f + 1] += M->fstart[f];
        M->flist = malloc((size_t)(M->fstart[nf] + 1) * sizeof(int64_t));
        if (!M->flist) return -1;
        memcpy(M->fill, M->fstart, (size_t)(nf + 1) * sizeof(int64_t));
    }
    return 0;
}

/* gnf._merge_equivalent's family_reps: family f's representative is the first family whose item is in the
 * block of f's and whose bounds are f's; the families whose representative changed appended to refam. */
static void merge_family_reps(Merge *M) {
    M->nrefam = 0;
    for (int64_t f = 0; f < M->nf; f++) {
        int64_t r = f, b = M->block[M->fitems[f]];
        for (int64_t g = 0; g < f; g++)
            if (M->fmin[g] == M->fmin[f] && M->fmax[g] == M->fmax[f] && M->block[M->fitems[g]] == b) {
                r = g;
                break;
            }
        if (r != M->frep[f]) {
            M->frep[f] = r;
            M->refam[M->nrefam++] = f;
        }
    }
}

/* The indexes over the tails' nodes (dense ids): parents, nodes with an edge on each nonterminal, the
 * nonterminals whose rows hold each node, and those with each nonterminal in their below-set. */
static int merge_indexes(Merge *M) {
    Words *S = M->S;
    int64_t n = M->n, R = M->R;
    const int32_t *dense = M->dense, *order = M->order;
    M->pstart = calloc((size_t)R + 2, sizeof(int64_t));
    M->bstart = calloc((size_t)n + 2, sizeof(int64_t));
    M->ostart = calloc((size_t)R + 2, sizeof(int64_t));
    M->ustart = calloc((size_t)M->nb + 2, sizeof(int64_t));
    M->fill = malloc((size_t)((R > M->nb ? R : M->nb) + 2) * sizeof(int64_t));
    if (!M->pstart || !M->bstart || !M->ostart || !M->ustart || !M->fill) return -1;
    if (merge_family_index(M) < 0) return -1;
    int64_t *pstart = M->pstart, *bstart = M->bstart, *ostart = M->ostart, *ustart = M->ustart, *fill = M->fill;
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = S->estart[order[r]]; i < S->estart[order[r] + 1]; i++) {
            pstart[dense[S->ekid[i]] + 1] += dense[S->ekid[i]] >= 0;
            if (S->esym[i] < n) bstart[S->esym[i] + 1]++; /* (a family member: merge_family_index) */
        }
    for (int64_t a = 0; a < n; a++) {
        for (int64_t k = 0; k < M->lens[a]; k++) ostart[dense[M->tails[a][k]] + 1]++;
        FOR_BELOW(M, a, b, ustart[b + 1]++)
    }
    for (int64_t r = 0; r < R; r++) {
        pstart[r + 1] += pstart[r];
        ostart[r + 1] += ostart[r];
    }
    for (int64_t a = 0; a < n; a++) bstart[a + 1] += bstart[a];
    for (int64_t a = 0; a < M->nb; a++) ustart[a + 1] += ustart[a];
    M->plist = malloc((size_t)(pstart[R] + 1) * sizeof(int64_t));
    M->blist = malloc((size_t)(bstart[n] + 1) * sizeof(int64_t));
    M->olist = malloc((size_t)(ostart[R] + 1) * sizeof(int64_t));
    M->ulist = malloc((size_t)(ustart[M->nb] + 1) * sizeof(int64_t));
    if (!M->plist || !M->blist || !M->olist || !M->ulist) return -1;
    memcpy(fill, pstart, (size_t)(R + 1) * sizeof(int64_t));
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = S->estart[order[r]]; i < S->estart[order[r] + 1]; i++) {
            int64_t c = dense[S->ekid[i]];
            if (c >= 0) M->plist[fill[c]++] = r;
        }
    memcpy(fill, bstart, (size_t)(n + 1) * sizeof(int64_t));
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = S->estart[order[r]]; i < S->estart[order[r] + 1]; i++)
            if (S->esym[i] < n) M->blist[fill[S->esym[i]]++] = r;
    memcpy(fill, ostart, (size_t)(R + 1) * sizeof(int64_t));
    for (int64_t a = 0; a < n; a++)
        for (int64_t k = 0; k < M->lens[a]; k++) M->olist[fill[dense[M->tails[a][k]]]++] = a;
    memcpy(fill, ustart, (size_t)(M->nb + 1) * sizeof(int64_t));
    for (int64_t a = 0; a < n; a++) FOR_BELOW(M, a, b, M->ulist[fill[b]++] = a)
    return 0;
}

/* signature(a): its contexts (the blocks of its below-set, BOTTOM -1) sorted and unique, its tails renamed
 * through the blocks in row order (gnf_map), and a hash of both; < 0 (an E_ code, raised) on error. */
static int64_t merge_sign(Merge *M, int64_t a) {
    int64_t *c = M->ctx + M->coff[a], len = 0, n = M->n;
    for (int64_t k = M->bls[a]; k < M->bls[a + 1]; k++) {
        int64_t b = M->bll[k], j = len++;
        int64_t v = b < n ? M->block[b] : b < M->nb ? n + M->frep[b - n] : -1; /* a family: its representative */
        while (j > 0 && c[j - 1] > v) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = v;
    }
    int64_t u = 0;
    for (int64_t j = 0; j < len; j++)
        if (j == 0 || c[j] != c[u - 1]) c[u++] = c[j];
    M->cl[a] = u;
    uint64_t h = 0x51ED27ULL + (uint64_t)u;
    for (int64_t j = 0; j < u; j++) h = mix64(h ^ (uint64_t)c[j]);
    int64_t *rt = M->rt + M->off[a], *perm = M->perm + M->off[a];
    for (int64_t k = 0; k < M->lens[a]; k++) {
        int64_t r = gnf_map(M->S, &M->P, M->tails[a][k], 0);
        if (r < 0) {
            raise_code(M->S, r);
            return r;
        }
        rt[k] = r;
    }
    for (int64_t k = 0; k < M->lens[a]; k++) h = mix64(h ^ (uint64_t)rt[perm[k]]);
    M->sh[a] = h;
    return 0;
}

/* Whether a and r have the same signature (merge_sign). */
static int merge_same(const Merge *M, int64_t r, int64_t a) {
    if (M->sh[r] != M->sh[a] || M->cl[r] != M->cl[a] || M->lens[r] != M->lens[a]) return 0;
    if (memcmp(M->ctx + M->coff[r], M->ctx + M->coff[a], (size_t)M->cl[a] * sizeof(int64_t))) return 0;
    const int64_t *pr = M->perm + M->off[r], *pa = M->perm + M->off[a];
    for (int64_t j = 0; j < M->lens[a]; j++)
        if (M->atoms[r][pr[j]] != M->atoms[a][pa[j]] || M->rt[M->off[r] + pr[j]] != M->rt[M->off[a] + pa[j]])
            return 0;
    return 1;
}

/* Block b split by signature: its first part (in nonterminal order) keeps the id, the others are numbered on
 * in order and their members appended to moved. */
static void merge_split(Merge *M, int64_t b, int64_t *nmoved) {
    int64_t nm = 0, ng = 0;
    uint64_t mask = (uint64_t)(M->kcap - 1);
    for (int64_t a = M->mfirst[b]; a >= 0; a = M->mnext[a]) M->mtmp[nm++] = a;
    for (int64_t k = 0; k < nm; k++) {
        int64_t a = M->mtmp[k], g = -1;
        uint64_t i = M->sh[a] & mask;
        for (;; i = (i + 1) & mask) {
            int64_t e = M->gtab[i];
            if (e < 0) break;
            if (merge_same(M, M->grep[e], a)) {
                g = e;
                break;
            }
        }
        if (g < 0) {
            g = ng++;
            M->gtab[i] = g;
            M->gslot[g] = (int64_t)i;
            M->grep[g] = a;
            M->ghead[g] = -1;
        }
        M->mnext[a] = -1;
        if (M->ghead[g] < 0) M->ghead[g] = a; else M->mnext[M->gtail[g]] = a;
        M->gtail[g] = a;
    }
    for (int64_t g = 0; g < ng; g++) M->gtab[M->gslot[g]] = -1;
    M->mfirst[b] = M->ghead[0];
    M->mlast[b] = M->gtail[0];
    for (int64_t g = 1; g < ng; g++) {
        int64_t id = M->next_id++;
        M->mfirst[id] = M->ghead[g];
        M->mlast[id] = M->gtail[g];
        for (int64_t a = M->ghead[g]; a >= 0; a = M->mnext[a]) {
            M->block[a] = id;
            M->moved[(*nmoved)++] = a;
        }
    }
}

static inline void merge_mark(Merge *M, int64_t a, uint32_t round, int64_t *naff) {
    if (M->amark[a] != round) {
        M->amark[a] = round;
        M->affected[(*naff)++] = a;
    }
}

/* Push the nodes list[start[i]..start[i + 1]) on M's stack; -1 without memory. */
static int merge_push(Merge *M, int64_t *top, const int64_t *start, const int64_t *list, int64_t i) {
    if (grow((void **)&M->stack, &M->scap, *top + (start[i + 1] - start[i]) + 1, sizeof(int64_t)) < 0) return -1;
    for (int64_t j = start[i]; j < start[i + 1]; j++) M->stack[(*top)++] = list[j];
    return 0;
}

/* The nonterminals to sign again after the moves of a round, ascending: the renamed tails that read a moved
 * nonterminal or a member of a family whose representative changed (refam), and their ancestors, are
 * forgotten (their memo entries), and the nonterminals owning them or holding a moved one (or such a family)
 * in their below-set are affected. -1 without memory. */
static int64_t merge_affected(Merge *M, int64_t nmoved, uint32_t round) {
    int64_t naff = 0, top = 0;
    for (int64_t k = 0; k < nmoved; k++)
        if (merge_push(M, &top, M->bstart, M->blist, M->moved[k]) < 0) return -1;
    for (int64_t k = 0; k < M->nrefam; k++)
        if (merge_push(M, &top, M->fstart, M->flist, M->refam[k]) < 0) return -1;
    while (top) {
        int64_t r = M->stack[--top];
        if (M->seen[r] == round) continue;
        M->seen[r] = round;
        if (M->order[r] < M->mlen) M->memo[M->order[r]] = -1;
        for (int64_t j = M->ostart[r]; j < M->ostart[r + 1]; j++) merge_mark(M, M->olist[j], round, &naff);
        if (grow((void **)&M->stack, &M->scap, top + (M->pstart[r + 1] - M->pstart[r]) + 1, sizeof(int64_t)) < 0)
            return -1;
        for (int64_t j = M->pstart[r]; j < M->pstart[r + 1]; j++) M->stack[top++] = M->plist[j];
    }
    for (int64_t k = 0; k < nmoved; k++)
        for (int64_t j = M->ustart[M->moved[k]]; j < M->ustart[M->moved[k] + 1]; j++)
            merge_mark(M, M->ulist[j], round, &naff);
    for (int64_t k = 0; k < M->nrefam; k++)
        for (int64_t j = M->ustart[M->n + M->refam[k]]; j < M->ustart[M->n + M->refam[k] + 1]; j++)
            merge_mark(M, M->ulist[j], round, &naff);
    qsort(M->affected, (size_t)naff, sizeof(int64_t), cmp_i64);
    return naff;
}

/* The rounds of the refinement until no block splits; 0, or < 0 (an exception set). */
static int merge_refine(Merge *M) {
    for (int64_t a = 0; a < M->n; a++)
        if (merge_sign(M, a) < 0) return -1;
    for (int64_t b = 0; b < M->next_id; b++) M->mfirst[b] = M->mlast[b] = -1; /* members of each block, ascending */
    for (int64_t a = 0; a < M->n; a++) {
        int64_t b = M->block[a];
        M->mnext[a] = -1;
        if (M->mlast[b] < 0) M->mfirst[b] = a; else M->mnext[M->mlast[b]] = a;
        M->mlast[b] = a;
    }
    int64_t ntouched = M->next_id;
    for (int64_t b = 0; b < M->next_id; b++) M->touched[b] = b;
    for (uint32_t round = 1;; round++) {
        int64_t nmoved = 0;
        for (int64_t t = 0; t < ntouched; t++) merge_split(M, M->touched[t], &nmoved);
        if (!nmoved) return 0;
        if (M->nf) merge_family_reps(M); /* a moved item can move its families to another representative */
        int64_t naff = merge_affected(M, nmoved, round);
        if (naff < 0) {
            PyErr_NoMemory();
            return -1;
        }
        ntouched = 0;
        for (int64_t k = 0; k < naff; k++) {
            int64_t a = M->affected[k];
            if (merge_sign(M, a) < 0) return -1;
            if (M->bmark[M->block[a]] != round) {
                M->bmark[M->block[a]] = round;
                M->touched[ntouched++] = M->block[a];
            }
        }
        qsort(M->touched, (size_t)ntouched, sizeof(int64_t), cmp_i64);
    }
}

/* Blocks numbered by first appearance; every row renamed through them with a fresh memo. */
static int merge_final(Merge *M) {
    int64_t n = M->n;
    M->to_final = malloc((size_t)(n + 1) * sizeof(int64_t));
    M->last = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!M->to_final || !M->last) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t b = 0; b < M->next_id; b++) M->touched[b] = -1; /* (next_id <= n) block -> final number */
    M->nfinal = 0;
    for (int64_t a = 0; a < n; a++) {
        if (M->touched[M->block[a]] < 0) M->touched[M->block[a]] = M->nfinal++;
        M->to_final[a] = M->touched[M->block[a]];
        M->last[M->to_final[a]] = a;
    }
    if (M->nf) { /* merged families numbered by first appearance of their representatives */
        M->family_of = malloc((size_t)M->nf * sizeof(int64_t));
        if (!M->family_of) {
            PyErr_NoMemory();
            return -1;
        }
        for (int64_t f = 0; f < M->nf; f++) M->refam[f] = -1; /* representative -> merged family */
        M->nfam_final = 0;
        for (int64_t f = 0; f < M->nf; f++) {
            if (M->refam[M->frep[f]] < 0) M->refam[M->frep[f]] = M->nfam_final++;
            M->family_of[f] = M->refam[M->frep[f]];
        }
        M->P.fto = M->family_of;
    }
    memset(M->memo, 0xFF, (size_t)M->mlen * sizeof(int32_t));
    M->P.to = M->to_final;
    for (int64_t a = 0; a < n; a++)
        for (int64_t k = 0; k < M->lens[a]; k++) {
            int64_t r = gnf_map(M->S, &M->P, M->tails[a][k], 0);
            if (r < 0) {
                raise_code(M->S, r);
                return -1;
            }
            M->rt[M->off[a] + k] = r;
        }
    return 0;
}

/* b's merged row: {atom: renamed tail} in a's row order (as_dict), else the renamed tails as a list. */
static PyObject *merge_row(const Merge *M, int64_t a, int as_dict) {
    PyObject *row = as_dict ? PyDict_New() : PyList_New(M->lens[a]);
    for (int64_t k = 0; row && k < M->lens[a]; k++) {
        PyObject *x = PyLong_FromLongLong(M->rt[M->off[a] + k]);
        if (!as_dict) {
            if (!x) Py_CLEAR(row);
            else PyList_SET_ITEM(row, k, x);
            continue;
        }
        PyObject *key = PyLong_FromLongLong(M->atoms[a][k]);
        int bad = !key || !x || PyDict_SetItem(row, key, x) < 0;
        Py_XDECREF(key);
        Py_XDECREF(x);
        if (bad) Py_CLEAR(row);
    }
    return row;
}

static PyObject *merge_result(const Merge *M, int as_dict) {
    PyObject *out = NULL, *blocks = PyList_New(M->n), *merged = PyList_New(M->nfinal);
    if (!blocks || !merged) goto done;
    for (int64_t a = 0; a < M->n; a++) {
        PyObject *x = PyLong_FromLongLong(M->to_final[a]);
        if (!x) goto done;
        PyList_SET_ITEM(blocks, a, x);
    }
    for (int64_t b = 0; b < M->nfinal; b++) {
        PyObject *row = merge_row(M, M->last[b], as_dict);
        if (!row) goto done;
        PyList_SET_ITEM(merged, b, row);
    }
    if (M->nf) {
        PyObject *fam = PyList_New(M->nf);
        for (int64_t f = 0; fam && f < M->nf; f++) {
            PyObject *x = PyLong_FromLongLong(M->family_of[f]);
            if (!x) Py_CLEAR(fam);
            else PyList_SET_ITEM(fam, f, x);
        }
        if (fam) out = PyTuple_Pack(3, blocks, merged, fam);
        Py_XDECREF(fam);
    } else {
        out = PyTuple_Pack(2, blocks, merged);
    }
done:
    Py_XDECREF(blocks);
    Py_XDECREF(merged);
    return out;
}

static PyObject *gnf_merge_run(Merge *M, PyObject *atoms_obj, PyObject *tails_obj, PyObject *table);

static PyObject *gnf_merge(Words *S, PyObject *atoms_obj, PyObject *tails_obj, PyObject *table, long long start) {
    Merge M;
    memset(&M, 0, sizeof(M));
    M.S = S;
    M.start = start;
    return gnf_merge_run(&M, atoms_obj, tails_obj, table);
}

/* merge_table with families: their items and bounds read into M, then the merge. */
static PyObject *gnf_merge_families(Words *S, PyObject *table, long long start, PyObject *items, PyObject *bounds) {
    Merge M;
    memset(&M, 0, sizeof(M));
    M.S = S;
    M.start = start;
    int64_t nf = PyList_GET_SIZE(items), n = PyList_GET_SIZE(table);
    M.nf = nf;
    M.fitems = malloc((size_t)nf * sizeof(int64_t));
    M.fmin = malloc((size_t)nf * sizeof(int64_t));
    M.fmax = malloc((size_t)nf * sizeof(int64_t));
    M.frep = malloc((size_t)nf * sizeof(int64_t));
    M.refam = malloc((size_t)nf * sizeof(int64_t));
    if (!M.fitems || !M.fmin || !M.fmax || !M.frep || !M.refam) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int64_t f = 0; f < nf; f++) {
        long long lo, hi;
        M.fitems[f] = PyLong_AsLongLong(PyList_GET_ITEM(items, f));
        if (PyErr_Occurred()) goto fail;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(bounds, f), "LL", &lo, &hi)) goto fail;
        if (M.fitems[f] < 0 || M.fitems[f] >= n) {
            PyErr_SetString(PyExc_ValueError, "merge_table: a family item is no row");
            goto fail;
        }
        M.fmin[f] = lo;
        M.fmax[f] = hi;
        M.frep[f] = -1;
    }
    return gnf_merge_run(&M, NULL, NULL, table);
fail:
    merge_free(&M);
    return NULL;
}

/* The merge of M's table (families set in M, or none); M freed. */
static PyObject *gnf_merge_run(Merge *M_, PyObject *atoms_obj, PyObject *tails_obj, PyObject *table) {
    Merge M = *M_;
    Words *S = M.S;
    long long start = M.start;
    int64_t n = table ? PyList_GET_SIZE(table) : PyList_GET_SIZE(atoms_obj);
    PyObject *out = NULL;
    M.n = n;
    M.nb = n + M.nf;
    if ((!table && PyList_GET_SIZE(tails_obj) != n) || start < 0 || start >= n) {
        PyErr_SetString(PyExc_ValueError, "merge_equivalent: rows differ in number, or start out of range");
        goto done;
    }
    if (table ? gnf_dict_rows(S, table, n, &M.atoms, &M.alens, &M.tails, &M.lens) < 0
              : (gnf_rows(S, atoms_obj, n, 2, &M.atoms, &M.alens) < 0 || gnf_rows(S, tails_obj, n, 0, &M.tails, &M.lens) < 0))
        goto done;
    for (int64_t a = 0; a < n; a++)
        if (M.alens[a] != M.lens[a]) {
            PyErr_SetString(PyExc_ValueError, "merge_equivalent: a row's atoms and tails differ in number");
            goto done;
        }
    int rc = gnf_below_sets(S, M.tails, M.lens, n, M.fitems, M.nf, start, &M.bls, &M.bll, &M.dense, &M.order, &M.R);
    if (rc < 0) goto done;
    if (rc == 1) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    if (merge_alloc(&M) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    merge_first_blocks(&M);
    if (merge_indexes(&M) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    merge_family_reps(&M);
    M.P.to = M.block;
    M.P.m = n;
    M.P.memo = M.memo;
    M.P.mlen = M.mlen;
    M.P.fto = M.frep;
    M.P.nfto = M.nf;
    if (merge_refine(&M) < 0 || merge_final(&M) < 0) goto done;
    out = merge_result(&M, table != NULL);
done:
    merge_free(&M);
    return out;
}

