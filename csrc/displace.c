/* The displacement step (cfgzip_lab.classes.displacement.Displacer, the reference): the configuration
 * set after one more byte class, with the rows of counted-repetition family members made on first use;
 * and what the step reads, set once per grammar: the normal form's table, its stack adjacency
 * (cfgzip_lab.grammar.gnf.stack_below) and its families (cfgzip_lab.grammar.counted). */
#include "words.h"

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
int64_t w_step(Words *S, int64_t node, int64_t atom) {
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
            /* only the words not zero in both: over the shorter of the two lists of them, ascending (a
             * counted schema's rows are ~250 words, a few of them set: the AND of every word was 88%
             * of w_step in Github_medium o9802's classing) */
            const int32_t *nz = S->below_nz + S->below_nzptr[last];
            int64_t nnz = S->below_nzptr[last + 1] - S->below_nzptr[last];
            if (S->tops_nzptr[atom + 1] - S->tops_nzptr[atom] < nnz) {
                nz = S->tops_nz + S->tops_nzptr[atom];
                nnz = S->tops_nzptr[atom + 1] - S->tops_nzptr[atom];
            }
            for (int64_t k = 0; k < nnz; k++)
                for (uint64_t bits = below[nz[k]] & tops_bits[nz[k]]; bits; bits &= bits - 1) {
                    int64_t w = nz[k];
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

/* Stack adjacency, directly-below form (cfgzip_lab.grammar.gnf.stack_below, the reference): bit b of
 * row a (bit nb = nt + families: BOTTOM) when some reachable stack may hold b right under a. The fixpoint
 *     below[S] has BOTTOM;  for A -> a B1..Bk: below[Bi] has B(i+1) (i < k), below[Bk] includes below[A]
 * over the tails' DAG: direct pairs from every reachable node's edge followed by an edge, "lasts" (the
 * symbols ending some word of a node) by one postorder pass, then the inclusions until nothing changes. */
/* The row of `below` a GNF tail symbol stands for: a plain nonterminal its own, a member F_c of family f
 * row nt + f (stack_below's key); -1 for any other symbol. */
/* below[b] |= below[a] for every b in ends[a] (rows of `words` words, nb of them), to the least fixpoint:
 * below[b] ends as the union of the rows of every a from which b is reached along a -> ends[a] (b itself
 * included). So the rows of one strongly connected component end equal, and each component's union flows to
 * the components it reaches: Tarjan's components (emitted sinks first) taken sources first, one pass. The
 * rounds over every row until none grew, which this replaces, gave the same fixpoint (it is unique) and took
 * ~80% of words_grammar on a counted MaskBench schema (Snowplow sp_333: 3,876 rows). 0, or -1 without memory. */
static int below_closure(uint64_t *below, const uint64_t *ends, int64_t nb, int64_t words) {
    int ret = -1;
    int64_t *ptr = calloc((size_t)nb + 1, sizeof(int64_t)), *succ = NULL, *index = NULL, *low = NULL;
    int64_t *tstack = NULL, *call = NULL, *order = NULL, *cstart = NULL;
    uint8_t *on = NULL;
    if (!ptr) return -1;
    for (int64_t a = 0; a < nb; a++) { /* the successors, as CSR (bit nb, BOTTOM, is never in ends) */
        int64_t deg = 0;
        for (int64_t w = 0; w < words; w++) deg += __builtin_popcountll(ends[a * words + w]);
        ptr[a + 1] = ptr[a] + deg;
    }
    succ = malloc((size_t)(ptr[nb] ? ptr[nb] : 1) * sizeof(int64_t));
    index = malloc((size_t)(nb ? nb : 1) * sizeof(int64_t));
    low = malloc((size_t)(nb ? nb : 1) * sizeof(int64_t));
    tstack = malloc((size_t)(nb ? nb : 1) * sizeof(int64_t));
    call = malloc((size_t)(nb ? nb : 1) * 2 * sizeof(int64_t));
    order = malloc((size_t)(nb ? nb : 1) * sizeof(int64_t));
    cstart = malloc((size_t)(nb + 1) * sizeof(int64_t));
    on = calloc((size_t)nb + 1, 1);
    if (!succ || !index || !low || !tstack || !call || !order || !cstart || !on) goto done;
    for (int64_t a = 0, k = 0; a < nb; a++)
        for (int64_t w = 0; w < words; w++)
            for (uint64_t bits = ends[a * words + w]; bits; bits &= bits - 1)
                succ[k++] = w * 64 + __builtin_ctzll(bits);
    for (int64_t a = 0; a < nb; a++) index[a] = -1;
    int64_t counter = 0, tsp = 0, ncomp = 0, nout = 0;
    for (int64_t root = 0; root < nb; root++) { /* Tarjan, iterative: call[] holds (node, next edge) */
        if (index[root] >= 0) continue;
        int64_t csp = 0;
        call[csp++] = root;
        call[csp++] = ptr[root];
        index[root] = low[root] = counter++;
        tstack[tsp++] = root;
        on[root] = 1;
        while (csp) {
            int64_t v = call[csp - 2], i = call[csp - 1];
            if (i < ptr[v + 1]) {
                call[csp - 1] = i + 1;
                int64_t w = succ[i];
                if (w < 0 || w >= nb) continue;
                if (index[w] < 0) {
                    index[w] = low[w] = counter++;
                    tstack[tsp++] = w;
                    on[w] = 1;
                    call[csp++] = w;
                    call[csp++] = ptr[w];
                } else if (on[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            csp -= 2;
            if (csp && low[v] < low[call[csp - 2]]) low[call[csp - 2]] = low[v];
            if (low[v] == index[v]) { /* a component: its members, then its start */
                cstart[ncomp++] = nout;
                int64_t w;
                do {
                    w = tstack[--tsp];
                    on[w] = 0;
                    order[nout++] = w;
                    index[w] = nb + ncomp - 1; /* (done: its component, past any index) */
                } while (w != v);
            }
        }
    }
    cstart[ncomp] = nout;
    for (int64_t c = ncomp - 1; c >= 0; c--) { /* sources first: every component flowing in is done */
        int64_t first = order[cstart[c]];
        uint64_t *u = below + first * words;
        for (int64_t k = cstart[c] + 1; k < cstart[c + 1]; k++) {
            const uint64_t *r = below + order[k] * words;
            for (int64_t w = 0; w < words; w++) u[w] |= r[w];
        }
        for (int64_t k = cstart[c] + 1; k < cstart[c + 1]; k++)
            memcpy(below + order[k] * words, u, (size_t)words * sizeof(uint64_t));
        for (int64_t k = cstart[c]; k < cstart[c + 1]; k++) {
            int64_t a = order[k];
            for (int64_t i = ptr[a]; i < ptr[a + 1]; i++) {
                int64_t b = succ[i];
                if (b < 0 || b >= nb || index[b] == index[a]) continue; /* (its own component: equal already) */
                uint64_t *to = below + b * words;
                for (int64_t w = 0; w < words; w++) to[w] |= u[w];
            }
        }
    }
    ret = 0;
done:
    free(ptr);
    free(succ);
    free(index);
    free(low);
    free(tstack);
    free(call);
    free(order);
    free(cstart);
    free(on);
    return ret;
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
    if (below_closure(S->below, ends, nb, words) < 0) goto done;
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

/* The words of each of `rows` rows of `bits` (`words` each) that are not zero, ascending, as offsets
 * (*ptr: rows + 1) into one list (*idx); -1 without memory. */
static int nonzero_words(const uint64_t *bits, int64_t rows, int64_t words, int32_t **ptr, int32_t **idx) {
    int64_t total = 0;
    for (int64_t i = 0; i < rows * words; i++) total += bits[i] != 0;
    *ptr = malloc((size_t)(rows + 1) * sizeof(int32_t));
    *idx = malloc((size_t)(total ? total : 1) * sizeof(int32_t));
    if (!*ptr || !*idx) return -1;
    int64_t pos = 0;
    for (int64_t r = 0; r < rows; r++) {
        (*ptr)[r] = (int32_t)pos;
        for (int64_t w = 0; w < words; w++)
            if (bits[r * words + w]) (*idx)[pos++] = (int32_t)w;
    }
    (*ptr)[rows] = (int32_t)pos;
    return 0;
}

/* grammar(table, num_atoms, start, families=()) -> the displacer's initial node.
 *   table: list of dicts atom -> tail node, one per GNF nonterminal; start: the start nonterminal;
 *   families: GNF.families as (item, min, max) tuples, max -1 when unbounded.
 * Builds the stack adjacency (compute_below), Displacer's tops / backtrack lists, and interns the
 * initial set {SEP} (as Displacer.__init__ does). */
PyObject *words_grammar(Words *S, PyObject *args) {
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
    if (nonzero_words(S->below, S->nb, S->below_words, &S->below_nzptr, &S->below_nz) < 0 ||
        nonzero_words(S->tops_bits, natoms, S->below_words, &S->tops_nzptr, &S->tops_nz) < 0)
        return PyErr_NoMemory();
    S->has_grammar = 1;
    int64_t initial = make1(S, S->sep, W_EPSILON);
    if (initial < 0) return raise_code(S, initial);
    return PyLong_FromLongLong(initial);
}

/* below_sets(bottom) -> list of sets: the stack adjacency as stack_below returns it (`bottom` for BOTTOM). */
PyObject *words_below_sets(Words *S, PyObject *arg) {
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

int need_grammar(Words *S) {
    if (!S->has_grammar) {
        PyErr_SetString(PyExc_RuntimeError, "word store: no grammar set (Words.grammar)");
        return -1;
    }
    return 0;
}
