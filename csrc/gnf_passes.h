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

#endif
