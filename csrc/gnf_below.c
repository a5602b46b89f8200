/* The stack adjacency merging refines over (cfgzip_lab.grammar.gnf.stack_below, the reference), as sorted
 * sets: below[Bi] holds B(i+1) for every word's neighbours, below[start] holds BOTTOM, and below[a] flows
 * into below[b] for every b ending some word of a's tails (ends[a]), to the least fixpoint. Its sets are
 * small (MaskBench Github_hard o48425: 22,100 rows, 1.4 members a row on average), and the bitsets of
 * gnf_merge.c's gnf_below_bits spent their time on the empty words of rows n + nf bits wide (merging took
 * 370 ms there, 250 of them in the bitsets: calloc'd rows of 346 words each, then scanned whole). The sets
 * here cost what they hold; past BELOW_SPARSE_LIMIT entries the bitsets take over (gnf_below_sets), so the
 * memory bound is theirs. tests/test_gnf_passes.py compares both with the Python walk. */
#include "gnf_passes.h"

#define BELOW_SPARSE_LIMIT 8000000 /* entries of all the sets together (64 MB): past it, the bitsets */
static int64_t sparse_limit = BELOW_SPARSE_LIMIT;

/* below_sparse_limit(entries) -> the limit before: where the bitsets take over (tests set it to 0 to run
 * them on small grammars). */
PyObject *below_sparse_limit(PyObject *self, PyObject *arg) {
    long long limit = PyLong_AsLongLong(arg);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    int64_t before = sparse_limit;
    sparse_limit = limit < 0 ? BELOW_SPARSE_LIMIT : limit;
    return PyLong_FromLongLong(before);
}

typedef struct {
    int64_t *v;
    int64_t len, cap;
} Set;

typedef struct {
    Set *below, *ends;
    int64_t *lasts, *loff, lcap, total; /* lasts[r]: lasts[loff[r] .. loff[r + 1]), sorted */
    int64_t *mark, stamp, *scratch, scap, count;
} Sparse;

static int set_push(Set *s, int64_t x) {
    if (grow((void **)&s->v, &s->cap, s->len + 1, sizeof(int64_t)) < 0) return -1;
    s->v[s->len++] = x;
    return 0;
}

/* x into the scratch list unless it is there already (this stamp); -1 without memory. */
static inline int sp_add(Sparse *P, int64_t x) {
    if (P->mark[x] == P->stamp) return 0;
    P->mark[x] = P->stamp;
    if (grow((void **)&P->scratch, &P->scap, P->count + 1, sizeof(int64_t)) < 0) return -1;
    P->scratch[P->count++] = x;
    return 0;
}

/* The scratch list sorted into s (empty before); -1 without memory. */
static int sp_flush(Sparse *P, Set *s) {
    qsort(P->scratch, (size_t)P->count, sizeof(int64_t), cmp_i64);
    if (grow((void **)&s->v, &s->cap, P->count + 1, sizeof(int64_t)) < 0) return -1;
    memcpy(s->v, P->scratch, (size_t)P->count * sizeof(int64_t));
    s->len = P->count;
    P->total += P->count;
    return 0;
}

/* Each tail node's last symbols (lasts, children first as numbered) and the neighbours' pairs into below
 * (unsorted, repeated); -1 without memory, 1 past the limit. */
static int sp_lasts(Sparse *P, Words *S, int64_t n, int64_t nf, const int32_t *dense, const int32_t *order, int64_t R) {
    P->loff[0] = 0;
    for (int64_t r = 0; r < R; r++) {
        int64_t node = order[r];
        P->stamp++;
        P->count = 0;
        for (int64_t i = S->estart[node]; i < S->estart[node + 1]; i++) {
            int64_t sym = below_key_of(S->esym[i], n, nf), c = S->ekid[i];
            if (S->acc[c] && sp_add(P, sym) < 0) return -1;
            if (dense[c] >= 0)
                for (int64_t j = P->loff[dense[c]]; j < P->loff[dense[c] + 1]; j++)
                    if (sp_add(P, P->lasts[j]) < 0) return -1;
            for (int64_t j = S->estart[c]; j < S->estart[c + 1]; j++)
                if (set_push(&P->below[sym], below_key_of(S->esym[j], n, nf)) < 0) return -1;
            P->total += S->estart[c + 1] - S->estart[c];
        }
        qsort(P->scratch, (size_t)P->count, sizeof(int64_t), cmp_i64);
        if (grow((void **)&P->lasts, &P->lcap, P->loff[r] + P->count + 1, sizeof(int64_t)) < 0) return -1;
        memcpy(P->lasts + P->loff[r], P->scratch, (size_t)P->count * sizeof(int64_t));
        P->loff[r + 1] = P->loff[r] + P->count;
        P->total += P->count;
        if (P->total > sparse_limit) return 1;
    }
    return 0;
}

/* ends[a] (the lasts of a's tails) for every row, the family rows as gnf_merge.c's below_families: family
 * f's row n + f ends itself and the item's last symbols, and sits under them. -1 without memory. */
static int sp_ends(Sparse *P, int64_t **rows, const Py_ssize_t *lens, int64_t n, const int64_t *fitems, int64_t nf,
                   const int32_t *dense) {
    for (int64_t a = 0; a < n + nf; a++) {
        int64_t item = a < n ? a : fitems[a - n];
        P->stamp++;
        P->count = 0;
        if (a >= n && sp_add(P, a) < 0) return -1;
        for (Py_ssize_t k = 0; k < lens[item]; k++) {
            int64_t r = dense[rows[item][k]];
            for (int64_t j = P->loff[r]; j < P->loff[r + 1]; j++) {
                if (sp_add(P, P->lasts[j]) < 0) return -1;
                if (a >= n && set_push(&P->below[P->lasts[j]], a) < 0) return -1;
            }
        }
        if (sp_flush(P, &P->ends[a]) < 0) return -1;
    }
    return 0;
}

/* below[b] |= below[a] (both sorted); *grew set where b gained a member. -1 without memory. */
static int set_union(Set *b, const Set *a, Set *tmp, int *grew) {
    if (grow((void **)&tmp->v, &tmp->cap, a->len + b->len + 1, sizeof(int64_t)) < 0) return -1;
    int64_t i = 0, j = 0, k = 0;
    while (i < a->len || j < b->len) {
        int64_t x = j >= b->len || (i < a->len && a->v[i] < b->v[j]) ? a->v[i++] : b->v[j++];
        if (k && tmp->v[k - 1] == x) continue; /* in both */
        tmp->v[k++] = x;
    }
    *grew = k > b->len;
    if (*grew) {
        Set swap = *b;
        *b = *tmp;
        b->len = k;
        *tmp = swap;
    }
    return 0;
}

/* The least fixpoint: a worklist (FIFO, every row queued once to begin with), as gnf_below_bits's. -1
 * without memory, 1 past the limit. */
static int sp_fixpoint(Sparse *P, int64_t nb) {
    int rc = -1;
    int64_t *queue = malloc((size_t)(nb + 1) * sizeof(int64_t));
    uint8_t *inq = malloc((size_t)nb + 1);
    Set tmp = {0};
    if (!queue || !inq) goto done;
    for (int64_t a = 0; a < nb; a++) {
        queue[a] = a;
        inq[a] = 1;
    }
    for (int64_t head = 0, count = nb; count; count--, head = head + 1 == nb + 1 ? 0 : head + 1) {
        int64_t a = queue[head];
        inq[a] = 0;
        for (int64_t e = 0; e < P->ends[a].len; e++) {
            int64_t b = P->ends[a].v[e], before = P->below[b].len;
            int grew = 0;
            if (b == a) continue;
            if (set_union(&P->below[b], &P->below[a], &tmp, &grew) < 0) goto done;
            P->total += P->below[b].len - before;
            if (P->total > sparse_limit) {
                rc = 1;
                goto done;
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
done:
    free(queue);
    free(inq);
    free(tmp.v);
    return rc;
}

/* The tails' nodes numbered in post-order (children first): dense[node] (-1: not below any tail; S->n
 * entries) and order[r], R of them. -1 with a Python error set. */
int gnf_number_tails(Words *S, int64_t **rows, const Py_ssize_t *lens, int64_t n, int64_t nf, int32_t **dense_out,
                     int32_t **order_out, int64_t *R_out) {
    int64_t R = 0, *stack = NULL, cap = 0, top = 0;
    int32_t *dense = malloc((size_t)(S->n ? S->n : 1) * sizeof(int32_t));
    int32_t *order = malloc((size_t)(S->n ? S->n : 1) * sizeof(int32_t));
    if (!dense || !order) goto nomem;
    memset(dense, 0xFF, (size_t)S->n * sizeof(int32_t)); /* -1: not numbered yet */
    for (int64_t a = 0; a < n; a++)
        for (Py_ssize_t k = 0; k < lens[a]; k++) {
            if (dense[rows[a][k]] >= 0) continue;
            if (grow((void **)&stack, &cap, top + 1, sizeof(int64_t)) < 0) goto nomem;
            stack[top++] = rows[a][k];
            while (top) { /* a node is numbered once all its children are (a DAG: this ends) */
                int64_t node = stack[top - 1], e0 = S->estart[node], e1 = S->estart[node + 1];
                if (dense[node] >= 0) {
                    top--;
                    continue;
                }
                int pending = 0;
                if (grow((void **)&stack, &cap, top + (e1 - e0), sizeof(int64_t)) < 0) goto nomem;
                for (int64_t i = e0; i < e1; i++) {
                    int64_t c = S->ekid[i];
                    if (below_key_of(S->esym[i], n, nf) < 0) {
                        PyErr_SetString(PyExc_ValueError, "below_sets_of: a tail symbol is no nonterminal");
                        goto fail;
                    }
                    if (dense[c] < 0) {
                        stack[top++] = c;
                        pending = 1;
                    }
                }
                if (pending) continue;
                top--;
                dense[node] = (int32_t)R;
                order[R++] = (int32_t)node;
            }
        }
    free(stack);
    *dense_out = dense;
    *order_out = order;
    *R_out = R;
    return 0;
nomem:
    PyErr_NoMemory();
fail:
    free(stack);
    free(dense);
    free(order);
    return -1;
}

/* The sets as CSR, each row's members ascending (BOTTOM as nb): 0, or -1 without memory. */
static int sp_csr(Set *below, int64_t nb, int64_t **start_out, int64_t **list_out) {
    int64_t *start = malloc((size_t)(nb + 2) * sizeof(int64_t)), total = 0;
    if (!start) return -1;
    for (int64_t a = 0; a < nb; a++) {
        start[a] = total;
        total += below[a].len;
    }
    start[nb] = start[nb + 1] = total;
    int64_t *list = malloc((size_t)(total + 1) * sizeof(int64_t));
    if (!list) {
        free(start);
        return -1;
    }
    for (int64_t a = 0; a < nb; a++) memcpy(list + start[a], below[a].v, (size_t)below[a].len * sizeof(int64_t));
    *start_out = start;
    *list_out = list;
    return 0;
}

/* gnf.stack_below as sorted sets; 0, 1 past BELOW_SPARSE_LIMIT, -1 without memory. */
static int gnf_below_sparse(Words *S, int64_t **rows, const Py_ssize_t *lens, int64_t n, const int64_t *fitems,
                            int64_t nf, int64_t start, const int32_t *dense, const int32_t *order, int64_t R,
                            int64_t **start_out, int64_t **list_out) {
    int64_t nb = n + nf;
    int rc = -1;
    Sparse P = {0};
    P.below = calloc((size_t)nb + 1, sizeof(Set));
    P.ends = calloc((size_t)nb + 1, sizeof(Set));
    P.loff = malloc((size_t)(R + 1) * sizeof(int64_t));
    P.mark = malloc((size_t)(nb + 1) * sizeof(int64_t));
    if (!P.below || !P.ends || !P.loff || !P.mark) goto done;
    for (int64_t x = 0; x <= nb; x++) P.mark[x] = -1;
    if (set_push(&P.below[start], nb) < 0) goto done; /* BOTTOM */
    if ((rc = sp_lasts(&P, S, n, nf, dense, order, R)) != 0) goto done;
    rc = -1;
    if (sp_ends(&P, rows, lens, n, fitems, nf, dense) < 0) goto done;
    for (int64_t a = 0; a < nb; a++) { /* the neighbours' pairs sorted, each once */
        Set *s = &P.below[a];
        qsort(s->v, (size_t)s->len, sizeof(int64_t), cmp_i64);
        int64_t k = 0;
        for (int64_t i = 0; i < s->len; i++)
            if (!k || s->v[k - 1] != s->v[i]) s->v[k++] = s->v[i];
        s->len = k;
    }
    if ((rc = sp_fixpoint(&P, nb)) != 0) goto done;
    rc = sp_csr(P.below, nb, start_out, list_out);
done:
    for (int64_t a = 0; P.below && a <= nb; a++) free(P.below[a].v);
    for (int64_t a = 0; P.ends && a <= nb; a++) free(P.ends[a].v);
    free(P.below);
    free(P.ends);
    free(P.loff);
    free(P.mark);
    free(P.lasts);
    free(P.scratch);
    if (rc < 0 && !PyErr_Occurred()) PyErr_NoMemory();
    return rc;
}

int gnf_below_sets(Words *S, int64_t **rows, const Py_ssize_t *lens, int64_t n, const int64_t *fitems, int64_t nf,
                   int64_t start, int64_t **start_out, int64_t **list_out, int32_t **dense_out, int32_t **order_out,
                   int64_t *R_out) {
    int32_t *dense = NULL, *order = NULL;
    int64_t R = 0, nb = n + nf;
    if (gnf_number_tails(S, rows, lens, n, nf, &dense, &order, &R) < 0) return -1;
    int rc = gnf_below_sparse(S, rows, lens, n, fitems, nf, start, dense, order, R, start_out, list_out);
    if (rc == 1) { /* large sets: the bitsets, read out as the sets */
        uint64_t *below = NULL;
        int64_t W = 0;
        rc = gnf_below_bits(S, rows, lens, n, fitems, nf, start, dense, order, R, &below, &W);
        if (rc == 0) {
            int64_t total = 0;
            for (int64_t i = 0; i < nb * W; i++) total += __builtin_popcountll(below[i]);
            int64_t *bs = malloc((size_t)(nb + 2) * sizeof(int64_t)), *bl = malloc((size_t)(total + 1) * sizeof(int64_t));
            if (!bs || !bl) {
                free(bs);
                free(bl);
                PyErr_NoMemory();
                rc = -1;
            } else {
                int64_t k = 0;
                for (int64_t a = 0; a < nb; a++) {
                    bs[a] = k;
                    for (int64_t w = 0; w < W; w++)
                        for (uint64_t bits = below[a * W + w]; bits; bits &= bits - 1) bl[k++] = w * 64 + __builtin_ctzll(bits);
                }
                bs[nb] = bs[nb + 1] = k;
                *start_out = bs;
                *list_out = bl;
            }
        }
        free(below);
    }
    if (rc == 0) {
        *dense_out = dense;
        *order_out = order;
        *R_out = R;
    } else {
        free(dense);
        free(order);
    }
    return rc;
}
