/* What the normal form's passes share (gnf_passes.c, gnf_merge.c): a pass's maps and memo, the symbol map
 * walk and the node lists of the Python side. */
#ifndef CFGZIP_GNF_PASSES_H
#define CFGZIP_GNF_PASSES_H
#include "words.h"

#define GNF_DROP INT64_MIN

typedef struct {
    const int64_t *to;
    int64_t m;
    int32_t *memo;
    int64_t mlen;
    const uint8_t *nullable;
    const int64_t *fto; /* a family member F_c of family f < nfto renamed to F_c of family fto[f] (merging) */
    int64_t nfto;
} GnfPass;

/* Every word of node with each symbol s in 0 <= s < P->m replaced by P->to[s] (gnf._map_symbols; edges
 * with to[s] == GNF_DROP dropped) and each family member renamed through P->fto, memoised in P->memo; < 0: an E_ code. */
int64_t gnf_map(Words *S, GnfPass *P, int64_t node, int depth);
/* The node ids of a Python sequence, checked (mode 0: node ids; 1: node ids or -1; 2: any integers);
 * NULL with the exception set. */
int64_t *gnf_node_list(Words *S, PyObject *seq, Py_ssize_t *count, int mode);

/* stack_below's row of a tail symbol: a nonterminal its own, a member F_c of family f < nf row n + f; -1
 * for any other symbol. */
static inline int64_t below_key_of(int64_t sym, int64_t n, int64_t nf) {
    if (sym >= 0 && sym < n) return sym;
    if (nf && sym >= FAMILY_BASE && sym < WIDE_IN && ((sym - FAMILY_BASE) >> 32) < nf) return n + ((sym - FAMILY_BASE) >> 32);
    return -1;
}

/* gnf.stack_below of the rows' tails (gnf_below.c): per row a < n + nf, its below-set ascending in
 * list[start[a] .. start[a + 1]) (BOTTOM as n + nf); the tails' nodes numbered children first (dense[node],
 * -1 for none; order[r], R of them). 0; 1 past the bitsets' memory bound (the caller takes the Python walk);
 * -1 with a Python error set. */
int gnf_below_sets(Words *S, int64_t **rows, const Py_ssize_t *lens, int64_t n, const int64_t *fitems, int64_t nf,
                   int64_t start, int64_t **start_out, int64_t **list_out, int32_t **dense_out, int32_t **order_out,
                   int64_t *R_out);
/* The numbering of gnf_below_sets (gnf_below.c); -1 with a Python error set. */
int gnf_number_tails(Words *S, int64_t **rows, const Py_ssize_t *lens, int64_t n, int64_t nf, int32_t **dense_out,
                     int32_t **order_out, int64_t *R_out);
/* The same sets as bitsets, over a numbering of gnf_number_tails (gnf_merge.c): where the sets are large. */
int gnf_below_bits(Words *S, int64_t **rows, const Py_ssize_t *lens, int64_t n, const int64_t *fitems, int64_t nf,
                   int64_t start, const int32_t *dense, const int32_t *order, int64_t R, uint64_t **below_out,
                   int64_t *W_out);

#endif
